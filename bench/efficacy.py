"""Correction efficacy against peers, on the flaky-model simulator (issue 5, item 2).

    .venv/bin/python bench/efficacy.py            # 240 tasks, writes docs/benchmarks/efficacy.md
    .venv/bin/python bench/efficacy.py --quick    # 30 tasks, < 60 s, writes to /tmp

The same seeded task set (bench/tasks.py) is run, with the same simulator configuration and
a limit of 3 LLM calls per job, by:

- ``single-shot``: one call (schema in the system prompt), json.loads + jsonschema + the
  semantic validators; no repair, no retry;
- ``instructor JSON`` / ``instructor TOOLS``: instructor from PyPI, ``max_retries=2`` (3
  calls), its default reask, a pydantic model equivalent to the schema whose
  ``model_validator`` runs the same semantic validators;
- ``reprompt``: ``run_job`` through the real router over HTTP, ``structuredOutput:
  "prompt"``, ``maxTurns 1 + returnRetries 2``, the validators as ``JobSpec.validators``;
- ``reprompt strict``: the same with ``strict: true`` (no repair tier), to show how much of
  the result comes from repairs rather than from feedback.

and, for grounded extraction (issue 13), reprompt with the validators a client can write
without knowing the answer:

- ``reprompt schema-only``: no validators at all;
- ``reprompt grounded``: one ``grounded`` validator over each family's extracted fields
  (``bench/tasks.py`` ``GROUNDED_PATHS``, numbers included) instead of the task's checks.

Every system gets a fresh simulator process-thread with the same SimConfig.
"""

from __future__ import annotations

import argparse
import asyncio
import importlib.metadata as md
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import httpx
import jsonschema

from bench.tasks import (
    GROUNDED_PATHS,
    MODELS,
    MODES,
    TASK_SEED,
    Task,
    grounded_validators,
    is_correct,
    semantic_diagnosis,
    sim_tasks,
)

ROOT = Path(__file__).resolve().parents[1]
DOCS = ROOT / "docs" / "benchmarks"

SIM_SEED = 7
FIX = 0.8
BLIND = 0.1
VERBOSE_TOKENS = 600  # truncation mode: a 600-token preamble against a 512-token limit
MAX_TOKENS = 512
ATTEMPTS = 3
TEMPERATURE = 0.0
SYSTEMS = ("single-shot", "instructor JSON", "instructor TOOLS", "reprompt", "reprompt strict")
GROUNDED_SYSTEMS = ("reprompt schema-only", "reprompt grounded")


@dataclass
class Run:
    system: str
    task: Task
    calls: list[tuple[int, int]] = field(default_factory=list)  # (prompt, completion) tokens
    accepted: bool = False  # the system returned a value it considers valid
    value: Any = None
    error: str | None = None
    seconds: float = 0.0
    last_text: str | None = None  # the final raw answer (bench/real_model.py)
    answers: list[str] = field(default_factory=list)  # every raw answer (bench/real_model.py)
    outcomes: list[str] = field(default_factory=list)  # each turn's outcome (reprompt only)

    @property
    def correct(self) -> bool:
        return self.accepted and is_correct(self.task, self.value)

    @property
    def tokens(self) -> int:
        return sum(p + c for p, c in self.calls)

    @property
    def wasted(self) -> int:
        if self.correct:
            return sum(p + c for p, c in self.calls[:-1])
        return self.tokens


def sim_config() -> Any:
    from reprompt_sim.server import SimConfig

    return SimConfig(
        seed=SIM_SEED,
        failure_rates={},  # each task's directive sets its own {"mode": 1.0}
        fix_probability=FIX,
        blind_fix_probability=BLIND,
        verbose_tokens=VERBOSE_TOKENS,
    )


def system_prompt(task: Task) -> str:
    return (
        "Answer with a single JSON object that matches this JSON Schema, and nothing else.\n"
        + json.dumps(task.schema)
    )


# ---------------------------------------------------------------- single-shot


def judge_single(run: Run, task: Task, text: str) -> None:
    """The single-shot baseline's check: plain JSON, the schema, the validators; no repair."""
    try:
        value = json.loads(text)
        jsonschema.validate(value, task.schema)
        diagnosis = semantic_diagnosis(task, value)
        if diagnosis:
            raise ValueError(diagnosis)
        run.accepted, run.value = True, value
    except Exception as exc:
        run.error = type(exc).__name__


def run_single_shot(url: str, tasks: list[Task]) -> list[Run]:
    runs = []
    with httpx.Client(base_url=f"{url}/v1", timeout=60, trust_env=False) as client:
        for task in tasks:
            run = Run("single-shot", task)
            t0 = time.perf_counter()
            body = {
                "model": "sim",
                "temperature": TEMPERATURE,
                "max_tokens": MAX_TOKENS,
                "messages": [
                    {"role": "system", "content": system_prompt(task)},
                    {"role": "user", "content": task.user_message()},
                ],
            }
            data = client.post("/chat/completions", json=body).json()
            usage = data.get("usage") or {}
            run.calls.append((usage.get("prompt_tokens", 0), usage.get("completion_tokens", 0)))
            text = data["choices"][0]["message"].get("content") or ""
            judge_single(run, task, text)
            run.seconds = time.perf_counter() - t0
            runs.append(run)
    return runs


# ---------------------------------------------------------------- instructor


def run_instructor(url: str, tasks: list[Task], mode_name: str) -> list[Run]:
    import instructor
    import openai

    mode = getattr(instructor.Mode, mode_name)
    runs = []
    raw = openai.OpenAI(base_url=f"{url}/v1", api_key="x", max_retries=0, timeout=60)
    client = instructor.from_openai(raw, mode=mode)
    current: list[tuple[int, int]] = []

    def on_response(completion: Any) -> None:
        usage = completion.usage
        current.append((usage.prompt_tokens, usage.completion_tokens) if usage else (0, 0))

    client.on("completion:response", on_response)
    for task in tasks:
        current.clear()
        run = Run(f"instructor {mode_name}", task)
        t0 = time.perf_counter()
        try:
            result = client.chat.completions.create(
                model="sim",
                response_model=MODELS[task.family],
                messages=[{"role": "user", "content": task.user_message()}],
                max_retries=ATTEMPTS - 1,
                max_tokens=MAX_TOKENS,
                temperature=TEMPERATURE,
                context={"task": task},
            )
            run.accepted, run.value = True, result.model_dump()
        except Exception as exc:
            run.error = type(exc).__name__
        run.calls = list(current)
        run.seconds = time.perf_counter() - t0
        runs.append(run)
    return runs


# ---------------------------------------------------------------- reprompt


def checks_for(task: Task, checks: str) -> list[dict[str, Any]]:
    """The validators of a job: the task's own, a grounded one, or none."""
    return {"task": task.validators, "grounded": grounded_validators(task), "none": []}[checks]


def job_for(
    task: Task, *, strict: bool, structured: str = "prompt", checks: str = "task"
) -> dict[str, Any]:
    return {
        "task": task.task,
        "input": task.input,
        "schema": task.schema,
        "validators": checks_for(task, checks),
        "budget": {"maxTurns": 1, "returnRetries": ATTEMPTS - 1},
        "structuredOutput": structured,
        "maxOutputTokens": MAX_TOKENS,
        "temperature": TEMPERATURE,
        "strict": strict,
    }


async def _run_reprompt(
    url: str, tasks: list[Task], strict: bool, name: str, checks: str = "task"
) -> list[Run]:
    from app.core.turn.loop import Runtime, run_job
    from app.core.wire.spec import JobSpec
    from app.providers.config import ModelConfig, ProviderConfig, ProvidersConfig
    from app.providers.embedded import open_router
    from app.providers.http import make_client

    config = ProvidersConfig(
        providers={"sim": ProviderConfig(kind="openai", base_url=f"{url}/v1", api_key_env=None)},
        models={"sim": ModelConfig(provider="sim", structured="prompt")},
    )
    runs = []
    with tempfile.TemporaryDirectory() as tmp:
        async with (
            make_client() as http,
            open_router(http, data_dir=Path(tmp), config=config) as router,
        ):
            for task in tasks:
                run = Run(name, task)
                t0 = time.perf_counter()
                spec = JobSpec.model_validate(job_for(task, strict=strict, checks=checks))
                result = await run_job(spec, Runtime(client=router))
                run.calls = [(t.usage.input_tokens, t.usage.output_tokens) for t in result.turns]
                run.answers = [t.answer or "" for t in result.turns]
                run.outcomes = [t.outcome for t in result.turns]
                env = result.envelope
                if env.status == "success":
                    run.accepted, run.value = True, env.data
                else:
                    run.error = env.error
                run.seconds = time.perf_counter() - t0
                runs.append(run)
    return runs


def run_reprompt(url: str, tasks: list[Task], strict: bool, name: str, checks: str) -> list[Run]:
    return asyncio.run(_run_reprompt(url, tasks, strict, name, checks))


# ---------------------------------------------------------------- grounding


def grounding_counts(runs: list[Run]) -> dict[str, int]:
    """Counts of the wrong-but-schema-valid answers over every answer of every job.

    Wrong-but-valid: parsed and matching the schema after reprompt's repairs, yet not the
    expected answer. Also how many a validator rejected (caught), how many of those the next
    answer fixed, and correct answers rejected all the same.
    """
    from app.core.answer.check import check_answer

    counts = dict.fromkeys(
        (
            "jobs",
            "correct",
            "answers",
            "wrong_valid",
            "caught",
            "fixed",
            "jobs_caught",
            "jobs_fixed",
            "false_rejections",
            "accepted_wrong",
        ),
        0,
    )
    for run in runs:
        judged: list[bool | None] = []
        for text in run.answers:
            checked = check_answer(text, run.task.schema)
            judged.append(is_correct(run.task, checked.value) if checked.ok else None)
        caught = False
        for i, (right, outcome) in enumerate(zip(judged, run.outcomes, strict=False)):
            counts["answers"] += 1
            if right is False:
                counts["wrong_valid"] += 1
                if outcome == "rejected":
                    counts["caught"] += 1
                    caught = True
                    counts["fixed"] += i + 1 < len(judged) and judged[i + 1] is True
            elif right is True and outcome == "rejected":
                counts["false_rejections"] += 1
        counts["jobs"] += 1
        counts["correct"] += run.correct
        counts["jobs_caught"] += caught
        counts["jobs_fixed"] += caught and run.correct
        counts["accepted_wrong"] += run.accepted and not run.correct
    return counts


def grounding_table(results: dict[str, list[Run]]) -> list[str]:
    rows = [
        "| system | correct jobs | answers | wrong but schema-valid | caught (rejected) | "
        "fixed by the next answer | jobs with a catch that ended correct | correct answers "
        "rejected | jobs accepted wrong |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for system, runs in results.items():
        c = grounding_counts(runs)
        caught = (
            f"{c['caught']} ({pct(c['caught'] / c['wrong_valid'])})" if c["wrong_valid"] else "0"
        )
        fixed = f"{c['fixed']} ({pct(c['fixed'] / c['caught'])})" if c["caught"] else "0"
        rows.append(
            f"| {system} | {c['correct']}/{c['jobs']} | {c['answers']} | {c['wrong_valid']} | "
            f"{caught} | {fixed} | {c['jobs_fixed']}/{c['jobs_caught']} | "
            f"{c['false_rejections']} | {c['accepted_wrong']} |"
        )
    return rows


def render_grounding(results: dict[str, list[Run]]) -> list[str]:
    lines = [
        "## Grounded extraction (issue 13)",
        "",
        "The same tasks through reprompt (same settings as above) with only the checks a "
        "client can write without knowing the answer: `reprompt schema-only` has no "
        "validators; `reprompt grounded` has one `grounded` validator (mode `normalized`, "
        "`numbers: true`) over each family's extracted fields: "
        + "; ".join(f"{family} `{', '.join(paths)}`" for family, paths in GROUNDED_PATHS.items())
        + ". A *wrong but schema-valid* answer parses and matches the schema (after "
        "reprompt's repairs) but is not the expected answer; *caught* = a validator "
        "rejected it; *fixed* = the re-ask's answer was correct.",
        "",
    ]
    lines += grounding_table(results)
    grounded = results.get("reprompt grounded")
    if grounded:
        lines += [
            "",
            "By family, `reprompt grounded`, every mode:",
            "",
            "| family | wrong but schema-valid | caught | fixed by the next answer | "
            "jobs accepted wrong |",
            "|---|---|---|---|---|",
        ]
        for family in GROUNDED_PATHS:
            runs = [r for r in grounded if r.task.family == family]
            if not runs:
                continue
            c = grounding_counts(runs)
            lines.append(
                f"| {family} | {c['wrong_valid']} | {c['caught']} | {c['fixed']} | "
                f"{c['accepted_wrong']} |"
            )
    return lines


# ---------------------------------------------------------------- reporting


NOTES = "## What this means"


def with_notes(out: Path, text: str) -> str:
    """``text`` plus the hand-written "What this means" section of the existing ``out``."""
    if out.exists():
        old = out.read_text()
        if NOTES in old:
            return text.rstrip() + "\n\n" + old[old.index(NOTES) :]
    return text


def machine() -> dict[str, str]:
    cpu = "unknown"
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    versions = {}
    for pkg in (
        "reprompt",
        "instructor",
        "openai",
        "pydantic",
        "httpx",
        "jsonschema",
        "llama_cpp_python",
        "matplotlib",
    ):
        try:
            versions[pkg] = md.version(pkg)
        except md.PackageNotFoundError:
            versions[pkg] = "not installed"
    try:
        commit = subprocess.run(
            ["git", "rev-parse", "--short", "HEAD"],
            cwd=ROOT,
            capture_output=True,
            text=True,
            check=False,
        ).stdout.strip()
    except OSError:
        commit = "?"
    return {
        "nproc": str(os.cpu_count()),
        "cpu": cpu,
        "python": platform.python_version(),
        "platform": platform.platform(),
        "commit": commit,
        "versions": ", ".join(f"{k} {v}" for k, v in versions.items()),
        "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
    }


def summarize(runs: list[Run]) -> dict[str, Any]:
    n = len(runs)
    ok = [r for r in runs if r.correct]
    return {
        "n": n,
        "success": len(ok) / n if n else 0.0,
        "accepted_wrong": sum(1 for r in runs if r.accepted and not r.correct),
        "calls": statistics.mean(len(r.calls) for r in runs) if n else 0.0,
        "prompt_ok": statistics.mean(sum(p for p, _ in r.calls) for r in ok) if ok else 0.0,
        "completion_ok": statistics.mean(sum(c for _, c in r.calls) for r in ok) if ok else 0.0,
        "wasted": sum(r.wasted for r in runs),
        "wasted_per_job": sum(r.wasted for r in runs) / n if n else 0.0,
        "total_tokens": sum(r.tokens for r in runs),
    }


def growth(runs: list[Run]) -> tuple[list[float], int]:
    """Mean prompt tokens of call 1, 2, 3 over the jobs that made three calls."""
    three = [r for r in runs if len(r.calls) >= 3]
    if not three:
        return [], 0
    return [statistics.mean(r.calls[i][0] for r in three) for i in range(3)], len(three)


def wilson(k: int, n: int, z: float = 1.96) -> tuple[float, float]:
    """95% Wilson score interval for k successes out of n."""
    if n == 0:
        return 0.0, 0.0
    p = k / n
    centre = (p + z * z / (2 * n)) / (1 + z * z / n)
    half = z * ((p * (1 - p) / n + z * z / (4 * n * n)) ** 0.5) / (1 + z * z / n)
    return max(0.0, centre - half), min(1.0, centre + half)


def pct(x: float) -> str:
    return f"{100 * x:.1f}%"


def summary_table(results: dict[str, list[Run]], keep: Any) -> list[str]:
    rows = [
        "| system | success (95% CI) | accepted but wrong | LLM calls / job | prompt tok / "
        "successful job | completion tok / successful job | wasted tok / job | total tokens |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for system, runs in results.items():
        rs = [r for r in runs if keep(r)]
        s = summarize(rs)
        lo, hi = wilson(sum(1 for r in rs if r.correct), len(rs))
        rows.append(
            f"| {system} | {pct(s['success'])} ({pct(lo)}-{pct(hi)}) | {s['accepted_wrong']} | "
            f"{s['calls']:.2f} | {s['prompt_ok']:.0f} | {s['completion_ok']:.0f} | "
            f"{s['wasted_per_job']:.0f} | {s['total_tokens']} |"
        )
    return rows


def render(
    results: dict[str, list[Run]],
    args: argparse.Namespace,
    info: dict[str, str],
    elapsed: float,
    plots: list[str],
    grounded: dict[str, list[Run]] | None = None,
) -> str:
    lines = _setup_section(results, args, elapsed)
    lines += _results_section(results)
    lines += _by_mode_sections(results)
    lines += _growth_section(results)
    lines += ["", "## Plots", ""]
    lines += [f"![{p}]({p})" for p in plots]
    if grounded:
        lines += ["", *render_grounding(grounded)]
    lines += [
        "",
        "## Machine",
        "",
        f"- {info['nproc']} cores, CPU `{info['cpu']}`, {info['platform']}",
        f"- Python {info['python']}; {info['versions']}",
        f"- commit {info['commit']} (plus the uncommitted bench files), run at {info['date']}",
        f"- seeds: task set {TASK_SEED}, simulator {SIM_SEED}",
        "",
    ]
    return "\n".join(lines)


def _setup_section(
    results: dict[str, list[Run]], args: argparse.Namespace, elapsed: float
) -> list[str]:
    """The page's title, the tasks, the simulator and each system's configuration."""
    n_tasks = len(next(iter(results.values())))
    return [
        "# Correction efficacy: reprompt vs instructor vs single-shot (simulator)",
        "",
        f"Generated by `{args.command}` in {elapsed:.0f} s"
        + (" (**--quick**: a small subset, not the reference numbers)" if args.quick else "")
        + ".",
        "",
        "## Setup",
        "",
        f"- **Tasks**: {n_tasks} from `bench/tasks.py` "
        f"(`sim_tasks(per_cell={args.per_cell})`, task seed {TASK_SEED}): {len(MODES)} "
        "first-answer modes x 3 families (invoice, contact, "
        f"stats) x {args.per_cell}. Each task's `[[sim ...]]` directive fixes the expected "
        "answer (`expect`) and the defect of the first answer (`fail: {mode: 1.0}`; `ok` = "
        "none). Success = the system returned a value **and** it equals the expected answer.",
        f"- **Simulator**: in-process `serve_in_background(SimConfig(seed={SIM_SEED}, "
        f"failure_rates={{}}, fix_probability={FIX}, blind_fix_probability={BLIND}, "
        f"verbose_tokens={VERBOSE_TOKENS}))`, a fresh server for each system. A re-ask is "
        f"fixed with p={FIX} if the feedback names the defect (field name/path, or a "
        f"syntax word), else p={BLIND}; otherwise the same kind of defect comes back.",
        f"- **Same for all**: the same tasks, the same schema and semantic validators "
        f"(reprompt's own `app.core.answer.validators`, run inside instructor's pydantic "
        f"`model_validator` and after the single-shot's `jsonschema`), at most {ATTEMPTS} LLM "
        f"calls per job, `temperature={TEMPERATURE}`, `max_tokens={MAX_TOKENS}` on the first "
        "call, no transport faults.",
        "",
        "| system | configuration |",
        "|---|---|",
        "| single-shot | one `POST /v1/chat/completions` (system: schema; user: task + input), "
        "`json.loads` + `jsonschema.validate` + validators; no repair, no retry |",
        f"| instructor JSON | `instructor.from_openai(OpenAI(base_url=sim, max_retries=0), "
        f"mode=Mode.JSON)`, `create(response_model=<pydantic model>, max_retries={ATTEMPTS - 1}, "
        f"context={{task}})`; default reask (full history: previous answer + the "
        "ValidationError text) |",
        "| instructor TOOLS | the same with `mode=Mode.TOOLS` (forced function call) |",
        f"| reprompt | `run_job(JobSpec, Runtime(client=router))` over HTTP to the sim; "
        f'`structuredOutput: "prompt"`, `budget: {{maxTurns: 1, returnRetries: {ATTEMPTS - 1}}}`, '
        "validators in `JobSpec.validators`, collapsed feedback, repairs on (defaults); a "
        "`length` finish is re-sent with twice the output limit |",
        "| reprompt strict | the same with `strict: true` (no repair tier) |",
        "",
        "Tokens are the simulator's `usage` (ceil(chars/4)); instructor's are read through its "
        "`completion:response` hook, reprompt's from its turn records.",
        "",
    ]


def _results_section(results: dict[str, list[Run]]) -> list[str]:
    """The summary over all tasks, then without the truncation tasks."""
    lines = ["## Results, all tasks", ""]
    lines += summary_table(results, lambda r: True)
    lines += [
        "",
        "### The same, without the truncation tasks",
        "",
        "Instructor never recovers from a `length` finish (it raises `IncompleteOutputException` "
        "without a re-ask), and a recovered truncation costs reprompt the 600-token preamble "
        "twice; this table leaves those tasks out so the per-job token figures compare like "
        "with like.",
        "",
    ]
    lines += summary_table(results, lambda r: r.task.mode != "truncation")
    return [
        *lines,
        "",
        "*Wasted tokens*: prompt + completion tokens of every call that did not produce the "
        "final correct answer (all of a failed job's tokens).",
        "",
    ]


# The tables by failure mode: a title, and one system's cell from its runs of one mode.
_BY_MODE: tuple[tuple[str, Callable[[dict[str, Any]], str]], ...] = (
    ("Success rate by failure mode", lambda s: pct(s["success"])),
    ("LLM calls per job by failure mode", lambda s: f"{s['calls']:.2f}"),
    ("Wasted tokens per job by failure mode", lambda s: f"{s['wasted_per_job']:.0f}"),
)


def _by_mode_sections(results: dict[str, list[Run]]) -> list[str]:
    """Success, calls and wasted tokens, each as a table of mode by system."""
    systems = list(results)
    lines: list[str] = []
    for i, (title, cell) in enumerate(_BY_MODE):
        lines += [
            *([] if i == 0 else [""]),
            f"## {title}",
            "",
            "| mode | " + " | ".join(systems) + " |",
            "|---|" + "---|" * len(systems),
        ]
        for mode in MODES:
            cells = [
                cell(summarize([r for r in results[system] if r.task.mode == mode]))
                for system in systems
            ]
            lines.append(f"| {mode} | " + " | ".join(cells) + " |")
    return lines


def _growth_section(results: dict[str, list[Run]]) -> list[str]:
    """Prompt tokens of calls 1, 2 and 3 for the jobs that used all three."""
    lines = [
        "",
        "## Context growth: prompt tokens per call",
        "",
        "Mean prompt tokens of call 1 (first ask), call 2 (retry 1) and call 3 (retry 2), over "
        "the jobs of each system that used all three calls.",
        "",
        "| system | jobs with 3 calls | call 1 | call 2 (retry 1) | call 3 (retry 2) | "
        "retry 2 / retry 1 | retry 1 / call 1 |",
        "|---|---|---|---|---|---|---|",
    ]
    for system in results:
        g, k = growth(results[system])
        if g:
            lines.append(
                f"| {system} | {k} | {g[0]:.0f} | {g[1]:.0f} | {g[2]:.0f} | "
                f"{g[2] / g[1]:.2f}x | {g[1] / g[0]:.2f}x |"
            )
        else:
            lines.append(f"| {system} | 0 | - | - | - | - | - |")
    return lines


def plot(results: dict[str, list[Run]], out_dir: Path, prefix: str) -> list[str]:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    systems = list(results)
    names = []
    fig, ax = plt.subplots(figsize=(11, 4.5))
    width = 0.8 / len(systems)
    for i, system in enumerate(systems):
        ys = []
        for mode in MODES:
            rs = [r for r in results[system] if r.task.mode == mode]
            ys.append(100 * summarize(rs)["success"])
        ax.bar([m + i * width for m in range(len(MODES))], ys, width, label=system)
    ax.set_xticks([m + 0.4 - width / 2 for m in range(len(MODES))])
    ax.set_xticklabels(MODES, rotation=30, ha="right")
    ax.set_ylabel("success (%)")
    ax.set_title("Correct answer within 3 calls, by first-answer defect (simulator)")
    ax.set_ylim(0, 118)
    ax.legend(fontsize=8, ncol=len(systems), loc="upper center")
    fig.tight_layout()
    name = f"{prefix}-success.png"
    fig.savefig(out_dir / name, dpi=100)
    plt.close(fig)
    names.append(name)

    fig, (a1, a2) = plt.subplots(1, 2, figsize=(11, 4))
    summ = [summarize(results[s]) for s in systems]
    xs = range(len(systems))
    a1.bar(xs, [s["wasted_per_job"] for s in summ], color="tab:red", label="wasted / job")
    a1.bar(
        xs,
        [s["total_tokens"] / s["n"] - s["wasted_per_job"] for s in summ],
        bottom=[s["wasted_per_job"] for s in summ],
        color="tab:green",
        label="useful / job",
    )
    a1.set_xticks(list(xs))
    a1.set_xticklabels(systems, rotation=20, ha="right", fontsize=8)
    a1.set_ylabel("tokens per job")
    a1.set_title("Tokens per job: wasted vs useful")
    a1.legend(fontsize=8)
    for system in systems:
        g, _ = growth(results[system])
        if g:
            a2.plot([1, 2, 3], g, marker="o", label=system)
    a2.set_xticks([1, 2, 3])
    a2.set_xticklabels(["call 1", "retry 1", "retry 2"])
    a2.set_ylabel("prompt tokens")
    a2.set_title("Context growth (jobs with 3 calls)")
    a2.legend(fontsize=8)
    fig.tight_layout()
    name = f"{prefix}-tokens.png"
    fig.savefig(out_dir / name, dpi=100)
    plt.close(fig)
    names.append(name)
    return names


def main(argv: list[str] | None = None) -> int:
    from reprompt_sim.server import serve_in_background

    args = _arguments(argv)
    out = args.out or (
        Path(tempfile.gettempdir()) / "reprompt-bench" / "efficacy.md"
        if args.quick
        else DOCS / "efficacy.md"
    )
    out.parent.mkdir(parents=True, exist_ok=True)

    import logging

    logging.getLogger("uvicorn").setLevel(logging.WARNING)
    logging.getLogger("httpx").setLevel(logging.WARNING)
    logging.getLogger("instructor").setLevel(logging.CRITICAL)

    tasks = sim_tasks(args.per_cell)
    results: dict[str, list[Run]] = {}
    start = time.perf_counter()
    for system in args.systems.split(","):
        t0 = time.perf_counter()
        with serve_in_background(sim_config()) as url:
            results[system] = _run_system(system, url, tasks)
        s = summarize(results[system])
        print(
            f"{system:18} success {pct(s['success']):>6}  calls/job {s['calls']:.2f}  "
            f"wasted/job {s['wasted_per_job']:.0f}  ({time.perf_counter() - t0:.1f} s)",
            flush=True,
        )
    elapsed = time.perf_counter() - start
    grounded = {s: results.pop(s) for s in GROUNDED_SYSTEMS if s in results}
    plots = plot(results, out.parent, "efficacy-quick" if args.quick else "efficacy")
    page = render(results, args, machine(), elapsed, plots, grounded)
    out.write_text(with_notes(out, page))
    raw = _write_runs(out, results | grounded)
    print(f"wrote {out} and {raw}")
    return 0


def _arguments(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--quick", action="store_true", help="1 task per cell (30), < 60 s")
    # full run: 20 tasks per cell = 600 tasks
    parser.add_argument("--per-cell", type=int, default=None, help="tasks per (mode, family)")
    parser.add_argument("--out", type=Path, default=None, help="markdown file to write")
    parser.add_argument("--systems", default=",".join(SYSTEMS + GROUNDED_SYSTEMS))
    args = parser.parse_args(argv)
    args.per_cell = args.per_cell or (1 if args.quick else 20)
    args.command = "python bench/efficacy.py" + " ".join(
        [""] + (argv if argv is not None else sys.argv[1:])
    )
    return args


def _run_system(system: str, url: str, tasks: list[Task]) -> list[Run]:
    """Every task through one system against the simulator at ``url``."""
    if system == "single-shot":
        return run_single_shot(url, tasks)
    if system.startswith("instructor"):
        return run_instructor(url, tasks, system.split()[1])
    # reprompt's systems: (strict, the validators each task gets)
    reprompt = {
        "reprompt": (False, "task"),
        "reprompt strict": (True, "task"),
        "reprompt schema-only": (False, "none"),
        "reprompt grounded": (False, "grounded"),
    }
    if system not in reprompt:
        raise SystemExit(f"unknown system {system!r}")
    strict, checks = reprompt[system]
    return run_reprompt(url, tasks, strict, system, checks)


def _write_runs(out: Path, results: dict[str, list[Run]]) -> Path:
    """Every run's outcome, beside the page's scratch copy; the file written."""
    raw = Path(tempfile.gettempdir()) / "reprompt-bench" / f"{out.stem}-runs.json"
    raw.parent.mkdir(parents=True, exist_ok=True)
    raw.write_text(
        json.dumps(
            {
                s: [
                    {
                        "task": r.task.id,
                        "mode": r.task.mode,
                        "calls": r.calls,
                        "accepted": r.accepted,
                        "correct": r.correct,
                        "error": r.error,
                    }
                    for r in rs
                ]
                for s, rs in results.items()
            },
            indent=0,
        )
    )
    return raw


if __name__ == "__main__":
    raise SystemExit(main())
