"""A grounded validator over a ~1 MB input and a hostile answer: the work is bounded, never
quadratic in the input (app.core.answer.grounding: scans charged to the work budget, fuzzy search
only in windows around exact hits of pieces, indexes built once per job).

Each check ends with a verdict or ``TooMuchWork``; quadratic work would take minutes (and
meet pytest-timeout). bench/hostile_inputs.py measures the CPU each case takes."""

from __future__ import annotations

import asyncio
import json
import random
import string
from typing import Any

import pytest

from app.core.answer.grounding import build
from app.core.schema.steps import TooMuchWork, steps_for, work_budget
from app.core.turn.loop import Runtime, run_job
from app.core.wire.spec import JobSpec, ValidatorSpec
from tests.core.fakes import ScriptedClient, answer

INPUT_CHARS = 1_000_000


def _words_text(rnd: random.Random, size: int) -> str:
    words = ["".join(rnd.choices(string.ascii_letters, k=rnd.randint(2, 9))) for _ in range(5000)]
    return " ".join(rnd.choices(words, k=size // 4))[:size]


RND = random.Random(13)
PROSE = _words_text(RND, INPUT_CHARS)
INPUTS: dict[str, Any] = {
    "prose": PROSE,
    "spaced": PROSE.replace(" ", " \t\n ")[:INPUT_CHARS],
    "sharp-s": ("Straße " * (INPUT_CHARS // 7)),
    "one-letter": "a" * INPUT_CHARS,
    "numerals": "1 " * (INPUT_CHARS // 2),
    "json-strings": {"cells": [PROSE[i : i + 8] for i in range(0, INPUT_CHARS, 10)]},
}
FABRICATED = ["".join(RND.choices(string.ascii_letters, k=8)) for _ in range(3000)]


def checked(job_input: Any, value: Any, **fields: Any) -> Any:
    """The grounded check's verdict on ``value``, or the ``TooMuchWork`` that stopped it."""
    spec = ValidatorSpec.model_validate({"kind": "grounded", "paths": ["$"], **fields})
    check = build(spec, "validators[0]", job_input)
    try:
        # The budget the verdict gives validators (app.core.answer.verdict._validated).
        with work_budget(steps_for(len(json.dumps(value)))):
            return check.check(value)
    except TooMuchWork as exc:
        return exc


@pytest.mark.parametrize("mode", ["exact", "normalized", "fuzzy"])
@pytest.mark.parametrize("name", list(INPUTS))
def test_thousands_of_fabricated_values_over_a_megabyte_are_bounded(name: str, mode: str) -> None:
    result = checked(INPUTS[name], FABRICATED, mode=mode)
    assert isinstance(result, TooMuchWork) or result[0] is False


@pytest.mark.parametrize(
    ("name", "value", "fields"),
    [
        # every hit of "se" starts inside a folded "ß": each is found, then refused
        ("sharp-s", ["sest"] * 3, {}),
        # windows full of near matches; a long pattern's bit vectors span words
        ("one-letter", ["a" * 1999 + "b"], {"mode": "fuzzy", "threshold": 0.5}),
        ("one-letter", [f"{'a' * 40}{c}{'a' * 40}" for c in string.digits], {"mode": "fuzzy"}),
        # a match that would cross from one string of the input to the next, everywhere
        ("json-strings", ["\x00".join(["x"] * 500)], {"mode": "exact"}),
        ("numerals", list(range(2, 3000)), {"numbers": True}),
    ],
    ids=["misaligned", "long-fuzzy", "fuzzy-windows", "crossing", "numbers"],
)
def test_pathological_values_are_bounded(name: str, value: Any, fields: dict[str, Any]) -> None:
    result = checked(INPUTS[name], value, **fields)
    # Found or not, or stopped by the budget: any ending is right here, it has to end.
    assert isinstance(result, TooMuchWork) or result[0] in (True, False)


def test_a_hostile_answer_over_a_megabyte_input_ends_as_a_rejected_turn() -> None:
    spec = JobSpec.model_validate(
        {
            "task": "Extract the names",
            "input": PROSE,
            "signature": "{names [:string]}",
            "budget": {"maxTurns": 1},
            "maxOutputTokens": 16_000,
            "validators": [{"kind": "grounded", "paths": ["$.names[*]"], "mode": "fuzzy"}],
        }
    )
    client = ScriptedClient([answer({"names": FABRICATED})])
    result = asyncio.run(run_job(spec, Runtime(client=client)))
    (turn,) = result.turns
    assert turn.outcome in ("invalid", "rejected")
    assert result.envelope.error == "budget-exhausted"
