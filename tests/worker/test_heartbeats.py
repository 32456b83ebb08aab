"""A worker holding many jobs keeps every lease alive, on the pool the service really uses.

The worker's store is built as the service builds it (a pool of 200 connections and a
lane for lease traffic), the jobs' model calls are held by a ``Gate`` over the real router
and the simulator, and the leases are short (``LEASE_MS``), so "alive" means several lease
periods during which a reaper looking at the server clock finds nothing to take back.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from redis.asyncio import Redis

from app.assembly import WORKER_REDIS_QUEUE_S
from app.store import connect
from app.worker import Worker
from tests.both import Store
from tests.store.helpers import server_ms
from tests.worker.harness import (
    LEASE_MS,
    TENANT,
    Gate,
    eventually,
    finished,
    job,
    running,
    sim_router,
    submit,
    worker_settings,
)

HELD = 300  # more than the pool's 200 connections: a heartbeat per job could not fit


@pytest.fixture
async def service_store(redis_url: str, prefix: str) -> AsyncIterator[Store]:
    """The worker's store as ``app.assembly`` builds it: a pool whose commands wait for a
    free connection, and a lane of a few connections for claims, heartbeats and reaps."""
    redis = connect(redis_url, queue_s=WORKER_REDIS_QUEUE_S)
    lane = connect(redis_url, queue_s=WORKER_REDIS_QUEUE_S, max_connections=4)
    store = Store(redis, prefix=prefix, lane=lane, lease_ms=LEASE_MS, max_attempts=3)
    try:
        yield store
    finally:
        await store.aclose()
        await lane.aclose()
        await redis.aclose()


async def test_a_worker_holding_hundreds_of_jobs_keeps_every_lease_past_several_lease_periods(
    store: Store, service_store: Store, sim_url: str, redis_url: str, tmp_path: Path
) -> None:
    ids = [await submit(store, job(name=f"held{i}")) for i in range(HELD)]
    async with sim_router(sim_url, tmp_path) as router:
        gate = Gate(router, hold=lambda n: True)
        worker = Worker(service_store, gate, worker_settings(worker_concurrency=HELD))
        async with running(worker):

            async def all_held() -> bool:
                return gate.waiting == HELD

            await eventually(all_held, what=f"{HELD} calls to be held")
            # Until the server clock is three lease periods on (every lease taken before now
            # would have run out twice over unless renewed), a reaper finds nothing expired.
            reaped: list[str] = []
            clock = Redis.from_url(redis_url)
            periods_on = await server_ms(clock) + 3 * LEASE_MS

            async def reaped_past_three_periods() -> bool:
                result = await store.reap()
                reaped.extend(result.requeued + result.failed)
                return await server_ms(clock) > periods_on

            await eventually(reaped_past_three_periods, what="three lease periods of reaps")
            await clock.aclose()
            assert reaped == []
            assert worker.running == HELD
            assert gate.aborted == 0
            gate.open()
            views = [await finished(store, job_id) for job_id in ids]
    assert {(v.status, v.attempts) for v in views} == {("succeeded", 1)}


async def test_the_batched_heartbeat_stops_only_the_job_whose_lease_was_taken(
    store: Store, service_store: Store, sim_url: str, tmp_path: Path
) -> None:
    ids = [await submit(store, job(name=f"one-of-many{i}")) for i in range(20)]
    async with sim_router(sim_url, tmp_path) as router:
        gate = Gate(router, hold=lambda n: n <= 20)
        worker = Worker(service_store, gate, worker_settings(worker_concurrency=20))
        async with running(worker):

            async def all_held() -> bool:
                return gate.waiting == 20

            await eventually(all_held, what="20 calls to be held")
            taken = ids[7]
            await eventually(lambda: lapsed(store, taken), what="a reaper to take the job back")

            async def aborted() -> bool:
                return gate.aborted == 1

            await eventually(aborted, what="the next heartbeat to stop the taken job")
            assert gate.waiting == 19
            gate.open()
            views = {job_id: await finished(store, job_id) for job_id in ids}
    assert views[taken].attempts == 2  # run again, by this worker
    assert {(v.status, v.attempts) for k, v in views.items() if k != taken} == {("succeeded", 1)}
    assert views[taken].status == "succeeded"
    view = await store.get(taken, tenant=TENANT)
    assert view is not None
    assert len(view.turns) == 1  # the aborted call was never paid for


async def lapsed(store: Store, job_id: str) -> bool:
    """As if this one job's lease had lapsed: it expires now and a reaper takes the job back
    (ours, or the worker's own). True once it was taken; a heartbeat that renews the lease
    between the two steps makes this try again."""
    view = await store.get(job_id, tenant=TENANT)
    assert view is not None
    if view.status == "queued" or view.attempts > 1:
        return True
    await store._redis.zadd(store.shard_of(job_id).leases, {job_id: 0}, xx=True)
    await store.reap()
    return False
