"""Finished jobs expire after the retention; unfinished ones never do."""

from __future__ import annotations

from redis.asyncio import Redis

from tests.both import Store
from tests.store.conftest import StoreFactory
from tests.store.helpers import after_lease, claim, complete, record, submit


async def ttls(redis: Redis, store: Store, job_id: str) -> list[int]:
    """The job's keys' TTLs: one hash holds its record, turns and events."""
    return [await redis.ttl(store.shard_of(job_id).job(job_id))]


async def test_a_completed_job_expires_with_all_its_keys(
    redis: Redis, make_store: StoreFactory
) -> None:
    store = make_store(retention_s=3600)
    job = await submit(store)
    lease = await claim(store)
    await record(store, lease)
    assert await ttls(redis, store, job.id) == [-1]

    await complete(store, lease)

    assert all(3590 <= ttl <= 3600 for ttl in await ttls(redis, store, job.id))


async def test_cancelled_and_worker_lost_jobs_expire_too(
    redis: Redis, make_store: StoreFactory
) -> None:
    store = make_store(retention_s=600, max_attempts=1)
    cancelled = await submit(store)
    lost = await submit(store)
    await store.cancel(cancelled.id, tenant="acme")
    lease = await claim(store)
    await record(store, lease)

    await store.reap(now_ms=await after_lease(redis, store))

    (job_ttl,) = await ttls(redis, store, cancelled.id)
    assert 590 <= job_ttl <= 600
    assert all(590 <= ttl <= 600 for ttl in await ttls(redis, store, lost.id))
