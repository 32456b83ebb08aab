"""A real model: the embedded llama.cpp gemma3 270M on extraction tasks (issues 5 and 14).

    python bench/real_model.py                      # both sets: docs/benchmarks/real-model.md
    python bench/real_model.py --sets one-sentence  # 4 rows x 20 tasks, ~3 min, to /tmp
    python bench/real_model.py --sets one-sentence --systems "plain one-line,reprompt auto"
    python bench/real_model.py --quick              # a few tasks, 3 rows, to /tmp

One ``LocalModelServer`` is started and every system talks to it over its OpenAI-compatible
HTTP endpoint, one request at a time. Each system is a ``Row`` in ``ROWS`` (how it runs, what
the page says about it); a task set (``SETS``) runs its rows on its tasks:

- *extraction*: ``bench/tasks.py`` ``real_tasks(9, easy=3)``, invoices, contacts, readings
  and two-field persons, with semantic validators;
- *one-sentence*: ``simple_tasks()``, 20 one-sentence extractions of two or three flat
  fields, no validators (issue 14: the prompt's own effect).

Rows: ``single-shot`` (one call, grammar + the schema in the message), ``plain one-line``
(one call, grammar + ``Extract these fields as a JSON object: name (string), ... Text: ...
Return only the JSON object.``), ``instructor JSON`` (+hint), and reprompt through the router
(``with_local_model``): ``reprompt auto`` (the local model's default, compact prompt
profile), ``reprompt auto full`` (the full profile), ``reprompt prompt`` (no grammar), a
temperature variant and the grounding variants. A new mode is one more ``Row`` (``job=``
adds job fields, e.g. ``{"retryMode": "patch"}`` or ``{"candidates": 3}``).

All: at most 3 calls, ``temperature=0``, the same max_tokens on the first call, the same
semantic validators. *First call correct* judges the first answer alone.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import logging
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

from bench.efficacy import (
    ATTEMPTS,
    DOCS,
    Run,
    checks_for,
    grounding_table,
    judge_single,
    machine,
    pct,
    with_notes,
)
from bench.tasks import MODELS, TASK_SEED, Task, is_correct, plain_prompt, real_tasks, simple_tasks

TEMPERATURE = 0.0
SAMPLING_SEED = 1234  # only sent when temperature > 0


@dataclass(frozen=True)
class Row:
    """One system of the comparison: how it is run and what the page says about it.

    A new reprompt mode is one more row: ``Row("reprompt patch", "reprompt", job={"retryMode":
    "patch"}, about=...)`` (``job`` is merged into every job body), or a model setting
    through ``prompt`` (the providers file's ``prompt`` profile of the local model).
    """

    name: str
    kind: str  # "single-shot", "plain", "instructor", "reprompt"
    about: str
    temperature: float = TEMPERATURE
    hint: bool = False  # instructor: the schema line in the user message
    structured: str = "auto"  # reprompt: structuredOutput
    checks: str = "task"  # reprompt: the task's validators, "none" or "grounded"
    prompt: str | None = None  # reprompt: the local model's prompt profile (None: its default)
    job: dict[str, Any] = field(default_factory=dict)  # reprompt: more job fields


_AUTO = (
    '`run_job` via `with_local_model(...)` router; `structuredOutput: "auto"` = `json_object` '
    f"+ schema (grammar), `maxTurns 1 + returnRetries {ATTEMPTS - 1}`"
)
ROWS: dict[str, Row] = {
    row.name: row
    for row in (
        Row(
            "single-shot",
            "single-shot",
            "one call, `response_format: {type: json_object, schema}` (grammar) and the schema "
            "in the user message (`Reply with JSON matching this schema: ...`); `json.loads` + "
            "`jsonschema` + validators",
        ),
        Row(
            "plain one-line",
            "plain",
            "one call, the same grammar, and the plain one-line prompt of issue 14: `Extract "
            "these fields as a JSON object: name (string), age (integer). Text: ... Return "
            "only the JSON object.` (`bench/tasks.py` `plain_prompt`)",
        ),
        Row(
            "instructor JSON",
            "instructor",
            "`instructor.from_openai(OpenAI(base_url=server.base_url, max_retries=0), "
            f"mode=Mode.JSON)`, `max_retries={ATTEMPTS - 1}`, default reask. Its schema "
            "instruction goes into a *system* message, which gemma's chat template drops; "
            "`json_object` without a schema constrains to *some* JSON",
        ),
        Row(
            "instructor JSON +hint",
            "instructor",
            "the same, with the single-shot's schema line prepended to the user message by us, "
            "so the model sees the schema despite the dropped system message",
            hint=True,
        ),
        Row(
            "reprompt auto",
            "reprompt",
            _AUTO + "; the local model's default prompt profile, `compact` (the fields as "
            "`name (string), ...`, a text input as plain text, no delimiter tag, no `$fail` "
            "instruction; a re-ask is the question asked afresh, the rejection first, without "
            "the rejected answer)",
        ),
        Row(
            "reprompt whole",
            "reprompt",
            'reprompt auto with `retryMode: "whole"`: every re-ask asks for the whole answer '
            '(the default, `"auto"`, asks for just the failing fields when only some fail)',
            job={"retryMode": "whole"},
        ),
        Row(
            "reprompt best-of-3 final",
            "reprompt",
            'reprompt auto with `candidates: {"n": 3, "on": "final"}`: the last call, after a '
            "rejection, asks for 3 answers (3 parallel requests: llama.cpp has no `n`; sampled "
            "at temperature 0.7, seeds apart) and keeps the first valid one; calls count each",
            job={"candidates": {"n": 3, "on": "final"}},
        ),
        Row(
            "reprompt auto full",
            "reprompt",
            'the same with the local model\'s `prompt = "full"` (the profile of every other '
            "model, and the local model's before issue 14: the JSON Schema, the input as JSON "
            "in an `<input>` tag, the `$fail` instruction)",
            prompt="full",
        ),
        Row(
            "reprompt prompt",
            "reprompt",
            'reprompt auto with `structuredOutput: "prompt"` (no grammar)',
            structured="prompt",
        ),
        Row(
            "reprompt auto @0.7",
            "reprompt",
            "*variant, not part of the equal-settings comparison*: reprompt auto at "
            f"`temperature=0.7`, `seed={SAMPLING_SEED}`, to see whether sampling lets the "
            "feedback change the answer",
            temperature=0.7,
        ),
        Row(
            "reprompt auto schema-only",
            "reprompt",
            "*grounding variant*: reprompt auto with no validators",
            checks="none",
        ),
        Row(
            "reprompt auto grounded",
            "reprompt",
            "*grounding variant*: reprompt auto with one `grounded` validator (`numbers: "
            "true`) over the extracted fields (`bench/tasks.py` `GROUNDED_PATHS`) instead of "
            "the task's checks",
            checks="grounded",
        ),
    )
}
# The task sets and the rows each runs by default.
SETS: dict[str, tuple[str, ...]] = {
    "extraction": tuple(ROWS),
    "one-sentence": ("single-shot", "plain one-line", "reprompt auto", "reprompt auto full"),
}
QUICK_ROWS = ("single-shot", "plain one-line", "reprompt auto")


def schema_hint(task: Task) -> str:
    return "Reply with JSON matching this schema: " + json.dumps(task.schema)


def single_shot_prompt(task: Task) -> str:
    return f"{schema_hint(task)}\n\n{task.user_message()}"


def run_single_shot(
    base_url: str,
    model: str,
    tasks: list[Task],
    max_tokens: int,
    temperature: float = TEMPERATURE,
    name: str = "single-shot",
    prompt: Any = single_shot_prompt,
) -> list[Run]:
    """One call per task with the grammar; ``prompt(task)`` is the whole user message."""
    runs = []
    with httpx.Client(base_url=base_url, timeout=300, trust_env=False) as client:
        for task in tasks:
            run = Run(name, task)
            t0 = time.perf_counter()
            body = {
                "model": model,
                "temperature": temperature,
                "max_tokens": max_tokens,
                "response_format": {"type": "json_object", "schema": task.schema},
                "messages": [{"role": "user", "content": prompt(task)}],
            }
            data = client.post("/chat/completions", json=body).json()
            usage = data.get("usage") or {}
            run.calls.append((usage.get("prompt_tokens", 0), usage.get("completion_tokens", 0)))
            text = data["choices"][0]["message"].get("content") or ""
            run.last_text = text
            run.answers = [text]
            judge_single(run, task, text)
            run.seconds = time.perf_counter() - t0
            runs.append(run)
    return runs


def run_instructor(
    base_url: str,
    model: str,
    tasks: list[Task],
    max_tokens: int,
    temperature: float = TEMPERATURE,
    hint: bool = False,
) -> list[Run]:
    import instructor
    import openai

    raw = openai.OpenAI(base_url=base_url, api_key="x", max_retries=0, timeout=300)
    client = instructor.from_openai(raw, mode=instructor.Mode.JSON)
    current: list[tuple[int, int]] = []
    texts: list[str] = []

    def on_response(c: Any) -> None:
        current.append((c.usage.prompt_tokens, c.usage.completion_tokens) if c.usage else (0, 0))
        texts.append(c.choices[0].message.content or "")

    client.on("completion:response", on_response)
    runs = []
    for task in tasks:
        current.clear()
        texts.clear()
        run = Run("instructor JSON" + (" +hint" if hint else ""), task)
        t0 = time.perf_counter()
        try:
            result = client.chat.completions.create(
                model=model,
                response_model=MODELS[task.family],
                messages=[
                    {
                        "role": "user",
                        "content": (
                            f"{schema_hint(task)}\n\n{task.user_message()}"
                            if hint
                            else task.user_message()
                        ),
                    }
                ],
                max_retries=ATTEMPTS - 1,
                max_tokens=max_tokens,
                temperature=temperature,
                context={"task": task},
            )
            run.accepted, run.value = True, result.model_dump()
        except Exception as exc:
            run.error = type(exc).__name__
        run.calls = list(current)
        run.last_text = texts[-1] if texts else None
        run.answers = list(texts)
        run.seconds = time.perf_counter() - t0
        runs.append(run)
    return runs


async def _run_reprompt(server: Any, tasks: list[Task], row: Row, max_tokens: int) -> list[Run]:
    from app.core.turn.loop import Runtime, run_job
    from app.core.wire.spec import JobSpec
    from app.providers.config import ProvidersConfig
    from app.providers.embedded import open_router, with_local_model
    from app.providers.http import make_client

    config = with_local_model(ProvidersConfig(), server)
    if row.prompt is not None:
        models = {k: m.model_copy(update={"prompt": row.prompt}) for k, m in config.models.items()}
        config = config.model_copy(update={"models": models})
    runs = []
    with tempfile.TemporaryDirectory() as tmp:
        async with (
            make_client() as http,
            open_router(http, data_dir=Path(tmp), config=config) as router,
        ):
            for task in tasks:
                run = Run(row.name, task)
                t0 = time.perf_counter()
                spec = JobSpec.model_validate(
                    {
                        "task": task.task,
                        "input": task.job_input,
                        "schema": task.schema,
                        "validators": checks_for(task, row.checks),
                        "budget": {"maxTurns": 1, "returnRetries": ATTEMPTS - 1},
                        "structuredOutput": row.structured,
                        "maxOutputTokens": max_tokens,
                        "maxOutputTokensCap": 2 * max_tokens,
                        "temperature": row.temperature,
                        **({"seed": SAMPLING_SEED} if row.temperature > 0 else {}),
                        **row.job,
                    }
                )
                result = await run_job(spec, Runtime(client=router))
                # A best-of-N turn is N requests: each counts as a call, the tokens split.
                run.calls = [
                    (t.usage.input_tokens // k, t.usage.output_tokens // k)
                    for t in result.turns
                    for k in [t.candidates or 1]
                    for _ in range(k)
                ]
                run.last_text = result.turns[-1].answer if result.turns else None
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


def run_row(row: Row, server: Any, tasks: list[Task], max_tokens: int) -> list[Run]:
    if row.kind == "single-shot":
        return run_single_shot(
            server.base_url, server.model_name, tasks, max_tokens, row.temperature, row.name
        )
    if row.kind == "plain":
        return run_single_shot(
            server.base_url,
            server.model_name,
            tasks,
            max_tokens,
            row.temperature,
            row.name,
            prompt=plain_prompt,
        )
    if row.kind == "instructor":
        return run_instructor(
            server.base_url, server.model_name, tasks, max_tokens, row.temperature, row.hint
        )
    if row.kind == "reprompt":
        return asyncio.run(_run_reprompt(server, tasks, row, max_tokens))
    raise SystemExit(f"unknown kind of row {row.kind!r}")


def first_correct(run: Run) -> bool:
    """The first call's answer is the expected value (whatever happened after it)."""
    if not run.answers:
        return False
    if len(run.answers) == 1 and run.accepted:
        return run.correct
    try:
        return is_correct(run.task, json.loads(run.answers[0]))
    except ValueError:
        return False


def shape_ok(run: Run) -> bool:
    """The final answer is JSON matching the schema (accepted, or raw text that parses)."""
    if run.accepted:
        return True
    try:
        jsonschema.validate(json.loads(run.last_text or ""), run.task.schema)
    except Exception:
        return False
    return True


def parses(run: Run) -> bool:
    if run.accepted:
        return True
    try:
        json.loads(run.last_text or "")
    except ValueError:
        return False
    return True


def stats(runs: list[Run]) -> dict[str, Any]:
    n = len(runs)
    ok = [r for r in runs if r.correct]
    return {
        "n": n,
        "json": sum(1 for r in runs if parses(r)) / n,
        "shape": sum(1 for r in runs if shape_ok(r)) / n,
        "valid": sum(1 for r in runs if r.accepted) / n,
        "correct": len(ok) / n,
        "first": sum(1 for r in runs if first_correct(r)) / n,
        "calls": sum(len(r.calls) for r in runs) / n,
        "prompt": sum(p for r in runs for p, _ in r.calls) / n,
        "completion": sum(c for r in runs for _, c in r.calls) / n,
        "wasted": sum(r.wasted for r in runs) / n,
        "wall": sum(r.seconds for r in runs) / n,
        "retried": sum(1 for r in runs if len(r.answers) > 1),
        "same": sum(
            1
            for r in runs
            if len(r.answers) > 1 and len(set(r.answers[1:])) == 1 and r.answers[1] == r.answers[0]
        ),
        "wall_total": sum(r.seconds for r in runs),
    }


SET_ABOUT: dict[str, Callable[[argparse.Namespace], str]] = {
    "extraction": lambda args: (
        f"12 tasks from `bench/tasks.py` `real_tasks({args.tasks}, easy={args.easy})` (seeds "
        f"{TASK_SEED + 1}, {TASK_SEED + 2}): invoices, contacts and readings, interleaved, then "
        "easy two-field `person` tasks (`Tom is 34 years old.` -> `{name, age}`); each with a "
        "JSON Schema and semantic validators (sums, grounding checks against the source). "
        "The input is the text (a string)."
    ),
    "one-sentence": lambda args: (
        "20 one-sentence extractions from `bench/tasks.py` `simple_tasks()` (issue 14): two "
        "or three flat fields (`Liam bought a bicycle for 120 dollars.` -> `{buyer, item, "
        'price}`), no validators; every other job\'s input is `{"text": sentence}` (one '
        "text field), the rest a string."
    ),
}


def results_table(results: dict[str, list[Run]]) -> list[str]:
    lines = [
        "| system | first call correct | final answer is JSON | ... and schema-valid | valid "
        "output (schema + validators) | correct (= expected) | LLM calls / job | prompt tok / "
        "job | completion tok / job | wasted tok / job | wall s / job | wall s total |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for system, runs in results.items():
        s = stats(runs)
        lines.append(
            f"| {system} | {pct(s['first'])} | {pct(s['json'])} | {pct(s['shape'])} | "
            f"{pct(s['valid'])} | {pct(s['correct'])} | {s['calls']:.2f} | "
            f"{s['prompt']:.0f} | {s['completion']:.0f} | {s['wasted']:.0f} | {s['wall']:.1f} | "
            f"{s['wall_total']:.0f} |"
        )
    lines += [
        "",
        "Retried jobs whose every re-ask returned the identical answer (the feedback changed "
        "nothing): "
        + ", ".join(
            f"{system} {stats(runs)['same']}/{stats(runs)['retried']}"
            for system, runs in results.items()
        )
        + ".",
    ]
    return lines


def per_task_table(results: dict[str, list[Run]], answers: bool) -> list[str]:
    systems = list(results)
    lines = [
        "| task | input | " + " | ".join(systems) + " |",
        "|---|---|" + "---|" * len(systems),
    ]
    for i, run in enumerate(results[systems[0]]):
        cells = []
        for system in systems:
            r = results[system][i]
            mark = "ok" if r.correct else ("accepted, wrong" if r.accepted else r.error or "fail")
            if not r.accepted:
                mark += (
                    ", schema-valid" if shape_ok(r) else (", JSON" if parses(r) else ", not JSON")
                )
            if answers and not r.correct and r.answers:
                mark += ": `" + " ".join(r.answers[0].split())[:80].replace("|", "\\|") + "`"
            cells.append(f"{mark} ({len(r.calls)} calls, {r.seconds:.1f} s)")
        lines.append(f"| {run.task.id} | {run.task.input} | " + " | ".join(cells) + " |")
    return lines


def render(
    results: dict[str, dict[str, list[Run]]],
    args: argparse.Namespace,
    info: dict[str, str],
    elapsed: float,
    startup: float,
    plots: list[str],
) -> str:
    lines = _setup_section(results, args, elapsed, startup)
    for name, set_results in results.items():
        lines += ["", f"## Results: {name}", "", *results_table(set_results)]
    for name, set_results in results.items():
        lines += [
            "",
            f"## Per task: {name}",
            "",
            *(["A wrong answer shows its first call's text."] if name == "one-sentence" else []),
            "",
            *per_task_table(set_results, answers=name == "one-sentence"),
        ]
    lines += _grounding_section(results)
    lines += ["", "## Plots", ""]
    lines += [f"![{p}]({p})" for p in plots]
    lines += [
        "",
        "## Machine",
        "",
        f"- {info['nproc']} cores, CPU `{info['cpu']}`, {info['platform']}",
        f"- Python {info['python']}; {info['versions']}",
        f"- commit {info['commit']} (plus the uncommitted bench files), run at {info['date']}",
        f"- seeds: task set {TASK_SEED + 1}; temperature 0 (llama.cpp is deterministic at 0 "
        "on one thread, up to batching)",
        "",
    ]
    return "\n".join(lines)


def _setup_section(
    results: dict[str, dict[str, list[Run]]],
    args: argparse.Namespace,
    elapsed: float,
    startup: float,
) -> list[str]:
    """The page's title, the model, the task sets and each row's configuration."""
    rows = [ROWS[name] for name in dict.fromkeys(n for rs in results.values() for n in rs)]
    return [
        "# A real model: gemma3 270M (llama.cpp) on extraction tasks",
        "",
        f"Generated by `{args.command}` in {elapsed:.0f} s (server start {startup:.1f} s)"
        + (" (**--quick**: a tiny subset, not the reference numbers)" if args.quick else "")
        + ".",
        "",
        "## Setup",
        "",
        "- **Model**: the embedded `gemma-3-270m-q4_k_m` (a *base* model, not instruction "
        "tuned) served by `llama_cpp.server` through `app.providers.local.LocalModelServer` "
        "(1 thread on this 2-core box, `--chat_format gemma`, which drops system messages). "
        "Requests are served one at a time; all systems run one after another.",
        "- **Task sets**:",
        *(f"  - *{name}*: {SET_ABOUT[name](args)}" for name in results),
        f"- **Same for all**: at most {ATTEMPTS} calls, `temperature=0`, `max_tokens="
        f"{args.max_tokens}` on the first call, the same validators. No `[[sim]]` directive.",
        "",
        "| system | configuration |",
        "|---|---|",
        *(f"| {row.name} | {row.about} |" for row in rows),
        "",
        "*First call correct* = the first call's answer is the expected value, whatever "
        "happened after it (the prompt's own effect, before any re-ask). *Valid output* = the "
        "system returned a value that passed the schema and the semantic validators; "
        "*correct* checks that it equals the expected answer. Tokens are llama.cpp's `usage`.",
    ]


def _grounding_section(results: dict[str, dict[str, list[Run]]]) -> list[str]:
    """The grounding variants' answers judged, when the run had them."""
    grounding = {
        s: rs
        for s, rs in results.get("extraction", {}).items()
        if s.endswith(("schema-only", "grounded"))
    }
    if not grounding:
        return []
    return [
        "",
        "## Grounded extraction (issue 13)",
        "",
        "Every answer of the grounding variants, judged against the expected answer. A "
        "*wrong but schema-valid* answer parses and matches the schema (after reprompt's "
        "repairs) but is not the expected answer; *caught* = the grounded validator "
        "rejected it; *fixed* = the re-ask's answer was correct.",
        "",
        *grounding_table(grounding),
    ]


def plot(results: dict[str, dict[str, list[Run]]], out_dir: Path, prefix: str) -> list[str]:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, len(results), figsize=(5 * len(results), 4), squeeze=False)
    for ax, (name, set_results) in zip(axes[0], results.items(), strict=True):
        systems = list(set_results)
        summ = [stats(set_results[s]) for s in systems]
        xs = list(range(len(systems)))
        width = 0.4
        ax.bar(
            [x - width / 2 for x in xs],
            [100 * s["first"] for s in summ],
            width,
            label="first call correct",
            color="tab:orange",
        )
        ax.bar(
            [x + width / 2 for x in xs],
            [100 * s["correct"] for s in summ],
            width,
            label="correct within 3 calls",
            color="tab:green",
        )
        ax.set_xticks(xs)
        ax.set_xticklabels(systems, rotation=25, ha="right", fontsize=8)
        ax.set_ylabel("%")
        ax.set_ylim(0, 100)
        ax.set_title(f"gemma3 270M, {name} ({len(next(iter(set_results.values())))} tasks)")
        ax.legend(fontsize=8)
    fig.tight_layout()
    name = f"{prefix}.png"
    fig.savefig(out_dir / name, dpi=100)
    plt.close(fig)
    return [name]


def main(argv: list[str] | None = None) -> int:
    from app.providers.local import LocalModelServer
    from app.settings import default_data_dir

    args, sets, chosen = _arguments(argv)
    full_page = not args.quick and args.out is None and sets == list(SETS) and chosen is None
    out = args.out or (
        DOCS / "real-model.md"
        if full_page
        else Path(tempfile.gettempdir()) / "reprompt-bench" / "real-model.md"
    )
    out.parent.mkdir(parents=True, exist_ok=True)
    logging.getLogger("httpx").setLevel(logging.WARNING)
    logging.getLogger("instructor").setLevel(logging.CRITICAL)

    task_sets = {
        "extraction": real_tasks(args.tasks, args.easy),
        "one-sentence": simple_tasks()[: 4 if args.quick else None],
    }
    results: dict[str, dict[str, list[Run]]] = {}
    start = time.perf_counter()
    with LocalModelServer(default_data_dir(), api_key=None) as server:
        startup = time.perf_counter() - start
        print(f"server up in {startup:.1f} s at {server.base_url}", flush=True)
        for set_name in sets:
            rows = chosen or list(QUICK_ROWS if args.quick else SETS[set_name])
            results[set_name] = {
                system: _run_and_say(set_name, system, server, task_sets[set_name], args)
                for system in rows
            }
    elapsed = time.perf_counter() - start
    plots = plot(results, out.parent, "real-model" if full_page else "real-model-partial")
    out.write_text(with_notes(out, render(results, args, machine(), elapsed, startup, plots)))
    raw = _write_runs(out, results)
    print(f"wrote {out} and {raw}")
    return 0


def _arguments(argv: list[str] | None) -> tuple[argparse.Namespace, list[str], list[str] | None]:
    """The arguments, with the task sets and the rows chosen (None: each set's own)."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--quick", action="store_true", help="a few tasks, 3 rows, < 2 min")
    parser.add_argument("--tasks", type=int, default=None, help="invoice/contact/stats tasks")
    parser.add_argument("--easy", type=int, default=None, help="two-field person tasks")
    parser.add_argument("--max-tokens", type=int, default=None)
    parser.add_argument(
        "--sets", default=",".join(SETS), help=f"task sets to run ({', '.join(SETS)})"
    )
    parser.add_argument("--systems", default=None, help="rows to run (default: each set's)")
    parser.add_argument("--out", type=Path, default=None)
    args = parser.parse_args(argv)
    args.tasks = args.tasks if args.tasks is not None else (1 if args.quick else 9)
    args.easy = args.easy if args.easy is not None else (1 if args.quick else 3)
    args.max_tokens = args.max_tokens or (96 if args.quick else 128)
    sets = args.sets.split(",")
    for name in sets:
        if name not in SETS:
            raise SystemExit(f"unknown task set {name!r} (known: {', '.join(SETS)})")
    chosen = args.systems.split(",") if args.systems else None
    for name in chosen or ():
        if name not in ROWS:
            raise SystemExit(f"unknown system {name!r} (known: {', '.join(ROWS)})")
    args.command = "python bench/real_model.py" + " ".join(
        [""] + (argv if argv is not None else sys.argv[1:])
    )
    return args, sets, chosen


def _run_and_say(
    set_name: str, system: str, server: Any, tasks: list[Task], args: argparse.Namespace
) -> list[Run]:
    """One row over one task set, its figures printed as it ends."""
    t0 = time.perf_counter()
    runs = run_row(ROWS[system], server, tasks, args.max_tokens)
    s = stats(runs)
    print(
        f"{set_name:12} {system:26} first {pct(s['first']):>6} "
        f"json {pct(s['json']):>6} valid {pct(s['valid']):>6} "
        f"correct {pct(s['correct']):>6} calls/job {s['calls']:.2f}  "
        f"({time.perf_counter() - t0:.1f} s)",
        flush=True,
    )
    return runs


def _write_runs(out: Path, results: dict[str, dict[str, list[Run]]]) -> Path:
    """Every run's answers and outcome, beside the page's scratch copy; the file written."""
    raw = Path(tempfile.gettempdir()) / "reprompt-bench" / f"{out.stem}-runs.json"
    raw.parent.mkdir(parents=True, exist_ok=True)
    raw.write_text(
        json.dumps(
            {
                f"{set_name}/{s}": [
                    {
                        "task": r.task.id,
                        "calls": r.calls,
                        "answers": r.answers,
                        "accepted": r.accepted,
                        "correct": r.correct,
                        "first_correct": first_correct(r),
                        "error": r.error,
                        "value": r.value,
                        "seconds": round(r.seconds, 2),
                    }
                    for r in rs
                ]
                for set_name, set_results in results.items()
                for s, rs in set_results.items()
            },
            indent=0,
            default=str,
        )
    )
    return raw


if __name__ == "__main__":
    raise SystemExit(main())
