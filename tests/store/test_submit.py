from __future__ import annotations

import asyncio

import pytest
from redis.asyncio import Redis

from app.core.wire.envelope import Progress
from app.core.wire.errors import InvalidInput
from app.redis_server import EmbeddedRedis
from app.store import IdempotencyConflict, QueueFull, is_job_id, new_job_id
from app.store.connection import dumps
from tests.both import Store
from tests.store.conftest import StoreFactory
from tests.store.helpers import SPEC, names, submit, turn


async def test_submit_queues_a_job_that_get_reads_back(store: Store) -> None:
    job, created = await store.submit(
        tenant="acme", spec=SPEC, metadata={"team": "search"}, model="gpt"
    )

    assert created
    assert is_job_id(job.id)
    assert job.status == "queued"
    assert job.attempts == 0
    assert job.result.model_dump(mode="json") == {
        "status": "in-progress",
        "progress": {"phase": "queued"},
        "warnings": [],
    }
    assert job.created_at.endswith("Z")
    assert len(job.created_at) == len("2026-01-01T00:00:00.000Z")
    assert await store.get(job.id, tenant="acme") == job
    assert (await store.queue_stats())[0] == 1
    assert await names(store, job.id) == ["job_queued"]


async def test_another_tenant_cannot_see_the_job(store: Store) -> None:
    job = await submit(store, tenant="acme")

    assert await store.get(job.id, tenant="globex") is None
    assert await store.get("job_" + "0" * 26, tenant="acme") is None
    assert await store.get("../../etc", tenant="acme") is None


async def test_same_idempotency_key_and_body_returns_the_first_job(store: Store) -> None:
    first, created = await store.submit(tenant="acme", spec=SPEC, idempotency_key="order-1")
    again, created_again = await store.submit(tenant="acme", spec=SPEC, idempotency_key="order-1")

    assert created
    assert not created_again
    assert again.id == first.id
    assert (await store.queue_stats())[0] == 1


async def test_same_idempotency_key_with_another_body_is_a_422_naming_the_header(
    store: Store,
) -> None:
    await store.submit(tenant="acme", spec=SPEC, idempotency_key="order-1")

    with pytest.raises(IdempotencyConflict) as caught:
        await store.submit(tenant="acme", spec={**SPEC, "task": "other"}, idempotency_key="order-1")
    with pytest.raises(IdempotencyConflict):
        await store.submit(tenant="acme", spec=SPEC, idempotency_key="order-1", metadata={"x": "y"})

    assert isinstance(caught.value, InvalidInput)
    assert caught.value.status == 422
    assert caught.value.field == "Idempotency-Key"
    assert (await store.queue_stats())[0] == 1


async def test_idempotency_keys_are_scoped_per_tenant(store: Store) -> None:
    mine, _ = await store.submit(tenant="acme", spec=SPEC, idempotency_key="k")
    theirs, created = await store.submit(tenant="globex", spec=SPEC, idempotency_key="k")

    assert created
    assert theirs.id != mine.id


async def test_100_concurrent_submits_with_one_key_create_exactly_one_job(
    store: Store,
) -> None:
    results = await asyncio.gather(
        *(store.submit(tenant="acme", spec=SPEC, idempotency_key="burst") for _ in range(100))
    )

    assert len({job.id for job, _ in results}) == 1
    assert sum(created for _, created in results) == 1
    assert (await store.queue_stats())[0] == 1
    assert len((await store.list(tenant="acme"))[0]) == 1


async def test_idempotency_key_expires_after_its_ttl(
    redis: Redis, make_store: StoreFactory
) -> None:
    store = make_store(idempotency_ttl_s=120)

    await store.submit(tenant="acme", spec=SPEC, idempotency_key="k")

    shard = store.keys.shard(store.keys.shard_for("acme", "k", 0))
    ttl = await redis.ttl(shard.idempotency("acme", "k"))
    assert 110 <= ttl <= 120


async def test_a_key_whose_job_expired_starts_a_new_job(redis: Redis, store: Store) -> None:
    first, _ = await store.submit(tenant="acme", spec=SPEC, idempotency_key="k")
    await redis.delete(store.shard_of(first.id).job(first.id))  # as retention would

    second, created = await store.submit(tenant="acme", spec=SPEC, idempotency_key="k")

    assert created
    assert second.id != first.id


async def test_a_full_queue_refuses_new_jobs_with_a_429_and_retry_after(
    make_store: StoreFactory,
) -> None:
    store = make_store(max_queued=3)
    replayable, _ = await store.submit(tenant="acme", spec=SPEC, idempotency_key="k")
    for _ in range(2):
        await submit(store)

    with pytest.raises(QueueFull) as caught:
        await submit(store)

    assert caught.value.status == 429
    assert caught.value.retry_after_s is not None
    assert caught.value.retry_after_s > 0
    assert caught.value.depth == 3
    # A replay is not a new job: it is answered even when the queue is full.
    again, created = await store.submit(tenant="acme", spec=SPEC, idempotency_key="k")
    assert (again.id, created) == (replayable.id, False)
    assert (await store.queue_stats())[0] == 3


def test_job_ids_sort_by_creation_time_and_do_not_repeat() -> None:
    early = [new_job_id(1_700_000_000_000, shard=3) for _ in range(500)]
    late = new_job_id(1_700_000_000_001)

    assert early == sorted(early)  # one millisecond, one process: still in order
    assert all(job_id < late for job_id in early)
    assert len(set(early)) == 500
    assert all(is_job_id(job_id) for job_id in [*early, late])


async def test_a_client_that_decodes_responses_works_the_same(
    redis_server: EmbeddedRedis, prefix: str
) -> None:
    client = Redis.from_url(redis_server.url, decode_responses=True, protocol=2)
    try:
        store = Store(client, prefix=prefix)
        job = await submit(store)
        (claim,) = await store.claim("w1")
        assert claim.job_id == job.id
        progress = Progress(phase="turn-done", turn=1)
        assert await store.write(claim, progress=progress, turn=turn(1))
        view = await store.get(job.id, tenant="acme")
        assert view is not None
        assert view.turns == (turn(1),)
        assert [e.name for e in await store.events(job.id, after=None, block_ms=0)] == [
            "job_queued",
            "job_start",
        ]
    finally:
        await store.aclose()
        await client.aclose()


# Text a JSON encoder may write differently: controls, quotes, a slash, beyond ASCII.
ODD_TEXT = 'a\x00\x1f\x7f"\\/é\u2028😀 \t\n'


async def test_a_jobs_metadata_is_stored_as_the_compact_encoder_writes_it(
    redis: Redis, store: Store
) -> None:
    metadata = {ODD_TEXT: ODD_TEXT, "plain": "x"}
    job, _ = await store.submit(tenant="acme", spec=SPEC, metadata=metadata, model=ODD_TEXT)
    stored = await redis.hget(store.shard_of(job.id).job(job.id), "metadata")
    assert stored == dumps(metadata).encode()
    read = await store.get(job.id, tenant="acme")
    assert read is not None
    assert (read.metadata, read.model) == (metadata, ODD_TEXT)
