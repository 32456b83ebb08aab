"""Renewing every lease a worker holds in one call (``Leases.heartbeats``), each fenced by
its own token; lease traffic on a lane of its own; and claims that ask for more jobs than
one script may lease."""

from __future__ import annotations

import asyncio

from redis.asyncio import Redis

from app.redis_server import EmbeddedRedis
from app.store import MAX_CLAIM, connect, shard_of
from tests.both import Store
from tests.store.conftest import StoreFactory
from tests.store.helpers import after_lease, claim, clock_past, leases_key, server_ms, submit
from tests.waiting import until


async def test_one_call_renews_every_held_lease_across_shards_and_batches(
    redis: Redis, make_store: StoreFactory
) -> None:
    store = make_store(lease_ms=2000, shards=3)
    for i in range(10):
        await submit(store, task=f"t{i}")
    claims = await store.claim("w1", n=10)
    assert len(claims) == 10
    assert len({shard_of(c.job_id) for c in claims}) > 1
    before = {c.job_id: await redis.zscore(leases_key(store, c.job_id), c.job_id) for c in claims}
    await clock_past(redis, await server_ms(redis))  # the renewals come a ms later at least

    lost = await store.heartbeats([(c.job_id, c.token) for c in claims], batch=3)

    assert lost == set()
    for c in claims:
        old, new = before[c.job_id], await redis.zscore(leases_key(store, c.job_id), c.job_id)
        assert old is not None
        assert new is not None
        assert new > old
    # Past every old expiry, before the new ones: the reaper leaves them all alone.
    oldest_new = min(
        [await redis.zscore(leases_key(store, c.job_id), c.job_id) or 0 for c in claims]
    )
    assert (await store.reap(now_ms=int(max(v or 0 for v in before.values())) + 1)).requeued == []
    assert (await store.reap(now_ms=int(oldest_new) - 1)).requeued == []


async def test_a_fenced_out_job_is_named_lost_and_its_lease_is_not_extended(
    redis: Redis, make_store: StoreFactory
) -> None:
    store = make_store(lease_ms=2000)
    reaped, cancelled, reaped_too = [await submit(store, task=f"t{i}") for i in range(3)]
    zombie = await store.claim("zombie", n=3)
    assert [c.job_id for c in zombie] == [reaped.id, cancelled.id, reaped_too.id]
    assert await store.cancel(cancelled.id, tenant="acme") is not None
    await store.reap(now_ms=await after_lease(redis, store))
    owner = await store.claim("owner", n=2)  # the two reaped jobs, now the owner's
    assert sorted(c.job_id for c in owner) == sorted([reaped.id, reaped_too.id])
    held = await submit(store, task="still the zombie's")
    kept = await claim(store, "zombie")
    assert kept.job_id == held.id
    leases = {c.job_id: await redis.zscore(leases_key(store, c.job_id), c.job_id) for c in owner}
    before = await redis.zscore(leases_key(store, held.id), held.id)
    await clock_past(redis, await server_ms(redis))

    lost = await store.heartbeats([(c.job_id, c.token) for c in [*zombie, kept]])

    assert lost == {reaped.id, cancelled.id, reaped_too.id}
    # The owner's leases are the owner's: the zombie's batch did not touch them.
    for c in owner:
        assert await redis.zscore(leases_key(store, c.job_id), c.job_id) == leases[c.job_id]
    assert await redis.zscore(leases_key(store, cancelled.id), cancelled.id) is None
    after = await redis.zscore(leases_key(store, held.id), held.id)
    assert before is not None
    assert after is not None
    assert after > before
    assert await store.heartbeats([(c.job_id, c.token) for c in owner]) == set()


async def test_a_claim_for_more_jobs_than_one_script_can_lease_loses_none(
    redis: Redis, make_store: StoreFactory
) -> None:
    # Lua's unpack() stops at about 8000 values: leasing 4,500 jobs in one ZADD used to fail
    # after the script had already taken them off the queue, and they were lost.
    store = make_store(max_queued=10_000)
    queued = 4500
    ids = []
    for start in range(0, queued, 500):  # the test client's pool holds 1000 connections
        ids += await asyncio.gather(
            *(submit(store, task=f"t{i}") for i in range(start, start + 500))
        )

    claims = await store.claim("w1", n=10_000)

    assert len(claims) == MAX_CLAIM
    leases = leases_key(store, ids[0].id)
    assert await redis.zcard(leases) == MAX_CLAIM
    assert (await store.queue_stats())[0] == queued - MAX_CLAIM


async def test_claims_and_heartbeats_go_through_while_every_pooled_connection_is_busy(
    redis: Redis, redis_server: EmbeddedRedis, prefix: str
) -> None:
    pool = connect(redis_server.url, max_connections=2, queue_s=30)
    lane = connect(redis_server.url, max_connections=1, queue_s=30)
    store = Store(pool, prefix=prefix, lane=lane, lease_ms=2000)
    try:
        job = await submit(store)
        # Both pooled connections wait in a BLPOP, as if busy with other jobs' writes.
        blocked = f"{prefix}:nothing"

        async def occupy() -> None:
            await pool.blpop([blocked], timeout=30)

        busy = [asyncio.create_task(occupy()) for _ in range(2)]
        await blocked_clients(redis, 2)

        claimed = await store.claim("w1")
        lost = await store.heartbeats([(c.job_id, c.token) for c in claimed])
        reaped = await store.reap()

        assert [c.job_id for c in claimed] == [job.id]
        assert lost == set()
        assert reaped.requeued == []
        assert not any(task.done() for task in busy)  # they never gave their connection up
        await redis.rpush(blocked, "a", "b")
        await asyncio.gather(*busy)
    finally:
        await store.aclose()
        await lane.aclose()
        await pool.aclose()


async def blocked_clients(redis: Redis, n: int) -> None:
    """Until ``n`` clients of the server wait in a blocking command."""

    async def blocked() -> bool:
        return int((await redis.info("clients"))["blocked_clients"]) >= n

    await until(blocked, what=f"{n} clients blocked in Redis")


async def test_lease_traffic_made_at_once_shares_one_pipeline_on_the_lanes_pool(
    redis: Redis, redis_server: EmbeddedRedis, prefix: str
) -> None:
    # Two connections: one the batcher keeps for lone commands, one for its pipeline (a
    # third at once would fail: the pool does not wait).
    lane = connect(redis_server.url, max_connections=2)
    pool = connect(redis_server.url)
    store = Store(pool, prefix=prefix, lane=lane, lease_ms=2000)
    try:
        first, second = await submit(store), await submit(store)
        claimed = await store.claim("w1")
        await redis.script_flush()  # a restarted Redis: the scripts load again
        # Made in one turn of the loop: one pipeline on one of the lane's connections.
        together = await asyncio.gather(
            store.claim("w2"),
            store.heartbeats([(c.job_id, c.token) for c in claimed]),
            store.reap(),
        )
        assert [c.job_id for c in claimed] == [first.id]
        assert [c.job_id for c in together[0]] == [second.id]
        assert together[1] == set()
        assert together[2].requeued == []
    finally:
        await store.aclose()
        await lane.aclose()
        await pool.aclose()
