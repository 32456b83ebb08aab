"""The Worker class with jobs handed to it by submits (lua/submit.lua), in-process.

A real redis-server, the real router over the simulator; ``Gate`` holds a call so the test
looks at the jobs while one runs. A worker with no free slot left leaves every idle list,
so the next job waits in the queue and is claimed when a slot frees. A job handed over all
the same (its submit came before the worker's LREM) is released to the queue: never more
than its concurrency at once. A worker that stops leaves every idle list.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path

import pytest
from redis.asyncio import Redis

from app.store import JobView
from app.worker import Worker
from tests.both import Store
from tests.worker.harness import (
    LEASE_MS,
    SLOW_MS,
    TENANT,
    Gate,
    eventually,
    finished,
    job,
    listed_workers,
    running,
    sim_router,
    status_of,
    worker_settings,
)

SHARDS = 2


@pytest.fixture
async def two_shards(redis_url: str, prefix: str) -> AsyncIterator[tuple[Store, Redis]]:
    redis = Redis.from_url(redis_url)
    store = Store(redis, prefix=prefix, lease_ms=LEASE_MS, max_attempts=3, shards=SHARDS)
    try:
        yield store, redis
    finally:
        await store.aclose()
        await redis.aclose()


def held(gate: Gate) -> Callable[[], Awaitable[bool]]:
    async def check() -> bool:
        return gate.waiting == 1

    return check


async def listed_on(store: Store, redis: Redis, shards: range, count: int) -> None:
    async def check() -> bool:
        listed = [await listed_workers(redis, store, i) for i in shards]
        return listed == [count] * len(shards)

    await eventually(check, what=f"{count} worker(s) on the idle list of shards {shards}")


async def submit_on(store: Store, shard: int, name: str) -> JobView:
    """A job that lands on ``shard``: an Idempotency-Key picks the shard."""
    key = next(
        f"{name}-{i}" for i in range(100) if store.keys.shard_for(TENANT, f"{name}-{i}", 0) == shard
    )
    view, created = await store.submit(tenant=TENANT, spec=job(name=name), idempotency_key=key)
    assert created
    assert store.shard_of(view.id).index == shard
    return view


async def test_a_worker_with_no_free_slot_leaves_the_lists_and_claims_the_next_job_later(
    two_shards: tuple[Store, Redis], sim_url: str, tmp_path: Path
) -> None:
    store, redis = two_shards
    async with sim_router(sim_url, tmp_path) as router:
        gate = Gate(router, hold=lambda n: n == 1)
        worker = Worker(store, gate, worker_settings(worker_concurrency=1))
        async with running(worker):
            await listed_on(store, redis, range(SHARDS), 1)  # one short claim: both shards
            first = await submit_on(store, 0, "first")
            await eventually(held(gate), what="the first job's call, held")
            assert worker.running == 1
            await listed_on(store, redis, range(SHARDS), 0)  # full: off both lists

            second = await submit_on(store, 1, "second")  # nobody listed: it waits
            assert (await status_of(store, second.id, "queued")).attempts == 0
            assert gate.calls == 1

            gate.open()
            done = [await finished(store, first.id), await finished(store, second.id)]
            await listed_on(store, redis, range(SHARDS), 1)  # a short claim: listed again

    assert [v.status for v in done] == ["succeeded", "succeeded"]
    assert [v.attempts for v in done] == [1, 1]
    assert gate.max_in_flight == 1
    names = [e.name for e in await store.events(second.id, after=None, block_ms=0, count=100)]
    assert "job_requeued" not in names  # claimed from the queue, never handed and released


async def test_a_job_handed_over_without_a_free_slot_is_released_and_run_when_one_frees(
    two_shards: tuple[Store, Redis], sim_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    store, redis = two_shards

    async def late() -> None:  # as when the next submit runs before the worker's LREM
        pass

    monkeypatch.setattr(store, "leave", late)
    async with sim_router(sim_url, tmp_path) as router:
        gate = Gate(router, hold=lambda n: n == 1)
        worker = Worker(store, gate, worker_settings(worker_concurrency=1))
        async with running(worker):
            await listed_on(store, redis, range(SHARDS), 1)  # one short claim: both shards
            first = await submit_on(store, 0, "first")
            await eventually(held(gate), what="the first job's call, held")
            assert worker.running == 1
            assert await redis.llen(store.keys.shard(0).idle) == 0  # taken off by the hand-off

            second = await submit_on(store, 1, "second")  # handed over too: no free slot
            queued = await status_of(store, second.id, "queued")
            assert queued.attempts == 0  # released: the attempt not counted
            assert gate.calls == 1

            gate.open()
            done = [await finished(store, first.id), await finished(store, second.id)]

    assert [v.status for v in done] == ["succeeded", "succeeded"]
    assert [v.attempts for v in done] == [1, 1]
    assert gate.max_in_flight == 1
    events = await store.events(second.id, after=None, block_ms=0, count=100)
    names = [e.name for e in events]
    assert names[:3] == ["job_queued", "job_start", "job_requeued"]
    assert json.loads(events[2].data)["reason"] == "released"


async def test_a_worker_that_stops_leaves_every_idle_list_and_takes_no_more_jobs(
    two_shards: tuple[Store, Redis], sim_url: str, tmp_path: Path
) -> None:
    store, redis = two_shards
    async with sim_router(sim_url, tmp_path) as router:
        worker = Worker(store, router, worker_settings())
        async with running(worker) as stop:
            await listed_on(store, redis, range(SHARDS), 1)
            handed = await submit_on(store, 0, "handed")
            assert (await finished(store, handed.id)).attempts == 1
            await listed_on(store, redis, range(SHARDS), 1)  # its commit listed it again
            stop.set()
            await listed_on(store, redis, range(SHARDS), 0)  # before its drain ends

        after = await submit_on(store, 1, "after")
        view = await store.get(after.id, tenant=TENANT)
    assert view is not None
    assert view.status == "queued"  # nobody to hand it to: it waits in the queue


async def test_a_handed_job_longer_than_its_lease_is_kept_by_heartbeats(
    two_shards: tuple[Store, Redis], sim_url: str, tmp_path: Path
) -> None:
    store, redis = two_shards
    async with sim_router(sim_url, tmp_path) as router:
        worker = Worker(store, router, worker_settings())
        async with running(worker):
            await listed_on(store, redis, range(SHARDS), 1)
            # The simulator answers after SLOW_MS, twice the lease.
            spec = job(["slow"], name="slow")
            key = next(k for k in map(str, range(100)) if store.keys.shard_for(TENANT, k, 0) == 0)
            slow, _ = await store.submit(tenant=TENANT, spec=spec, idempotency_key=key)
            view = await finished(store, slow.id)
            handed = store.handed_total

    assert SLOW_MS >= 2 * LEASE_MS
    assert handed == 1  # it came by the hand-off, not a claim
    assert view.status == "succeeded"
    assert view.attempts == 1  # its lease, taken in the submit, was renewed: never reaped


async def test_a_job_handed_to_an_idle_worker_starts_as_its_message_is_read(
    two_shards: tuple[Store, Redis], sim_url: str, tmp_path: Path
) -> None:
    store, redis = two_shards
    async with sim_router(sim_url, tmp_path) as router:
        worker = Worker(store, router, worker_settings())
        async with running(worker):
            await listed_on(store, redis, range(SHARDS), 1)
            started = store.on_handed
            assert started is not None  # the worker's, while it runs
            held_then: list[tuple[int, int]] = []

            def spy() -> None:
                started()
                # Right after the message: the job is the worker's, and nothing is left
                # for the receiving task to take passes later.
                held_then.append((worker.running, store.pending_handed))

            store.on_handed = spy
            handed = await submit_on(store, 0, "at-once")
            view = await finished(store, handed.id)

    assert held_then == [(1, 0)]
    assert view.status == "succeeded"
    assert view.attempts == 1
    assert store.on_handed is None  # the worker stopped
