"""Helpers for the worker tests: jobs, polling, a gated model client, worker processes.

Waits poll a condition (tests/waiting.py) with a generous deadline (``WAIT_S``), never sleep
a fixed time, so the suite holds on a busy machine. Task texts carry a random tag, because
the simulator keeps per-conversation counters for its scripts.
"""

from __future__ import annotations

import asyncio
import json
import re
import secrets
import signal
import subprocess
import sys
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any, TypeVar

import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families
from redis.asyncio import Redis

from app.core.turn.model import (
    LLMRequest,
    LLMResponse,
    ModelClient,
    StructuredMode,
    StructuredOutput,
)
from app.providers.config import ModelConfig, ProviderConfig, ProvidersConfig
from app.providers.embedded import open_router
from app.providers.http import make_client
from app.providers.router import Router
from app.settings import Settings
from app.store import JobView
from app.worker import Worker
from tests.both import Store
from tests.waiting import PATIENCE_S, until

ROOT = Path(__file__).resolve().parents[2]
TENANT = "tests"
# Small leases keep the suite fast; generous waits keep it robust on a busy machine.
LEASE_MS = 1500
HEARTBEAT_MS = 300
REAP_INTERVAL_MS = 200
SLOW_MS = 3000  # how long a scripted "slow" answer takes
WAIT_S = PATIENCE_S

T = TypeVar("T")


def job(script: list[str] | None = None, *, name: str = "job", **extra: Any) -> dict[str, Any]:
    """A one-answer job; ``script`` drives the simulator (``["slow"]``: answer late once)."""
    directive = {"script": script or ["ok"]}
    return {
        "task": f"Name a city ({name} {secrets.token_hex(4)})\n[[sim {json.dumps(directive)}]]",
        "signature": "{city :string, population :int}",
        "budget": {"maxTurns": 1},
        **extra,
    }


async def submit(store: Store, spec: dict[str, Any]) -> str:
    view, created = await store.submit(tenant=TENANT, spec=spec)
    assert created
    return view.id


async def eventually(
    check: Callable[[], Awaitable[T | None]], *, what: str, within: float = WAIT_S
) -> T:
    """Poll ``check`` until it returns something truthy; fail after ``within`` seconds."""
    return await until(check, what=what, patience=within, every=0.05)


async def listed_workers(redis: Redis, store: Store, shard: int = 0) -> int:
    """How many workers are on a shard's idle list (each is listed once per slot it has to
    spare, up to ``HANDOFF_SLOTS``: lua/claim.lua)."""
    entries = await redis.lrange(store.keys.shard(shard).idle, 0, -1)
    return len({(e if isinstance(e, bytes) else e.encode()).split(b"/")[0] for e in entries})


async def status_of(store: Store, job_id: str, *wanted: str, within: float = WAIT_S) -> JobView:
    """The job once its status is one of ``wanted``."""

    async def check() -> JobView | None:
        view = await store.get(job_id, tenant=TENANT)
        assert view is not None, f"job {job_id} vanished"
        return view if view.status in wanted else None

    return await eventually(check, what=f"job {job_id} to be {'/'.join(wanted)}", within=within)


async def finished(store: Store, job_id: str, within: float = WAIT_S) -> JobView:
    return await status_of(store, job_id, "succeeded", "failed", "cancelled", within=within)


async def job_ends(store: Store, job_id: str) -> int:
    """How many ``job_end`` events the job's stream holds: one per committed end."""
    events = await store.events(job_id, after=None, block_ms=0, count=10_000)
    return sum(1 for event in events if event.name == "job_end")


# -- in-process workers ---------------------------------------------------------------------


def sim_providers(url: str) -> ProvidersConfig:
    return ProvidersConfig(
        providers={"sim": ProviderConfig(kind="openai", base_url=f"{url}/v1", api_key_env=None)},
        models={"sim-model": ModelConfig(provider="sim", structured="prompt")},
    )


@asynccontextmanager
async def sim_router(url: str, data_dir: Path) -> AsyncIterator[Router]:
    async with (
        make_client() as http,
        open_router(http, data_dir=data_dir, config=sim_providers(url)) as router,
    ):
        yield router


class Gate:
    """A ``ModelClient`` around a real one that counts calls in flight and can hold them.

    ``hold(n)`` says whether the n-th call (1-based) waits for ``open()``; a held call that
    the worker cancels is counted in ``aborted``.
    """

    def __init__(self, inner: ModelClient, hold: Callable[[int], bool] = lambda n: False) -> None:
        self.inner = inner
        self.hold = hold
        self.calls = 0
        self.in_flight = 0
        self.max_in_flight = 0
        self.aborted = 0
        self.waiting = 0
        self._open = asyncio.Event()

    def open(self) -> None:
        self._open.set()

    async def complete(self, request: LLMRequest) -> LLMResponse:
        self.calls += 1
        self.in_flight += 1
        self.max_in_flight = max(self.max_in_flight, self.in_flight)
        try:
            if self.hold(self.calls):
                self.waiting += 1
                try:
                    await self._open.wait()
                finally:
                    self.waiting -= 1
            return await self.inner.complete(request)
        except asyncio.CancelledError:
            self.aborted += 1
            raise
        finally:
            self.in_flight -= 1

    def structured_mode(self, model: str | None, requested: StructuredOutput) -> StructuredMode:
        return self.inner.structured_mode(model, requested)

    def estimate_cost(
        self, model: str | None, input_tokens: int, output_tokens: int
    ) -> float | None:
        return self.inner.estimate_cost(model, input_tokens, output_tokens)


def worker_settings(**overrides: Any) -> Settings:
    values: dict[str, Any] = {
        "lease_ms": LEASE_MS,
        "heartbeat_ms": HEARTBEAT_MS,
        "reap_interval_ms": REAP_INTERVAL_MS,
        "worker_concurrency": 4,
        "worker_metrics_port": 0,
        "drain_timeout_s": 5.0,
    }
    return Settings(**(values | overrides))


@asynccontextmanager
async def running(worker: Worker) -> AsyncIterator[asyncio.Event]:
    """Run ``worker`` in a task; yields its stop event; stops (drains) it on exit."""
    stop = asyncio.Event()
    task = asyncio.create_task(worker.run(stop))
    try:
        yield stop
    finally:
        stop.set()
        try:
            await asyncio.wait_for(task, WAIT_S)
        finally:
            task.cancel()


# -- worker processes -----------------------------------------------------------------------


class WorkerProcess:
    """``reprompt worker`` with its log in a file."""

    def __init__(self, name: str, env: dict[str, str], log_path: Path) -> None:
        self.name = name
        self.log_path = log_path
        with open(log_path, "wb") as log:
            self.proc = subprocess.Popen(
                [sys.executable, "-m", "app.cli", "worker"],
                cwd=ROOT,
                env=env,
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
            )

    @property
    def pid(self) -> int:
        return self.proc.pid

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")

    def logged(self, pattern: str) -> bool:
        return re.search(pattern, self.log()) is not None

    async def wait_log(self, pattern: str, within: float = WAIT_S) -> None:
        async def check() -> bool:
            if self.logged(pattern):
                return True
            if self.proc.poll() is not None:
                pytest.fail(f"{self.name} exited ({self.proc.returncode}):\n{self.log()}")
            return False

        await eventually(check, what=f"{self.name} to log {pattern!r}", within=within)

    async def ready(self) -> WorkerProcess:
        await self.wait_log(r"worker \S+ started")
        return self

    def send(self, sig: signal.Signals) -> None:
        self.proc.send_signal(sig)

    async def exit_code(self, within: float = WAIT_S) -> int:
        async def check() -> int | None:
            code = self.proc.poll()
            return None if code is None else code + 1000  # 0 is a result too

        return await eventually(check, what=f"{self.name} to exit", within=within) - 1000

    def kill(self) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGCONT)  # a stopped process must run to die cleanly
            self.proc.kill()
        self.proc.wait(timeout=10)


def holder(workers: list[WorkerProcess], job_id: str, attempt: int) -> WorkerProcess | None:
    """The worker that logged starting ``job_id``'s ``attempt``-th claim, if any."""
    for process in workers:
        if process.logged(rf"job {job_id} started: attempt {attempt}\b"):
            return process
    return None


def scrape(port: int, name: str, **labels: str) -> float | None:
    """One sample from a worker's ``/metrics``; None when it is not there."""
    text = httpx.get(f"http://127.0.0.1:{port}/metrics", timeout=5).text
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            if sample.name == name and sample.labels == labels:
                return float(sample.value)
    return None
