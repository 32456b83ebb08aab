"""Real parts for the worker tests: one redis-server, the simulator, worker processes.

Every test gets its own key prefix on the shared redis-server, so jobs, queues and the
workers' reapers of different tests never meet. Every worker process a test starts is
killed on teardown.
"""

from __future__ import annotations

import os
import secrets
from collections.abc import AsyncIterator, Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from redis.asyncio import Redis

from app.redis_server import EmbeddedRedis
from reprompt_sim.server import SimConfig, serve_in_background
from tests.both import Store
from tests.worker.harness import HEARTBEAT_MS, LEASE_MS, REAP_INTERVAL_MS, SLOW_MS, WorkerProcess


@pytest.fixture(scope="session")
def redis_url(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    with EmbeddedRedis(tmp_path_factory.mktemp("redis")) as server:
        yield server.url


@pytest.fixture(scope="session")
def sim_url() -> Iterator[str]:
    """Instant answers, except scripted ``slow`` ones (``SLOW_MS``)."""
    with serve_in_background(SimConfig(seed=11, slow_ms=SLOW_MS)) as url:
        yield url


@pytest.fixture
def prefix() -> str:
    return "t" + secrets.token_hex(6)


@pytest.fixture
async def store(redis_url: str, prefix: str) -> AsyncIterator[Store]:
    redis = Redis.from_url(redis_url)
    try:
        yield Store(redis, prefix=prefix, lease_ms=LEASE_MS, max_attempts=3)
    finally:
        await redis.aclose()


@pytest.fixture
def spawn(
    redis_url: str, sim_url: str, prefix: str, tmp_path: Path
) -> Iterator[Callable[..., WorkerProcess]]:
    """Start worker processes on this test's prefix; every one is killed on teardown."""
    base = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith(("REPROMPT_", "OPENAI_", "ANTHROPIC_", "REDIS_"))
    }
    base |= {
        "PYTHONUNBUFFERED": "1",
        "OPENAI_BASE_URL": f"{sim_url}/v1",
        "REPROMPT_REDIS_URL": redis_url,
        "REPROMPT_KEY_PREFIX": prefix,
        "REPROMPT_DATA_DIR": str(tmp_path / "data"),
        "REPROMPT_LEASE_MS": str(LEASE_MS),
        "REPROMPT_HEARTBEAT_MS": str(HEARTBEAT_MS),
        "REPROMPT_REAP_INTERVAL_MS": str(REAP_INTERVAL_MS),
        "REPROMPT_WORKER_METRICS_PORT": "0",
        "REPROMPT_MAX_ATTEMPTS": "3",
        "REPROMPT_WORKER_CONCURRENCY": "4",
    }
    started: list[WorkerProcess] = []

    def start(env: dict[str, str | None] | None = None, **settings: Any) -> WorkerProcess:
        """``settings`` become ``REPROMPT_*`` variables; ``env`` is set as is (None: unset)."""
        name = f"worker-{len(started) + 1}"
        extra = {f"REPROMPT_{k.upper()}": str(v) for k, v in settings.items()} | (env or {})
        final = {k: v for k, v in (base | extra).items() if v is not None}
        process = WorkerProcess(name, final, tmp_path / f"{name}.log")
        started.append(process)
        return process

    try:
        yield start
    finally:
        for process in started:
            process.kill()
