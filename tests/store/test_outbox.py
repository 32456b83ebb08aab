"""The callback outbox on a real redis-server: the script that ends (or pauses) a job writes
its delivery; leases hand each delivery to one sender; attempts are recorded, fenced by the
lease; redelivery; a delivery lives and dies with its job."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from redis.asyncio import Redis

from app.core.turn.checkpoint import RequiredAction, ToolOutput
from app.core.wire.callback import message_id
from app.core.wire.envelope import Progress
from app.store import Claim, Leased, NoDelivery
from tests.both import Store
from tests.store.conftest import StoreFactory
from tests.store.helpers import after_lease, claim, complete, server_ms, submit
from tests.store.test_requires_action import SPEC as TOOLS_SPEC
from tests.store.test_requires_action import checkpoint
from tests.waiting import until

URL = "https://hooks.example.com/done"
TERMINAL = ["succeeded", "failed", "cancelled"]


def with_callback(events: list[str] | None = None) -> dict[str, Any]:
    return {"callback": {"url": URL, "events": events or TERMINAL}}


async def members(redis: Redis, store: Store, job_id: str) -> list[str]:
    raw: list[Any] = await redis.zrange(store.shard_of(job_id).outbox, 0, -1)
    return [m.decode() for m in raw]


async def due(redis: Redis, store: Store, job_id: str) -> float:
    """When the shard's one delivery is due (server ms)."""
    raw: list[Any] = await redis.zrange(store.shard_of(job_id).outbox, 0, -1, withscores=True)
    ((_, score),) = raw
    return float(score)


async def lease_one(store: Store, lease_ms: int = 10_000) -> Leased:
    leased, _ = await store.outbox.lease(10, lease_ms=lease_ms)
    assert len(leased) == 1, leased
    return leased[0]


async def leased_again(store: Store) -> Leased:
    """The shard's one delivery, leased as soon as it is due."""

    async def leased() -> Leased | None:
        taken, _ = await store.outbox.lease(10, lease_ms=10_000)
        assert len(taken) <= 1, taken
        return taken[0] if taken else None

    return await until(leased, what="the delivery to be due")


async def test_a_job_without_a_callback_leaves_nothing_in_the_outbox(
    redis: Redis, store: Store
) -> None:
    job = await submit(store)
    await complete(store, await claim(store))
    assert await members(redis, store, job.id) == []
    view = await store.get(job.id, tenant="acme")
    assert view is not None
    assert view.callback is None
    assert await store.outbox.depth() == 0


async def test_the_commit_writes_the_delivery_in_the_same_script(
    redis: Redis, store: Store
) -> None:
    job = await submit(store, **with_callback())
    await complete(store, await claim(store))
    # The Lua library derives the outbox key from the job key: it is the one keys.py names.
    assert await members(redis, store, job.id) == [f"{job.id} succeeded"]
    view = await store.get(job.id, tenant="acme")
    assert view is not None
    assert view.callback is not None
    assert (view.callback.url, view.callback.events) == (URL, tuple(TERMINAL))
    (delivery,) = view.callback.deliveries
    assert delivery.event == "succeeded"
    assert delivery.state == "pending"
    assert delivery.attempts == 0
    assert delivery.webhook_id == message_id(job.id, "succeeded")
    assert delivery.next_attempt_at is not None
    assert await store.outbox.depth() == 1


async def test_only_the_events_the_callback_names_are_sent(redis: Redis, store: Store) -> None:
    job = await submit(store, **with_callback(["failed"]))
    await complete(store, await claim(store))
    assert await members(redis, store, job.id) == []
    view = await store.get(job.id, tenant="acme")
    assert view is not None
    assert view.callback is not None
    assert view.callback.deliveries == ()


async def test_cancel_and_the_reapers_worker_lost_failure_write_deliveries(
    redis: Redis, make_store: StoreFactory
) -> None:
    store = make_store(max_attempts=1)
    queued = await submit(store, **with_callback())
    await store.cancel(queued.id, tenant="acme")
    lost = await submit(store, **with_callback())
    await claim(store)
    reaped = await store.reap(now_ms=await after_lease(redis, store))
    assert reaped.failed == [lost.id]
    assert sorted(await members(redis, store, lost.id)) == sorted(
        [f"{queued.id} cancelled", f"{lost.id} failed"]
    )


async def pause(redis: Redis, store: Store, lease: Claim) -> None:
    state = await checkpoint()
    written = await store.pause(
        lease,
        state=state,
        action=RequiredAction.of(state, "2030-01-01T00:00:00.000Z"),
        expires_ms=await server_ms(redis) + 60_000,
        progress=Progress(phase="requires_action"),
    )
    assert written


async def test_each_pause_writes_a_requires_action_delivery_of_its_own(
    redis: Redis, store: Store
) -> None:
    job, _ = await store.submit(
        tenant="acme", spec={**TOOLS_SPEC, **with_callback(["requires_action"])}
    )
    await pause(redis, store, await claim(store))
    view = await store.get(job.id, tenant="acme")
    assert view is not None
    assert view.callback is not None
    (first,) = view.callback.deliveries
    assert first.event == "requires_action"
    assert first.webhook_id == message_id(job.id, "requires_action", 1)
    outputs = [ToolOutput(tool_call_id="c1", output=1), ToolOutput(tool_call_id="c2", output=2)]
    await store.submit_outputs(job.id, tenant="acme", outputs=outputs)
    await pause(redis, store, await claim(store))
    view = await store.get(job.id, tenant="acme")
    assert view is not None
    assert view.callback is not None
    (second,) = view.callback.deliveries  # the second pause's replaces the first's
    assert second.webhook_id == message_id(job.id, "requires_action", 2)
    assert await members(redis, store, job.id) == [f"{job.id} requires_action"]


async def test_concurrent_senders_lease_each_delivery_once(redis: Redis, store: Store) -> None:
    for _ in range(6):
        await submit(store, **with_callback())
        await complete(store, await claim(store))
    results = await asyncio.gather(*(store.outbox.lease(4, lease_ms=10_000) for _ in range(5)))
    taken = [d.member for leased, _ in results for d in leased]
    assert len(taken) == 6
    assert len(set(taken)) == 6
    # Leased: not due again until the lease ends.
    assert (await store.outbox.lease(10, lease_ms=10_000))[0] == []


async def test_a_lost_senders_lease_ends_and_its_late_record_is_refused(
    redis: Redis, store: Store
) -> None:
    job = await submit(store, **with_callback())
    await complete(store, await claim(store))
    lost = await lease_one(store, lease_ms=50)
    taken = await leased_again(store)  # once the 50 ms lease has ended
    assert taken.member == lost.member
    assert taken.token != lost.token
    assert await store.outbox.record(lost, "delivered", status=200) == "stale"
    assert await store.outbox.record(taken, "delivered", status=204) == "delivered"
    view = await store.get(job.id, tenant="acme")
    assert view is not None
    assert view.callback is not None
    (delivery,) = view.callback.deliveries
    assert (delivery.state, delivery.attempts, delivery.last_status) == ("delivered", 1, 204)
    assert delivery.delivered_at is not None
    assert delivery.next_attempt_at is None
    assert await members(redis, store, job.id) == []


async def test_a_retry_waits_then_a_success_settles_it(redis: Redis, store: Store) -> None:
    job = await submit(store, **with_callback())
    await complete(store, await claim(store))
    first = await lease_one(store)
    assert first.attempts == 0
    settled = await store.outbox.record(
        first, "retry", status=503, error="HTTP 503: busy", wait_ms=60_000
    )
    assert settled == "pending"
    score = await due(redis, store, job.id)
    assert score >= await server_ms(redis) + 50_000
    leased, next_due_s = await store.outbox.lease(10, lease_ms=10_000)
    assert leased == []
    assert next_due_s is not None
    assert 50 < next_due_s <= 60
    view = await store.get(job.id, tenant="acme")
    assert view is not None
    assert view.callback is not None
    (delivery,) = view.callback.deliveries
    assert (delivery.state, delivery.attempts, delivery.last_error) == (
        "pending",
        1,
        "HTTP 503: busy",
    )


async def test_a_retry_past_the_window_fails_the_delivery(
    redis: Redis, make_store: StoreFactory
) -> None:
    store = make_store(callback_window_s=1)
    job = await submit(store, **with_callback())
    await complete(store, await claim(store))
    # Retry-After beyond the window: the last try is at the window's end.
    first = await lease_one(store)
    assert await store.outbox.record(first, "retry", status=429, wait_ms=3_600_000) == "pending"
    score = await due(redis, store, job.id)
    assert score <= await server_ms(redis) + 1_000
    last = await leased_again(store)  # due at the window's end
    assert last.attempts == 1
    assert await store.outbox.record(last, "retry", status=500, error="HTTP 500: x") == "failed"
    view = await store.get(job.id, tenant="acme")
    assert view is not None
    assert view.callback is not None
    (delivery,) = view.callback.deliveries
    assert delivery.state == "failed"
    assert delivery.attempts == 2
    assert delivery.last_error is not None
    assert "retry window" in delivery.last_error
    assert await members(redis, store, job.id) == []


async def test_a_released_delivery_is_due_at_once_with_no_attempt_counted(store: Store) -> None:
    await submit(store, **with_callback())
    await complete(store, await claim(store))
    held = await lease_one(store)
    assert await store.outbox.record(held, "released") == "pending"
    again = await lease_one(store)
    assert again.attempts == 0


async def test_redeliver_queues_the_latest_delivery_again_after_success(
    redis: Redis, store: Store
) -> None:
    job = await submit(store, **with_callback())
    await complete(store, await claim(store))
    leased = await lease_one(store)
    await store.outbox.record(leased, "delivered", status=200)
    assert await store.outbox.redeliver(job.id, tenant="other") is None
    assert await store.outbox.redeliver(job.id, tenant="acme") == "succeeded"
    again = await lease_one(store)
    assert again.webhook_id == leased.webhook_id  # the same message
    assert again.attempts == 1
    view = await store.get(job.id, tenant="acme")
    assert view is not None
    assert view.callback is not None
    (delivery,) = view.callback.deliveries
    assert (delivery.state, delivery.redeliveries, delivery.delivered_at) == ("pending", 1, None)


async def test_redeliver_without_a_delivery_says_why(store: Store) -> None:
    plain = await submit(store)
    with pytest.raises(NoDelivery, match="no callback"):
        await store.outbox.redeliver(plain.id, tenant="acme")
    waiting = await submit(store, **with_callback())
    with pytest.raises(NoDelivery, match="none of its callback's events"):
        await store.outbox.redeliver(waiting.id, tenant="acme")
    assert await store.outbox.redeliver("job_nope", tenant="acme") is None


async def test_a_delivery_whose_job_expired_leaves_the_outbox(redis: Redis, store: Store) -> None:
    job = await submit(store, **with_callback())
    await complete(store, await claim(store))
    await redis.delete(store.shard_of(job.id).job(job.id))
    assert (await store.outbox.lease(10, lease_ms=10_000))[0] == []
    assert await members(redis, store, job.id) == []


async def test_a_callback_that_does_not_decode_never_keeps_a_job_from_ending(
    redis: Redis, store: Store
) -> None:
    job = await submit(store, **with_callback())
    await redis.hset(store.shard_of(job.id).job(job.id), "callback", "{not json")
    assert await complete(store, await claim(store))
    assert await members(redis, store, job.id) == []
