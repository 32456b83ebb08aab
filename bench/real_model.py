"""A real model: the embedded llama.cpp gemma3 270M on extraction tasks (issue 5, item 4).

    .venv/bin/python bench/real_model.py            # 9 tasks, writes docs/benchmarks/real-model.md
    .venv/bin/python bench/real_model.py --quick    # 2 tasks, 3 systems, writes to /tmp

One ``LocalModelServer`` is started and every system talks to it over its OpenAI-compatible
HTTP endpoint, one request at a time:

- ``reprompt auto``: ``run_job`` through the router (``with_local_model``), ``structuredOutput:
  "auto"`` = ``response_format: {type: json_object, schema}`` (llama.cpp grammar);
- ``reprompt prompt``: the same with ``structuredOutput: "prompt"`` (schema in the prompt, no
  grammar);
- ``instructor JSON``: ``instructor.from_openai(OpenAI(base_url=server.base_url),
  mode=Mode.JSON)``, ``max_retries=2``, default reask;
- ``single-shot``: one call with ``json_object`` + schema (the grammar), schema also in the
  user message; json.loads + jsonschema + validators.

All: at most 3 calls, ``temperature=0``, the same max_tokens on the first call, the same
semantic validators (bench/tasks.py).

Grounded extraction (issue 13): ``reprompt auto schema-only`` (no validators) and ``reprompt
auto grounded`` (one ``grounded`` validator over the extracted fields instead of the task's
checks) count the wrong-but-schema-valid answers grounding catches and the re-ask fixes.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import logging
import sys
import tempfile
import time
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
from bench.tasks import MODELS, TASK_SEED, Task, real_tasks

TEMPERATURE = 0.0
SAMPLING_SEED = 1234  # only sent when temperature > 0
SYSTEMS = (
    "single-shot",
    "instructor JSON",
    "instructor JSON +hint",
    "reprompt auto",
    "reprompt prompt",
    "reprompt auto @0.7",
    "reprompt auto schema-only",
    "reprompt auto grounded",
)


def schema_hint(task: Task) -> str:
    return "Reply with JSON matching this schema: " + json.dumps(task.schema)


def run_single_shot(
    base_url: str, model: str, tasks: list[Task], max_tokens: int, temperature: float = TEMPERATURE
) -> list[Run]:
    runs = []
    with httpx.Client(base_url=base_url, timeout=300, trust_env=False) as client:
        for task in tasks:
            run = Run("single-shot", task)
            t0 = time.perf_counter()
            body = {
                "model": model,
                "temperature": temperature,
                "max_tokens": max_tokens,
                "response_format": {"type": "json_object", "schema": task.schema},
                "messages": [
                    {"role": "user", "content": f"{schema_hint(task)}\n\n{task.user_message()}"}
                ],
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


async def _run_reprompt(
    server: Any,
    tasks: list[Task],
    structured: str,
    max_tokens: int,
    temperature: float = TEMPERATURE,
    checks: str = "task",
    name: str | None = None,
) -> list[Run]:
    from app.core.loop import Runtime, run_job
    from app.core.spec import JobSpec
    from app.providers.config import ProvidersConfig
    from app.providers.embedded import open_router, with_local_model
    from app.providers.http import make_client

    config = with_local_model(ProvidersConfig(), server)
    runs = []
    with tempfile.TemporaryDirectory() as tmp:
        async with (
            make_client() as http,
            open_router(http, data_dir=Path(tmp), config=config) as router,
        ):
            for task in tasks:
                run = Run(name or f"reprompt {structured}", task)
                t0 = time.perf_counter()
                spec = JobSpec.model_validate(
                    {
                        "task": task.task,
                        "input": task.input,
                        "schema": task.schema,
                        "validators": checks_for(task, checks),
                        "budget": {"maxTurns": 1, "returnRetries": ATTEMPTS - 1},
                        "structuredOutput": structured,
                        "maxOutputTokens": max_tokens,
                        "maxOutputTokensCap": 2 * max_tokens,
                        "temperature": temperature,
                        **({"seed": SAMPLING_SEED} if temperature > 0 else {}),
                    }
                )
                result = await run_job(spec, Runtime(client=router))
                run.calls = [(t.usage.input_tokens, t.usage.output_tokens) for t in result.turns]
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


def render(
    results: dict[str, list[Run]],
    args: argparse.Namespace,
    info: dict[str, str],
    elapsed: float,
    startup: float,
    plots: list[str],
) -> str:
    systems = list(results)
    tasks = results[systems[0]]
    lines = [
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
        f"- **Tasks**: {len(tasks)} from `bench/tasks.py` `real_tasks({args.tasks}, "
        f"easy={args.easy})` (seeds {TASK_SEED + 1}, {TASK_SEED + 2}): invoices, contacts "
        "and readings, interleaved, then easy two-field `person` tasks (`Tom is 34 years "
        "old.` -> `{name, age}`); each with a JSON Schema and semantic validators (sums, "
        "grounding checks against the source). No `[[sim]]` directive.",
        f"- **Same for all**: at most {ATTEMPTS} calls, `temperature=0`, `max_tokens="
        f"{args.max_tokens}` on the first call, the same validators.",
        "",
        "| system | configuration |",
        "|---|---|",
        "| single-shot | one call, `response_format: {type: json_object, schema}` (grammar) "
        "and the schema in the user message; `json.loads` + `jsonschema` + validators |",
        "| instructor JSON | `instructor.from_openai(OpenAI(base_url=server.base_url, "
        f"max_retries=0), mode=Mode.JSON)`, `max_retries={ATTEMPTS - 1}`, default reask. Its "
        "schema instruction goes into a *system* message, which gemma's chat template "
        "drops; `json_object` without a schema constrains to *some* JSON |",
        "| instructor JSON +hint | the same, with the single-shot's schema line (`Reply with "
        "JSON matching this schema: ...`) prepended to the user message by us, so the model "
        "sees the schema despite the dropped system message |",
        "| reprompt auto | `run_job` via `with_local_model(...)` router; `structuredOutput: "
        '"auto"` = `json_object` + schema (grammar), `maxTurns 1 + returnRetries '
        f"{ATTEMPTS - 1}`, `maxOutputTokensCap {2 * args.max_tokens}` |",
        '| reprompt prompt | the same with `structuredOutput: "prompt"` (no grammar) |',
        f"| reprompt auto @0.7 | *variant, not part of the equal-settings comparison*: reprompt "
        f"auto at `temperature=0.7`, `seed={SAMPLING_SEED}`, to see whether sampling lets "
        "the feedback change the answer |",
        "| reprompt auto schema-only | *grounding variant*: reprompt auto with no validators |",
        "| reprompt auto grounded | *grounding variant*: reprompt auto with one `grounded` "
        "validator (`numbers: true`) over the extracted fields (`bench/tasks.py` "
        "`GROUNDED_PATHS`) instead of the task's checks |",
        "",
        "## Results",
        "",
        "| system | final answer is JSON | ... and schema-valid | valid output (schema + "
        "validators) | correct (= expected) | LLM calls / job | prompt tok / job | "
        "completion tok / job | wasted tok / job | wall s / job | wall s total |",
        "|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for system in systems:
        s = stats(results[system])
        lines.append(
            f"| {system} | {pct(s['json'])} | {pct(s['shape'])} | {pct(s['valid'])} | "
            f"{pct(s['correct'])} | {s['calls']:.2f} | "
            f"{s['prompt']:.0f} | {s['completion']:.0f} | {s['wasted']:.0f} | {s['wall']:.1f} | "
            f"{s['wall_total']:.0f} |"
        )
    lines += [
        "",
        "Retried jobs whose every re-ask returned the identical answer (the feedback changed "
        "nothing): "
        + ", ".join(
            f"{system} {stats(results[system])['same']}/{stats(results[system])['retried']}"
            for system in systems
        )
        + ".",
        "",
        "*Valid output* = the system returned a value that passed the schema and the semantic "
        "validators (for every system here that also means it equals the expected answer "
        "unless the validators missed something; *correct* checks that). Tokens are "
        "llama.cpp's `usage`.",
        "",
        "## Per task",
        "",
        "| task | input | " + " | ".join(systems) + " |",
        "|---|---|" + "---|" * len(systems),
    ]
    for i, run in enumerate(tasks):
        cells = []
        for system in systems:
            r = results[system][i]
            mark = "ok" if r.correct else ("accepted, wrong" if r.accepted else r.error or "fail")
            if not r.accepted:
                mark += (
                    ", schema-valid" if shape_ok(r) else (", JSON" if parses(r) else ", not JSON")
                )
            cells.append(f"{mark} ({len(r.calls)} calls, {r.seconds:.1f} s)")
        lines.append(f"| {run.task.id} | {run.task.input} | " + " | ".join(cells) + " |")
    grounding = {s: rs for s, rs in results.items() if s.endswith(("schema-only", "grounded"))}
    if grounding:
        lines += [
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


def plot(results: dict[str, list[Run]], out_dir: Path, prefix: str) -> list[str]:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    systems = list(results)
    summ = [stats(results[s]) for s in systems]
    fig, (a1, a2) = plt.subplots(1, 2, figsize=(10, 4))
    xs = range(len(systems))
    a1.bar(xs, [100 * s["correct"] for s in summ], color="tab:green")
    a1.set_xticks(list(xs))
    a1.set_xticklabels(systems, rotation=20, ha="right", fontsize=8)
    a1.set_ylabel("correct (%)")
    a1.set_title("gemma3 270M: correct answers within 3 calls")
    a2.bar(xs, [s["wall"] for s in summ], color="tab:blue")
    a2.set_xticks(list(xs))
    a2.set_xticklabels(systems, rotation=20, ha="right", fontsize=8)
    a2.set_ylabel("wall seconds per job")
    a2.set_title("Wall time per job")
    fig.tight_layout()
    name = f"{prefix}.png"
    fig.savefig(out_dir / name, dpi=100)
    plt.close(fig)
    return [name]


def main(argv: list[str] | None = None) -> int:
    from app.providers.local import LocalModelServer
    from app.settings import default_data_dir

    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--quick", action="store_true", help="2 tasks, 3 systems, < 60 s")
    parser.add_argument("--tasks", type=int, default=None, help="invoice/contact/stats tasks")
    parser.add_argument("--easy", type=int, default=None, help="two-field person tasks")
    parser.add_argument("--max-tokens", type=int, default=None)
    parser.add_argument("--systems", default=None)
    parser.add_argument("--out", type=Path, default=None)
    args = parser.parse_args(argv)
    args.tasks = args.tasks if args.tasks is not None else (1 if args.quick else 9)
    args.easy = args.easy if args.easy is not None else (1 if args.quick else 3)
    args.max_tokens = args.max_tokens or (96 if args.quick else 128)
    systems = (
        args.systems
        or ("single-shot,reprompt auto,instructor JSON" if args.quick else ",".join(SYSTEMS))
    ).split(",")
    args.command = "python bench/real_model.py" + " ".join(
        [""] + (argv if argv is not None else sys.argv[1:])
    )
    out = args.out or (
        Path(tempfile.gettempdir()) / "reprompt-bench" / "real-model.md"
        if args.quick
        else DOCS / "real-model.md"
    )
    out.parent.mkdir(parents=True, exist_ok=True)
    logging.getLogger("httpx").setLevel(logging.WARNING)
    logging.getLogger("instructor").setLevel(logging.CRITICAL)

    tasks = real_tasks(args.tasks, args.easy)
    results: dict[str, list[Run]] = {}
    start = time.perf_counter()
    with LocalModelServer(default_data_dir(), api_key=None) as server:
        startup = time.perf_counter() - start
        print(f"server up in {startup:.1f} s at {server.base_url}", flush=True)
        for system in systems:
            t0 = time.perf_counter()
            base, _, temp = system.partition(" @")
            temperature = float(temp) if temp else TEMPERATURE
            if base == "single-shot":
                results[system] = run_single_shot(
                    server.base_url, server.model_name, tasks, args.max_tokens, temperature
                )
            elif base in ("instructor JSON", "instructor JSON +hint"):
                results[system] = run_instructor(
                    server.base_url,
                    server.model_name,
                    tasks,
                    args.max_tokens,
                    temperature,
                    hint=base.endswith("+hint"),
                )
            elif base.startswith("reprompt "):
                words = base.split()
                checks = {"schema-only": "none", "grounded": "grounded"}.get(words[-1], "task")
                results[system] = asyncio.run(
                    _run_reprompt(
                        server,
                        tasks,
                        words[1],
                        args.max_tokens,
                        temperature,
                        checks=checks,
                        name=system,
                    )
                )
            else:
                raise SystemExit(f"unknown system {system!r}")
            s = stats(results[system])
            print(
                f"{system:16} json {pct(s['json']):>6} schema {pct(s['shape']):>6} "
                f"valid {pct(s['valid']):>6} correct {pct(s['correct']):>6} "
                f"calls/job {s['calls']:.2f}  ({time.perf_counter() - t0:.1f} s)",
                flush=True,
            )
    elapsed = time.perf_counter() - start
    plots = plot(results, out.parent, "real-model-quick" if args.quick else "real-model")
    out.write_text(with_notes(out, render(results, args, machine(), elapsed, startup, plots)))
    raw = Path(tempfile.gettempdir()) / "reprompt-bench" / f"{out.stem}-runs.json"
    raw.parent.mkdir(parents=True, exist_ok=True)
    raw.write_text(
        json.dumps(
            {
                s: [
                    {
                        "task": r.task.id,
                        "calls": r.calls,
                        "accepted": r.accepted,
                        "correct": r.correct,
                        "error": r.error,
                        "value": r.value,
                        "seconds": round(r.seconds, 2),
                    }
                    for r in rs
                ]
                for s, rs in results.items()
            },
            indent=0,
            default=str,
        )
    )
    print(f"wrote {out} and {raw}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
