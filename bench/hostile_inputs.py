"""How long the hostile inputs of tests/abuse take: CPU ms per case, the median of rounds.

The abuse tests say what the service does with each hostile thing (a 422, a rejected
answer, a check stopped by its work budget); this says how fast. Each case runs the same
call its test makes, in this process, timed by ``time.thread_time`` (CPU, not wall: the
machine may be shared). Linear work shows as milliseconds; a quadratic or exponential
regression as seconds or more.

    python bench/hostile_inputs.py [--rounds 3] [--report docs/benchmarks/hostile-inputs.md]
"""

from __future__ import annotations

import argparse
import json
import platform
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from app.core.answer.check import check_answer
from app.core.schema.example import example_for
from app.core.schema.validation import check_schema
from tests.abuse import test_builtin_patterns as builtin
from tests.abuse import test_grounding as grounding
from tests.abuse import test_patterns as patterns
from tests.abuse import test_schemas as schemas


def builtin_patterns() -> None:
    for name, pattern in builtin.PATTERNS:
        for text in builtin.hostile_inputs(pattern):
            for run in builtin.runs_of(name, pattern):
                run(text)


def evil_pattern_answer() -> None:
    schema = {"type": "object", "properties": {"a": {"type": "string", "pattern": patterns.EVIL}}}
    check_answer(json.dumps({"a": patterns.EVIL_ANSWER * 1000}), schema)


def exponential_union() -> None:
    check_schema(schemas.UNION)
    check_answer("[" * 40 + "true" + "]" * 40, schemas.UNION)


def grounded_fabrications() -> None:
    for mode in ("exact", "normalized", "fuzzy"):
        grounding.checked(grounding.INPUTS["prose"], grounding.FABRICATED, mode=mode)


CASES: dict[str, tuple[str, Callable[[], Any]]] = {
    "builtin-patterns": (
        f"every built-in pattern ({len(builtin.PATTERNS)}) on its hostile inputs, each way it runs",
        builtin_patterns,
    ),
    "evil-pattern": (
        "`^(a+)+$` against a 31 kB answer of `a`s and a `!` (RE2)",
        evil_pattern_answer,
    ),
    "exponential-union": (
        "a union that doubles per level, on an answer 40 deep (work budget)",
        exponential_union,
    ),
    "allof-diamond": (
        "an allOf diamond of 2^20 paths, on a 6-character answer",
        lambda: check_answer('"text"', schemas.DIAMOND),
    ),
    "example-builder": (
        "the example builder on both schemas (gives up)",
        lambda: (example_for(schemas.DIAMOND), example_for(schemas.UNION)),
    ),
    "grounded-1mb": (
        "3,000 fabricated values over a 1 MB input, each grounding mode",
        grounded_fabrications,
    ),
}


def cpu_ms(case: Callable[[], Any]) -> float:
    began = time.thread_time()
    case()
    return (time.thread_time() - began) * 1000


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--report", type=Path, help="write the table to this Markdown page")
    args = parser.parse_args()
    rows = []
    for name, (what, case) in CASES.items():
        median = statistics.median(cpu_ms(case) for _ in range(args.rounds))
        rows.append(f"| {name} | {what} | {median:,.1f} |")
        print(rows[-1], flush=True)
    if args.report:
        args.report.write_text(page(rows, args.rounds))


def page(rows: list[str], rounds: int) -> str:
    return "\n".join(
        [
            "# Hostile inputs",
            "",
            "CPU per case, the median of "
            f"{rounds} rounds, from `python bench/hostile_inputs.py --rounds {rounds} "
            "--report docs/benchmarks/hostile-inputs.md` on a shared "
            f"{platform.machine()} machine (Python {platform.python_version()}). The cases are "
            "tests/abuse's; those tests check what the service does, this page how long it takes.",
            "",
            "| case | what | CPU ms |",
            "|---|---|---:|",
            *rows,
            "",
        ]
    )


if __name__ == "__main__":
    main()
