"""A paid answer survives a Redis blip at commit time, and the calls of a lost attempt
stay in the job's accounts (#10, item 9).

The blip is real: the worker reaches Redis through a TCP proxy on loopback that the test
cuts (connections reset, new ones refused) and restores.
"""

from __future__ import annotations

import asyncio
import contextlib
import signal
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from urllib.parse import urlsplit

import pytest
from redis.asyncio import Redis

from app.store import Leases
from app.worker import Worker
from tests.both import Store
from tests.worker.harness import (
    TENANT,
    Gate,
    WorkerProcess,
    eventually,
    finished,
    job,
    running,
    sim_router,
    submit,
    worker_settings,
)

Spawn = Callable[..., WorkerProcess]


class Proxy:
    """Forwards TCP to ``target``; ``cut()`` resets every connection and refuses new ones
    until ``restore()`` (counted in ``refused``)."""

    def __init__(self, target_port: int) -> None:
        self.target_port = target_port
        self.port = 0
        self.open = True
        self.refused = 0
        self._pipes: set[asyncio.StreamWriter] = set()
        self._server: asyncio.Server | None = None

    async def start(self) -> None:
        self._server = await asyncio.start_server(self._accept, "127.0.0.1", 0)
        self.port = self._server.sockets[0].getsockname()[1]

    async def stop(self) -> None:
        self.cut()
        if self._server is not None:
            self._server.close()
            await self._server.wait_closed()

    def cut(self) -> None:
        self.open = False
        for writer in list(self._pipes):
            writer.transport.abort()
        self._pipes.clear()

    def restore(self) -> None:
        self.open = True

    async def _accept(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        if not self.open:
            self.refused += 1
            writer.transport.abort()
            return
        try:
            up_reader, up_writer = await asyncio.open_connection("127.0.0.1", self.target_port)
        except OSError:
            writer.transport.abort()
            return
        self._pipes.update({writer, up_writer})
        await asyncio.gather(
            self._pump(reader, up_writer), self._pump(up_reader, writer), return_exceptions=True
        )

    async def _pump(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            while data := await reader.read(65536):
                writer.write(data)
                await writer.drain()
        finally:
            self._pipes.discard(writer)
            with contextlib.suppress(Exception):
                writer.transport.abort()


@pytest.fixture
async def proxy(redis_url: str) -> AsyncIterator[Proxy]:
    server = Proxy(urlsplit(redis_url).port or 6379)
    await server.start()
    yield server
    await server.stop()


async def test_a_redis_blip_at_commit_time_does_not_lose_the_paid_answer(
    store: Store, proxy: Proxy, prefix: str, sim_url: str, redis_url: str, tmp_path: Path
) -> None:
    password = urlsplit(redis_url).password or ""
    behind = Redis.from_url(f"redis://:{password}@127.0.0.1:{proxy.port}/0", socket_timeout=5)
    leases = Leases(behind, prefix=prefix, lease_ms=10_000)
    async with sim_router(sim_url, tmp_path) as router:
        gate = Gate(router, hold=lambda n: n == 1)
        settings = worker_settings(lease_ms=10_000, heartbeat_ms=1000, reap_interval_ms=200)
        async with running(Worker(leases, gate, settings)):
            job_id = await submit(store, job(name="blip"))

            async def held() -> bool:
                return gate.waiting == 1

            await eventually(held, what="the model call to be held")
            proxy.cut()  # Redis vanishes for the worker just as the answer comes back
            gate.open()

            async def retried() -> bool:  # the commit failed, and was tried again
                return proxy.refused >= 2

            await eventually(retried, what="the commit to fail and be retried")
            proxy.restore()
            view = await finished(store, job_id)
    await leases.aclose()
    await behind.aclose()
    assert view.status == "succeeded"
    assert view.attempts == 1  # not run again: the paid answer was kept
    assert view.result.execution is not None
    assert view.result.execution.llm_calls == 1
    assert gate.calls == 1


async def test_the_calls_of_a_lost_attempt_are_counted_in_the_final_envelope(
    store: Store, spawn: Spawn
) -> None:
    first = await spawn().ready()
    spec = job(["broken_json", "slow", "ok"], name="lost calls")
    spec["budget"] = {"maxTurns": 1, "returnRetries": 2}
    job_id = await submit(store, spec)

    async def first_turn_recorded() -> bool:
        view = await store.get(job_id, tenant=TENANT)
        return view is not None and len(view.turns) == 1

    await eventually(first_turn_recorded, what="the first (rejected) call's record")
    first.send(signal.SIGKILL)  # during the second, slow call
    assert await first.exit_code() == -signal.SIGKILL
    spawn()

    view = await finished(store, job_id)
    assert view.status == "succeeded"
    assert view.attempts == 2
    execution = view.result.execution
    assert execution is not None
    own = [t for t in view.turns if t.job_attempt == 2]
    earlier = [t for t in view.turns if t.job_attempt == 1]
    assert len(earlier) == 1  # the paid, rejected call of the lost attempt
    assert execution.llm_calls == len(own) + 1
    assert execution.wasted_tokens >= earlier[0].tokens
    assert any("earlier attempt" in w for w in view.result.warnings)
