"""The default checks and the bounded grammar on the embedded model (issue 33), over the
HTTP API, on the held-in set of bench/tasks_extraction.py, with the plain one-line prompt
measured in the same run.

    nice -n 19 python bench/plausibility.py                  # 80 tasks: real-model.md's section
    python bench/plausibility.py --per-shape 1 --out /tmp/p.md   # 8 tasks, a smoke run

One llama.cpp server (``LocalModelServer``) and one ``reprompt serve`` in front of it, both
real processes on loopback. The service's providers file declares the embedded model as
``with_local_model`` does (``default``: numbers' digits bounded in the grammar) and the same
model with ``grammar = false`` (the schema's own grammar, through ``response_format``). Jobs
go to ``POST /v1/jobs`` as a client sends them (task, input, schema, no validators) and are
read back with ``GET /v1/jobs/{id}?waitMs=``: the envelope, and each turn's answer and
diagnosis. Rows:

- *plain one-line*: one call straight to the llama.cpp server, the schema's grammar
  (``response_format``), the plain one-line prompt of issue 14 (``bench/tasks.py``);
- *reprompt checks on*: ``"checks": {"plausibility": true}``, bounded grammar;
- *reprompt checks off*: ``"checks": {"plausibility": false}``, bounded grammar;
- *reprompt grammar unbounded*: checks on, the schema's plain grammar (the bound's effect).

At most 3 calls a job, temperature 0, ``maxOutputTokens`` 96, one job at a time.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import httpx

from bench.common import Stack
from bench.efficacy import Run, machine, pct
from bench.real_model import run_single_shot, stats
from bench.tasks import Task, is_correct, plain_prompt
from bench.tasks_extraction import extraction_tasks

DOCS = Path(__file__).resolve().parents[1] / "docs" / "benchmarks" / "real-model.md"
SECTION = "## Plausibility checks and the bounded grammar (issue 33)"
UNBOUNDED = "-unbounded"  # the model id of the same model with the schema's plain grammar
ATTEMPTS = 3


@dataclass(frozen=True)
class Row:
    name: str
    about: str
    job: dict[str, Any]
    unbounded: bool = False


ROWS = (
    Row(
        "reprompt checks on",
        '`"checks": {"plausibility": true}`, numbers\' digits bounded in the grammar',
        {"checks": {"plausibility": True}},
    ),
    Row(
        "reprompt checks off",
        '`"checks": {"plausibility": false}`, numbers\' digits bounded in the grammar',
        {"checks": {"plausibility": False}},
    ),
    Row(
        "reprompt grammar unbounded",
        "checks on, the schema's plain grammar",
        {"checks": {"plausibility": True}},
        unbounded=True,
    ),
)
PLAIN = "plain one-line"

# The default checks' diagnoses (app/core/answer/plausibility.py), by kind.
KINDS = {
    "occurs nowhere in the input": "runaway number",
    "ran on past the number the input states": "runaway number",
    "the prompt's own wording": "copied instruction",
    "copies the instructions": "copied instruction",
}


def kind_of(diagnosis: str | None) -> str | None:
    """The default check a diagnosis comes from (None: not one of them)."""
    for marker, kind in KINDS.items():
        if diagnosis and marker in diagnosis:
            return kind
    return None


@dataclass
class Job:
    """One job's run over HTTP: the envelope and its turns, as the API returned them."""

    run: Run
    turns: list[dict[str, Any]]
    warnings: list[str]


def providers_file(stack: Stack, server: Any) -> Path:
    """The embedded model as ``with_local_model`` declares it, and its unbounded twin."""
    from app.providers.config import ProvidersConfig
    from app.providers.embedded import LOCAL_PROVIDER, with_local_model

    config = with_local_model(ProvidersConfig(), server)
    provider = config.providers[LOCAL_PROVIDER].model_dump(mode="json", exclude_none=True)
    lines = [f'default = "{config.default}"', "", f"[providers.{LOCAL_PROVIDER}]"]
    lines += [f"{k} = {json.dumps(v)}" for k, v in provider.items() if not isinstance(v, dict)]
    for model_id, model in config.models.items():
        fields = model.model_dump(mode="json", exclude_none=True)
        for name, grammar in ((model_id, fields["grammar"]), (model_id + UNBOUNDED, False)):
            lines += ["", f'[models."{name}"]']
            lines += [f"{k} = {json.dumps(v)}" for k, v in {**fields, "grammar": grammar}.items()]
    path = stack.tmp / "providers.toml"
    path.write_text("\n".join(lines) + "\n")
    return path


def run_jobs(api: str, model: str, row: Row, tasks: list[Task], max_tokens: int) -> list[Job]:
    jobs = []
    with httpx.Client(base_url=api, timeout=600, trust_env=False) as http:
        for task in tasks:
            body = {
                "task": task.task,
                "input": task.job_input,
                "schema": task.schema,
                "model": model + (UNBOUNDED if row.unbounded else ""),
                "budget": {"maxTurns": 1, "returnRetries": ATTEMPTS - 1},
                "maxOutputTokens": max_tokens,
                "maxOutputTokensCap": 2 * max_tokens,
                "temperature": 0,
                **row.job,
            }
            t0 = time.perf_counter()
            created = http.post("/v1/jobs", json=body)
            created.raise_for_status()
            job_id = created.json()["id"]
            while True:
                job = http.get(f"/v1/jobs/{job_id}", params={"waitMs": 30_000}).json()
                if job["status"] in ("succeeded", "failed", "cancelled"):
                    break
            run = Run(row.name, task, seconds=time.perf_counter() - t0)
            turns = job["turns"]
            run.calls = [(t["usage"]["inputTokens"], t["usage"]["outputTokens"]) for t in turns]
            run.answers = [t.get("answer") or "" for t in turns]
            run.last_text = run.answers[-1] if run.answers else None
            envelope = job["result"]
            if envelope["status"] == "success":
                run.accepted, run.value = True, envelope["data"]
            else:
                run.error = envelope.get("error")
            jobs.append(Job(run, turns, list(envelope.get("warnings") or [])))
            print(
                f"  {row.name:28} {task.id:12} {'ok' if run.correct else 'WRONG':5} "
                f"{len(turns)} calls {run.seconds:5.1f} s",
                flush=True,
            )
    return jobs


def parsed(text: str | None) -> Any:
    try:
        return json.loads(text or "")
    except ValueError:
        return None


def failure_kind(run: Run) -> str:
    """What kind of failure a wrong final answer is (the checks' own reading of it)."""
    from app.core.answer.plausibility import Plausibility

    if not run.accepted:
        return f"no valid answer ({run.error})"
    check = Plausibility.of(
        job_input=run.task.job_input, schema=run.task.schema, task=run.task.task
    )
    return kind_of(check.diagnosis(run.value)) or "wrong value"


def rejections(jobs: list[Job]) -> dict[str, int]:
    """The default checks' rejections: how many, of correct answers, fixed by the next one."""
    out = Counter[str]()
    for job in jobs:
        task, turns = job.run.task, job.turns
        rejected = False
        for i, turn in enumerate(turns):
            kind = kind_of(turn.get("diagnosis"))
            if kind is None:
                continue
            rejected = True
            out["rejected"] += 1
            out[f"rejected: {kind}"] += 1
            value = parsed(turn.get("answer"))
            out["correct rejected"] += value == task.expect
            # Equal to the cent, so counted correct, but not the input's digits (723.820496).
            out["rejected, correct to the cent"] += value is not None and is_correct(task, value)
            nxt = parsed(turns[i + 1].get("answer")) if i + 1 < len(turns) else None
            if i + 1 < len(turns):
                out["re-asked"] += 1
                # Fixed: the next answer is right and the checks let it through.
                passed = kind_of(turns[i + 1].get("diagnosis")) is None
                out["fixed by the re-ask"] += nxt is not None and is_correct(task, nxt) and passed
                out["same answer again"] += turns[i + 1].get("answer") == turn.get("answer")
        if rejected:
            out["jobs with a rejection"] += 1
            out["... that ended correct"] += job.run.correct
        out["warned"] += any(w.startswith("plausibility:") for w in job.warnings)
        trimmed = sum(w.startswith("plausibility:") and " trimmed to " in w for w in job.warnings)
        out["trimmed to the input's number"] += trimmed
        out["... in jobs that ended correct"] += trimmed if job.run.correct else 0
    return dict(out)


def first_correct(run: Run) -> bool:
    value = parsed(run.answers[0]) if run.answers else None
    if len(run.answers) == 1 and run.accepted:
        value = run.value
    return value is not None and is_correct(run.task, value)


def table(results: dict[str, list[Run]]) -> list[str]:
    lines = [
        "| system | correct | first call correct | valid | calls / job | tokens / job | "
        "wall s / job |",
        "|---|---|---|---|---|---|---|",
    ]
    for name, runs in results.items():
        s = stats(runs)
        first = sum(first_correct(r) for r in runs) / len(runs)
        lines.append(
            f"| {name} | {pct(s['correct'])} ({sum(r.correct for r in runs)}/{len(runs)}) | "
            f"{pct(first)} | {pct(s['valid'])} | {s['calls']:.2f} | "
            f"{s['prompt'] + s['completion']:.0f} | {s['wall']:.1f} |"
        )
    return lines


def failures_table(results: dict[str, list[Run]]) -> list[str]:
    kinds = {
        name: Counter(failure_kind(r) for r in runs if not r.correct)
        for name, runs in results.items()
    }
    every = sorted({k for c in kinds.values() for k in c})
    lines = ["| failure kind | " + " | ".join(results) + " |", "|---|" + "---|" * len(results)]
    lines += [f"| {k} | " + " | ".join(str(kinds[n][k]) for n in results) + " |" for k in every]
    return lines


def by_shape(results: dict[str, list[Run]]) -> list[str]:
    shapes = list(dict.fromkeys(r.task.family for r in next(iter(results.values()))))
    lines = ["| shape | " + " | ".join(results) + " |", "|---|" + "---|" * len(results)]
    for shape in shapes:
        cells = []
        for runs in results.values():
            mine = [r for r in runs if r.task.family == shape]
            cells.append(f"{sum(r.correct for r in mine)}/{len(mine)}")
        lines.append(f"| {shape} | " + " | ".join(cells) + " |")
    return lines


def section(
    results: dict[str, list[Run]], checks: dict[str, dict[str, int]], args: Any, seconds: float
) -> str:
    info = machine()
    keys = [
        "rejected",
        "rejected: runaway number",
        "rejected: copied instruction",
        "correct rejected",
        "rejected, correct to the cent",
        "re-asked",
        "fixed by the re-ask",
        "same answer again",
        "jobs with a rejection",
        "... that ended correct",
        "warned",
        "trimmed to the input's number",
        "... in jobs that ended correct",
    ]
    lines = [
        SECTION,
        "",
        f"`{args.command}`: {len(next(iter(results.values())))} tasks of "
        "`bench/tasks_extraction.py` (counts beside years, durations, prices, two people and "
        "places, dates and times, enums, nested order lines, weights), schema only, no "
        "validators, sent **over the HTTP API** (`POST /v1/jobs` to `reprompt serve`, read "
        "back with `GET /v1/jobs/{id}`), at most 3 calls, `maxOutputTokens` 96, temperature "
        "0, the embedded gemma3 270M. The plain one-line prompt goes straight to the same "
        "llama.cpp server under the schema's grammar, in the same run. *grammar unbounded* "
        "is the same model declared with `grammar = false` (the schema's own grammar): the "
        "digit bound's effect alone. *First call correct* judges the first turn's answer. "
        f"Run {info['date']}, {seconds / 60:.0f} min, on a machine with {info['nproc']} cores "
        "**shared with four other agents' builds and tests** (wall times are not the model's).",
        "",
        *table(results),
        "",
        "Correct by shape:",
        "",
        *by_shape(results),
        "",
        "Why the wrong answers were wrong (the default checks' reading of the final answer; "
        "*no valid answer*: the job ended without one, with its error code):",
        "",
        *failures_table(results),
        "",
        "The default checks' rejections (an answer the checks rejected; *fixed by the re-ask*: "
        "the next answer was the expected one and passed the checks; *correct rejected*: a "
        "rejected answer that was the expected one exactly; *correct to the cent*: one that "
        "the correct % would count, its digits run on past the input's, as `723.820496` for "
        "`723.82`; *trimmed*: a number the input states with decimals run on, trimmed back "
        "to it instead of a rejection, with a warning):",
        "",
        "| | " + " | ".join(checks) + " |",
        "|---|" + "---|" * len(checks),
        *(f"| {k} | " + " | ".join(str(c.get(k, 0)) for c in checks.values()) + " |" for k in keys),
        "",
    ]
    return "\n".join(lines)


def write_section(page: Path, text: str) -> None:
    """``text`` in place of the page's issue-33 section (appended when it has none)."""
    old = page.read_text() if page.exists() else ""
    start = old.find(SECTION)
    if start < 0:
        page.write_text(old.rstrip("\n") + "\n\n" + text)
        return
    end = old.find("\n## ", start + len(SECTION))
    page.write_text(old[:start] + text + ("\n" + old[end + 1 :] if end >= 0 else ""))


def write(
    args: Any, results: dict[str, list[Run]], checks: dict[str, dict[str, int]], seconds: float
) -> None:
    """The page's section and every answer (``--raw``), for the rows run so far."""
    write_section(args.out or DOCS, section(results, checks, args, seconds))
    raw = {
        name: [
            {
                "task": r.task.id,
                "answers": r.answers,
                "correct": r.correct,
                "error": r.error,
                "calls": r.calls,
            }
            for r in runs
        ]
        for name, runs in results.items()
    }
    args.raw.write_text(json.dumps(raw, indent=0, default=str))


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--per-shape", type=int, default=10)
    parser.add_argument("--max-tokens", type=int, default=96)
    parser.add_argument("--rows", default=None, help="rows to run, comma-separated")
    parser.add_argument("--out", type=Path, default=None, help="the page (default: the docs')")
    parser.add_argument("--raw", type=Path, default=Path("/tmp/plausibility-bench.json"))
    args = parser.parse_args()
    args.command = "python bench/plausibility.py" + "".join(f" {a}" for a in sys.argv[1:])
    from app.providers.local import LocalModelServer
    from app.settings import default_data_dir

    chosen = args.rows.split(",") if args.rows else [PLAIN, *(r.name for r in ROWS)]
    tasks = extraction_tasks(per_shape=args.per_shape)
    started = time.perf_counter()
    results: dict[str, list[Run]] = {}
    checks: dict[str, dict[str, int]] = {}
    with LocalModelServer(default_data_dir(), api_key=None) as server, Stack() as stack:
        env = {k: v for k, v in os.environ.items() if not k.startswith("REPROMPT_")}
        env.update(
            REPROMPT_PROVIDERS=str(providers_file(stack, server)),
            REPROMPT_DATA_DIR=str(stack.tmp / "data"),
            REPROMPT_WORKER_METRICS_PORT="0",
        )
        api = stack.service("serve", env, ready_s=600).url
        for name in chosen:
            if name == PLAIN:
                results[name] = run_single_shot(
                    server.base_url,
                    server.model_name,
                    tasks,
                    args.max_tokens,
                    name=name,
                    prompt=plain_prompt,
                )
            else:
                row = next(r for r in ROWS if r.name == name)
                jobs = run_jobs(api, server.model_name, row, tasks, args.max_tokens)
                results[name] = [j.run for j in jobs]
                checks[name] = rejections(jobs)
            print(name, json.dumps({k: round(v, 3) for k, v in stats(results[name]).items()}))
            # Written after each row: a long run cut short still leaves its finished rows.
            write(args, results, checks, time.perf_counter() - started)
    print(f"wrote {args.out or DOCS} and {args.raw} in {time.perf_counter() - started:.0f} s")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
