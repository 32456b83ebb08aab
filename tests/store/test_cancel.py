from __future__ import annotations

import asyncio
import contextlib

import pytest
from redis.asyncio import Redis

from app.core.wire import codes
from app.core.wire.envelope import CANCELLED_BY_CLIENT, Envelope, Progress
from app.core.wire.record import Spend, TokenUsage
from tests.both import Store
from tests.store.helpers import (
    all_events,
    claim,
    complete,
    leases_key,
    names,
    queue_key,
    record,
    submit,
    subscribed,
    turn,
)


async def first_cancellation(store: Store) -> str:
    async with contextlib.aclosing(store.cancellations()) as ids:
        async for job_id in ids:
            return job_id
    raise AssertionError("cancellations() ended")


async def test_cancelling_a_queued_job_removes_it_from_the_queue(store: Store) -> None:
    job = await submit(store)

    cancelled = await store.cancel(job.id, tenant="acme")

    assert cancelled is not None
    assert cancelled.status == "cancelled"
    assert cancelled.finished_at is not None
    assert cancelled.result.status == "error"
    assert cancelled.result.error == codes.CANCELLED
    assert await store.queue_stats() == (0, 0.0)
    assert await store.claim("w1") == []
    end = (await all_events(store, job.id))[-1]
    assert (end.name, end.decoded()) == (
        "job_end",
        {"status": "cancelled", "result": cancelled.result.model_dump(mode="json")},
    )


async def test_cancelling_a_running_job_ends_it_at_once_and_refuses_the_workers_writes(
    redis: Redis, store: Store
) -> None:
    job = await submit(store)
    lease = await claim(store)
    listener = asyncio.create_task(first_cancellation(store))
    await subscribed(redis, store.channels["cancel"])

    cancelled = await store.cancel(job.id, tenant="acme")

    assert cancelled is not None
    assert cancelled.status == "cancelled"
    assert await asyncio.wait_for(listener, timeout=5) == job.id
    assert await redis.zscore(leases_key(store, job.id), job.id) is None
    assert not await store.heartbeat(job.id, lease.token)
    assert not await record(store, lease)
    assert not await store.write(lease, progress=Progress(), events=[("turn_start", turn(1))])
    assert not await complete(store, lease)
    assert not await store.release(lease)
    assert await store.get(job.id, tenant="acme") == cancelled
    assert (await names(store, job.id))[-1] == "job_end"


async def test_cancelling_a_finished_job_changes_nothing(store: Store) -> None:
    job = await submit(store)
    lease = await claim(store)
    await complete(store, lease)
    done = await store.get(job.id, tenant="acme")

    assert await store.cancel(job.id, tenant="acme") == done
    assert (await names(store, job.id)).count("job_end") == 1


async def test_another_tenant_cannot_cancel_the_job(store: Store) -> None:
    job = await submit(store, tenant="acme")

    assert await store.cancel(job.id, tenant="globex") is None
    assert await store.cancel("job_" + "0" * 26, tenant="acme") is None
    view = await store.get(job.id, tenant="acme")
    assert view is not None
    assert view.status == "queued"


async def test_a_cancelled_job_is_not_requeued_by_the_reaper(redis: Redis, store: Store) -> None:
    job = await submit(store)
    await claim(store)
    await store.cancel(job.id, tenant="acme")

    reaped = await store.reap(now_ms=2**47)

    assert reaped.requeued == []
    assert reaped.failed == []
    assert await redis.llen(queue_key(store, job.id)) == 0


async def test_a_cancelled_jobs_spend_is_added_once_and_only_after_the_cancel(
    redis: Redis, store: Store
) -> None:
    job = await submit(store)
    lease = await claim(store)
    attempt = lease.attempt
    assert await record(store, lease, 1, cost_usd=0.001, job_attempt=attempt)
    cut = turn(
        2,
        outcome="cancelled",
        usage=TokenUsage(input_tokens=20, output_tokens=7),
        cost_usd=0.002,
        job_attempt=attempt,
    )
    run = [turn(1, cost_usd=0.001, job_attempt=attempt), cut]  # turn 1 is held already
    billed = Envelope.failure(codes.CANCELLED, CANCELLED_BY_CLIENT, warnings=("billed",))

    # Running: its worker's writes record its turns; the spend of a cancel waits for one.
    assert await store.spend(lease, envelope=billed, turns=run) == -1
    await store.cancel(job.id, tenant="acme")
    assert await store.spend(lease, envelope=billed, turns=run) == 1
    assert await store.spend(lease, envelope=billed, turns=run) == 0  # a retry adds nothing

    view = await store.get(job.id, tenant="acme")
    assert view is not None
    assert view.status == "cancelled"
    assert [t.index for t in view.turns] == [1, 2]
    assert view.result == billed
    stored = await redis.hget(store.shard_of(job.id).job(job.id), "spent")
    assert stored is not None
    spent = Spend.model_validate_json(stored)
    assert (spent.calls, spent.output_tokens) == (2, 12)
    assert spent.cost == pytest.approx(0.003)
