"""The TypeScript and Java clients (clients/) against a live service: each submits a job file
with an Idempotency-Key, follows it by long-poll and by Server-Sent Events at once and prints
the envelope; a refused request prints the problem+json and exits 3.

The service runs on loopback with auth on, the embedded redis-server, an in-process worker
and the simulator as its model. The TypeScript client is installed with ``npm ci`` (only
when node_modules is missing or package-lock.json changed), its types are checked against
openapi/openapi.json, it is compiled by ``tsc`` (strict) and its own unit tests run
(``npm test``); the Java client is compiled by ``javac`` and its unit checks run.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import json
import os
import re
import shutil
import socket
import subprocess
import tempfile
import threading
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import httpx
import pytest

from app.assembly import api_app
from app.providers.config import ModelConfig, ProviderConfig, ProvidersConfig
from app.redis_server import EmbeddedRedis
from reprompt_sim.server import SimConfig, serve_in_background
from tests.api.test_tools import ANSWER as TOOL_ANSWER
from tests.api.test_tools import calls, tool_job
from tests.service import KEYS, api_keys, serve, settings_for

pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parents[2]
TS = ROOT / "clients" / "typescript"
JAVA = ROOT / "clients" / "java"
EXAMPLE = ROOT / "examples" / "invoice.json"
ANSWER = json.loads((ROOT / "examples" / "invoice.answer.json").read_text(encoding="utf-8"))
SLOW_MS = 1500  # the simulator's first answer comes this late: long-polls of 500 ms must repeat
KEY = KEYS["alice"]
CUT_AFTER_S = 0.5  # CuttingProxy: how long after job_start the first event stream breaks
STAMP = ".reprompt-lock.sha256"  # in node_modules: the lock (and node) npm ci installed from


@contextlib.contextmanager
def sim_service(data: Path, *, seed: int, slow_ms: int = 0, **settings: Any) -> Iterator[str]:
    """The service on its own redis-server, its one model the simulator's."""
    with (
        EmbeddedRedis(data / "redis") as redis,
        serve_in_background(SimConfig(seed=seed, slow_ms=slow_ms)) as sim,
    ):
        providers = ProvidersConfig(
            default="sim-model",
            providers={"sim": ProviderConfig(kind="openai", base_url=f"{sim}/v1")},
            models={"sim-model": ModelConfig(provider="sim", structured="prompt")},
        )
        config = settings_for(redis.url, data, api_keys=api_keys(), **settings)
        with serve(api_app(config, embedded_worker=True, providers=providers)) as url:
            yield url


@pytest.fixture(scope="module")
def service(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    with sim_service(
        tmp_path_factory.mktemp("clients"),
        seed=5,
        slow_ms=SLOW_MS,
        key_prefix="clients",
        max_deadline_ms=600_000,
        max_wait_ms=60_000,
    ) as url:
        yield url


def run(
    args: list[str], *, cwd: Path = ROOT, env: dict[str, str] | None = None, timeout: float = 120
) -> subprocess.CompletedProcess[str]:
    base = {k: v for k, v in os.environ.items() if k not in ("REPROMPT_API_KEY", "REPROMPT_URL")}
    return subprocess.run(
        args,
        cwd=cwd,
        env={**base, **(env or {})},
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )


def tool(name: str) -> str:
    path = shutil.which(name)
    if path is None:  # CI and the dev machines have it: a missing one is a failure, not a skip
        pytest.fail(f"{name} is not on PATH: the client tests need Node 20+ (npm) and JDK 17+")
    return path


def npm_ci_if_needed() -> None:
    """``npm ci`` when node_modules is missing or was installed from another lock (or node)."""
    npm, node = tool("npm"), tool("node")
    version = run([node, "--version"]).stdout.strip()
    lock = (TS / "package-lock.json").read_bytes()
    want = hashlib.sha256(lock + version.encode()).hexdigest()
    stamp = TS / "node_modules" / STAMP
    where = hashlib.sha256(bytes(TS)).hexdigest()[:12]
    guard = Path(tempfile.gettempdir()) / f"reprompt-npm-ci-{where}.lock"
    with guard.open("w") as held:  # one npm ci at a time, whichever test process asks
        fcntl.flock(held, fcntl.LOCK_EX)
        if stamp.is_file() and stamp.read_text().strip() == want:
            return
        proc = run([npm, "ci", "--no-audit", "--no-fund"], cwd=TS, timeout=600)
        assert proc.returncode == 0, proc.stdout + proc.stderr
        stamp.write_text(want + "\n")


@dataclass(frozen=True)
class Client:
    name: str
    command: list[str]

    def __call__(
        self, *args: str, key: str | None = KEY, url: str | None = None
    ) -> subprocess.CompletedProcess[str]:
        env = {"REPROMPT_API_KEY": key} if key else {}
        if url:
            env["REPROMPT_URL"] = url
        return run([*self.command, *args], env=env)


@pytest.fixture(scope="module")
def typescript() -> Client:
    npm_ci_if_needed()
    npm = tool("npm")
    # check:schema (the types match openapi.json) and tsc --noEmit (strict), then the build.
    checked = run([npm, "run", "--silent", "check"], cwd=TS, timeout=300)
    assert checked.returncode == 0, checked.stdout + checked.stderr
    built = run([npm, "run", "--silent", "build"], cwd=TS, timeout=300)
    assert built.returncode == 0, built.stdout + built.stderr
    return Client("typescript", [tool("node"), str(TS / "dist" / "cli.js")])


def test_typescript_sse_reader_on_cut_streams(typescript: Client) -> None:
    """src/sse.test.ts (node:test): events split at every byte, comments, unfinished events."""
    proc = run([tool("npm"), "test", "--silent"], cwd=TS)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert re.search(r"^# pass [1-9]\d*$", proc.stdout, re.MULTILINE), proc.stdout
    assert re.search(r"^# fail 0$", proc.stdout, re.MULTILINE), proc.stdout


@pytest.fixture(scope="module")
def java(tmp_path_factory: pytest.TempPathFactory) -> Client:
    tool("javac")
    classes = tmp_path_factory.mktemp("java-classes")
    built = run(["bash", str(JAVA / "build.sh"), str(classes), "test"], timeout=300)
    assert built.returncode == 0, built.stdout + built.stderr
    return Client("java", [tool("java"), "-cp", str(classes), "reprompt.client.Example"])


def test_java_json_and_sse_readers(java: Client) -> None:
    """clients/java/test: JSON escapes, numbers, refusals, the depth bound; the SSE reader."""
    classes = java.command[java.command.index("-cp") + 1]
    proc = run([tool("java"), "-cp", classes, "reprompt.client.ClientTest"])
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert re.search(r"^\d+ passed, 0 failed$", proc.stdout, re.MULTILINE), proc.stdout


@pytest.fixture(params=["typescript", "java"])
def client(request: pytest.FixtureRequest) -> Client:
    built: Client = request.getfixturevalue(request.param)
    return built


def invoice_job(tmp_path: Path, *, label: str) -> Path:
    """examples/invoice.json, with the simulator told the right answer, to be slow at first
    and to leave a required field out of its first answer (so there is one retry)."""
    spec = json.loads(EXAMPLE.read_text(encoding="utf-8"))
    directive = {"expect": ANSWER, "script": ["slow", "missing_field", "ok"]}
    # A task of its own per run: the simulator serves a script's transport entries once per task.
    spec["task"] += f" ({label} {uuid.uuid4().hex[:8]})\n\n[[sim {json.dumps(directive)}]]"
    path = tmp_path / "job.json"
    path.write_text(json.dumps(spec), encoding="utf-8")
    return path


def job_id(stderr: str, verb: str) -> str:
    match = re.search(rf"^{verb} (job_\w+) \(", stderr, re.MULTILINE)
    assert match, stderr
    return match.group(1)


def assert_invoice_envelope(envelope: dict[str, Any]) -> None:
    assert envelope["status"] == "success", envelope
    assert envelope["data"] == ANSWER  # 25 == 25.0: each client writes numbers its own way
    assert envelope["execution"]["retryCount"] == 1
    assert envelope["execution"]["llmCalls"] == 2
    assert envelope["provenance"].startswith("resolved after 1 retry: ")


def test_client_submits_follows_both_ways_and_prints_the_envelope(
    client: Client, service: str, tmp_path: Path
) -> None:
    job = invoice_job(tmp_path, label=client.name)
    key = f"{client.name}-{uuid.uuid4()}"
    proc = client("--url", service, "--wait-ms", "500", "--idempotency-key", key, str(job))
    assert proc.returncode == 0, proc.stderr
    envelope = json.loads(proc.stdout)
    assert_invoice_envelope(envelope)

    err = proc.stderr
    created = job_id(err, "submitted")
    assert f"(202, Idempotency-Key {key})" in err
    # Long-poll: the job takes over SLOW_MS, so polls of 500 ms came back unfinished first.
    polls = re.findall(r"^long-poll \d+: (\w+) after (\d+) ms$", err, re.MULTILINE)
    assert len(polls) >= 2, err
    assert polls[-1][0] == "succeeded"
    assert {status for status, _ in polls[:-1]} <= {"queued", "in_progress"}
    assert all(int(ms) >= 400 for _, ms in polls[:-1]), polls  # the server held each one
    # SSE: every turn as it happened, then job_end; the two paths got the same envelope.
    assert "sse: turn_start turn=1 type=must_return attempt=1" in err
    assert re.search(r"^sse: turn_end turn=1 result=invalid llm-invalid-output: ", err, re.M)
    assert "sse: turn_start turn=2 type=retry attempt=2" in err
    assert "sse: turn_end turn=2 result=success" in err
    assert err.rstrip().splitlines()[-1] == "long-poll and events agree: succeeded"
    assert "sse: job_end status=succeeded envelope=success" in err
    assert KEY not in proc.stdout + proc.stderr

    # What the client printed is what the service holds.
    with httpx.Client(base_url=service, headers={"authorization": f"Bearer {KEY}"}) as http:
        held = http.get(f"/v1/jobs/{created}").json()
    assert held["status"] == "succeeded"
    assert held["result"]["data"] == envelope["data"]
    assert held["result"]["execution"]["tokensUsed"] == envelope["execution"]["tokensUsed"]

    # The same Idempotency-Key and body: the same job (200 + Idempotent-Replayed), followed
    # again; its event stream is replayed from the start up to job_end.
    again = client("--url", service, "--idempotency-key", key, str(job))
    assert again.returncode == 0, again.stderr
    assert job_id(again.stderr, "replayed") == created
    assert "(200 Idempotent-Replayed" in again.stderr
    assert "sse: job_end status=succeeded envelope=success" in again.stderr
    assert json.loads(again.stdout)["data"] == envelope["data"]


@dataclass
class CuttingProxy:
    """A loopback TCP proxy to the service that breaks off the first event stream once it has
    relayed the ``job_start`` event, as a dropped connection would: the client must reopen
    the stream with Last-Event-ID. Every other connection is relayed as it is."""

    upstream: str
    event_requests: list[bytes] = field(default_factory=list)
    _lock: threading.Lock = field(default_factory=threading.Lock)
    _server: socket.socket | None = None
    _sockets: list[socket.socket] = field(default_factory=list)

    def __enter__(self) -> str:
        self._server = socket.create_server(("127.0.0.1", 0))
        threading.Thread(target=self._accept, daemon=True).start()
        return f"http://127.0.0.1:{self._server.getsockname()[1]}"

    def __exit__(self, *exc: object) -> None:
        assert self._server is not None
        self._server.close()
        for end in self._sockets:  # whatever a relay thread has not closed yet
            end.close()

    def _accept(self) -> None:
        assert self._server is not None
        target = urlsplit(self.upstream)
        while True:
            try:
                client, _ = self._server.accept()
            except OSError:
                return  # closed
            upstream = socket.create_connection((target.hostname, target.port), timeout=60)
            client.settimeout(60)
            self._sockets += [client, upstream]
            stream: dict[str, int] = {}  # "index" of this connection's events request
            threading.Thread(
                target=self._requests, args=(client, upstream, stream), daemon=True
            ).start()
            threading.Thread(
                target=self._answers, args=(upstream, client, stream), daemon=True
            ).start()

    def _requests(self, source: socket.socket, sink: socket.socket, stream: dict[str, int]) -> None:
        with contextlib.suppress(OSError):
            while data := source.recv(65536):
                first = data.split(b"\r\n", 1)[0]
                if first.startswith(b"GET ") and b"/events" in first:
                    with self._lock:  # marked before the request goes on: before any answer
                        stream["index"] = len(self.event_requests)
                        self.event_requests.append(data.split(b"\r\n\r\n", 1)[0])
                sink.sendall(data)
        with contextlib.suppress(OSError):
            sink.shutdown(socket.SHUT_WR)

    def _answers(self, source: socket.socket, sink: socket.socket, stream: dict[str, int]) -> None:
        seen = b""
        with contextlib.suppress(OSError):
            while data := source.recv(65536):
                sink.sendall(data)
                if stream.get("index") == 0:
                    seen = (seen + data)[-4096:]
                    if b"event: job_start" in seen:
                        # The first stream, cut after job_start: a moment later, so that the
                        # client has read what came (Java's reader drops what is still
                        # buffered when the connection fails).
                        time.sleep(CUT_AFTER_S)
                        break
        for end in (sink, source):
            with contextlib.suppress(OSError):
                end.shutdown(socket.SHUT_RDWR)
            end.close()


def test_client_reopens_a_dropped_event_stream_after_the_last_event(
    client: Client, service: str, tmp_path: Path
) -> None:
    proxy = CuttingProxy(service)
    with proxy as url:
        proc = client("--url", url, "--follow", "sse", str(invoice_job(tmp_path, label="cut")))
    assert proc.returncode == 0, proc.stderr
    assert_invoice_envelope(json.loads(proc.stdout))

    err = proc.stderr
    resumed = re.search(r"^sse: reconnecting after (\S+)$", err, re.MULTILINE)
    assert resumed, err
    assert len(proxy.event_requests) == 2, proxy.event_requests
    second = proxy.event_requests[1].decode().lower()
    assert f"last-event-id: {resumed.group(1)}".lower() in second
    assert "last-event-id" not in proxy.event_requests[0].decode().lower()
    # Every event once: nothing lost at the cut, nothing repeated after it.
    names = re.findall(r"^sse: (\w+)", err, re.MULTILINE)
    names.remove("reconnecting")
    assert names == [
        "job_queued",
        "job_start",
        "turn_start",
        "turn_end",
        "turn_start",
        "turn_end",
        "job_end",
    ], err


def test_client_prints_the_problem_of_a_refused_job_and_exits_3(
    client: Client, service: str, tmp_path: Path
) -> None:
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps({"task": "", "signature": "{x :int}", "budget": {"maxTurns": 0}}))
    proc = client(str(bad), url=service)  # the URL from REPROMPT_URL this time
    assert proc.returncode == 3, proc.stderr
    problem = json.loads(proc.stdout)
    assert problem["status"] == 422
    assert problem["code"] == "invalid-input"
    fields = {error["field"] for error in problem["errors"]}
    assert {"task", "budget.maxTurns"} <= fields
    assert proc.stderr.startswith("reprompt answered 422 Invalid input: ")


def test_client_without_a_key_gets_401_and_exits_3(client: Client, service: str) -> None:
    proc = client("--url", service, str(EXAMPLE), key=None)
    assert proc.returncode == 3, proc.stderr
    problem = json.loads(proc.stdout)
    assert (problem["status"], problem["code"]) == (401, "unauthorized")

    wrong = client("--url", service, str(EXAMPLE), key="not-a-key")
    assert wrong.returncode == 3, wrong.stderr
    assert json.loads(wrong.stdout)["code"] == "unauthorized"
    assert "not-a-key" not in wrong.stdout + wrong.stderr


def test_client_without_a_service_exits_2(client: Client, tmp_path: Path) -> None:
    proc = client("--url", "http://127.0.0.1:9", str(invoice_job(tmp_path, label="down")))
    assert proc.returncode == 2, proc.stderr
    assert proc.stdout == ""


def test_client_usage_errors_exit_2(client: Client, tmp_path: Path) -> None:
    assert client().returncode == 2
    assert client("--follow", "sideways", str(EXAMPLE)).returncode == 2
    assert client("--wait-ms", "5", str(EXAMPLE)).returncode == 2  # would poll in a tight loop
    missing = client(str(tmp_path / "nope.json"))
    assert missing.returncode == 2
    assert "cannot read job" in missing.stderr


def test_typescript_types_are_regenerated_from_openapi_json(tmp_path: Path) -> None:
    """src/schema.d.ts matches openapi/openapi.json (the fixture checks it too), and the check
    fails on a document that differs from the one it was generated from."""
    npm_ci_if_needed()
    npm = tool("npm")
    assert run([npm, "run", "--silent", "check:schema"], cwd=TS).returncode == 0
    spec = json.loads((ROOT / "openapi" / "openapi.json").read_text(encoding="utf-8"))
    spec["components"]["schemas"]["Job"]["properties"]["addedLater"] = {"type": "string"}
    drifted = tmp_path / "openapi.json"
    drifted.write_text(json.dumps(spec), encoding="utf-8")
    proc = run([npm, "run", "--silent", "check:schema"], cwd=TS, env={"OPENAPI_JSON": str(drifted)})
    assert proc.returncode != 0
    assert "src/schema.d.ts is stale" in proc.stderr
    # The SSE event map comes from x-sse-events: every event the endpoint documents.
    events = spec["paths"]["/v1/jobs/{job_id}/events"]["get"]["responses"]["200"]["x-sse-events"]
    generated = (TS / "src" / "schema.d.ts").read_text(encoding="utf-8")
    block = generated.split("export interface SseEvents {", 1)[1].split("}", 1)[0]
    assert sorted(re.findall(r"^\s+(\w+): ", block, re.MULTILINE)) == sorted(events)


@pytest.fixture
def limited(tmp_path: Path) -> Iterator[str]:
    """A service whose tenants may make one request a second (429 beyond it)."""
    with sim_service(
        tmp_path, seed=7, key_prefix="limited", rate_per_tenant=1, burst_per_tenant=1
    ) as url:
        yield url


def test_client_retries_429_and_answers_client_tools(
    client: Client, limited: str, tmp_path: Path
) -> None:
    """#29, item 11: against a tenant allowed one request a second, each client waits out
    each 429's Retry-After, and runs a job that pauses for two client tools (its --tools:
    the outputs posted, the job goes on)."""
    url = limited
    job = tmp_path / "tool-job.json"
    job.write_text(json.dumps(tool_job([calls("lookup", "stock"), "ok"])), encoding="utf-8")
    outputs = tmp_path / "outputs.json"
    outputs.write_text(json.dumps({"lookup": {"price": 9.5}, "stock": {"available": 7}}))
    proc = client("--tools", str(outputs), "--wait-ms", "5000", str(job), url=url)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    envelope = json.loads(proc.stdout)
    assert envelope["status"] == "success", envelope
    assert envelope["data"] == TOOL_ANSWER
    assert 'tool: lookup {"sku":"A1"}' in proc.stderr
    assert 'tool: stock {"sku":"A1"}' in proc.stderr
    assert re.search(r"^retry: 429, again in \d+ ms$", proc.stderr, re.MULTILINE), proc.stderr


def test_typescript_client_streams_generate_and_prints_partials(
    typescript: Client, service: str, tmp_path: Path
) -> None:
    job = invoice_job(tmp_path, label="stream")
    proc = typescript("--url", service, "--follow", "stream", str(job))
    assert proc.returncode == 0, proc.stderr
    envelope = json.loads(proc.stdout)
    assert_invoice_envelope(envelope)
    partials = re.findall(r"^stream: partial (.*)$", proc.stderr, re.MULTILINE)
    assert partials, proc.stderr
    # The first answer left a field out: its partials were discarded, the second one's stand.
    assert re.search(r"^stream: partial_discarded the answer was rejected", proc.stderr, re.M)
    assert json.loads(partials[-1]) == envelope["data"]
