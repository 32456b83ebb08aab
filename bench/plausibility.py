"""The default checks and the bounded grammar on the embedded model (issue 33), on the
held-in set of bench/tasks_extraction.py, with the plain one-line prompt measured in the
same run.

    python bench/plausibility.py --per-shape 1     # 8 tasks, about 5 minutes on 2 shared cores
    python bench/plausibility.py                   # 80 tasks

Rows: the plain one-line prompt (one call under the schema's grammar, straight to the same
llama.cpp server), reprompt with its defaults (checks on, numbers' digits bounded in the
grammar), reprompt with ``checks: {plausibility: false}``, and reprompt with the schema's
plain grammar (``grammar`` off on the model: the bound's effect alone). Runs in process
through ``run_job`` (bench/real_model.py's harness), not over HTTP.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.real_model import Row, first_correct, run_row, stats
from bench.tasks_extraction import extraction_tasks

ROWS = [
    Row("plain one-line", "plain", "the plain one-line prompt, one call, the schema's grammar"),
    Row("reprompt", "reprompt", "defaults: checks on, bounded grammar"),
    Row("reprompt checks off", "reprompt", "checks off", job={"checks": {"plausibility": False}}),
]


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--per-shape", type=int, default=10)
    parser.add_argument("--max-tokens", type=int, default=96)
    parser.add_argument("--out", type=Path, default=Path("/tmp/plausibility-bench.json"))
    args = parser.parse_args()
    from app.providers.local import LocalModelServer
    from app.settings import default_data_dir

    tasks = extraction_tasks(per_shape=args.per_shape)
    started = time.perf_counter()
    report: dict[str, object] = {"tasks": len(tasks)}
    with LocalModelServer(default_data_dir(), api_key=None) as server:
        for row in ROWS:
            runs = run_row(row, server, tasks, args.max_tokens)
            s = stats(runs)
            report[row.name] = {
                **{k: s[k] for k in ("correct", "first", "valid", "calls", "wall_total")},
                "tokens": s["prompt"] + s["completion"],
                "first_correct": sum(first_correct(r) for r in runs),
                "failures": [
                    {"task": r.task.id, "answers": r.answers[:3], "error": r.error}
                    for r in runs
                    if not r.correct
                ],
            }
            print(row.name, json.dumps({k: s[k] for k in ("correct", "first", "calls")}))
    report["seconds"] = round(time.perf_counter() - started, 1)
    args.out.write_text(json.dumps(report, indent=1, default=str))
    print("wrote", args.out, "in", report["seconds"], "s")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
