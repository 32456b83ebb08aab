"""Small steps the store tests share.

A wait that only an event may end is given ``LONG_MS`` (``LONG_S``): when the event never comes the
test hangs on it and pytest-timeout fails it, where a short wait would pass by its own end.
"""

from __future__ import annotations

from typing import Any, Final

from redis.asyncio import Redis

from app.core.wire.envelope import Envelope, Progress
from app.core.wire.record import TokenUsage, TurnRecord
from app.store import Claim, Event, JobView
from tests.both import Store
from tests.waiting import until

SPEC: dict[str, Any] = {"task": "Say hi", "signature": "greeting: str"}
SUCCESS = Envelope.success({"greeting": "hi"})
LONG_MS: Final = 600_000
LONG_S: Final = LONG_MS / 1000


def turn(index: int, **fields: Any) -> TurnRecord:
    """A turn record; ``fields`` override its defaults."""
    values: dict[str, Any] = {
        "index": index,
        "type": "must_return",
        "outcome": "invalid",
        "attempt": 1,
        "error_code": None,
        "diagnosis": None,
        "usage": TokenUsage(input_tokens=10, output_tokens=5),
        "cost_usd": None,
        "latency_ms": 3,
        "provider": "sim",
        "model": "sim-model",
        "finish_reason": "stop",
        "max_output_tokens": 64,
        "prompt_tokens_estimate": 10,
        "message_count": 2,
        "tools_offered": 0,
        "tool_calls": (),
        "transport_retries": 0,
        "transport_wait_ms": 0,
        "escalated": False,
        "simplified": False,
        "warnings": (),
        "answer": None,
        "started_at": "2026-11-23T00:00:00.000Z",
    }
    return TurnRecord(**(values | fields))


async def server_ms(redis: Redis) -> int:
    seconds, micros = await redis.time()
    return int(seconds) * 1000 + int(micros) // 1000


async def after_lease(redis: Redis, store: Store) -> int:
    """A reaper's ``now_ms`` at which every lease taken so far has expired."""
    return await server_ms(redis) + store.options.lease_ms + 1000


async def submit(store: Store, tenant: str = "acme", **spec: Any) -> JobView:
    job, created = await store.submit(tenant=tenant, spec={**SPEC, **spec})
    assert created
    return job


async def claim(store: Store, worker: str = "w1") -> Claim:
    got = await store.claim(worker)
    assert len(got) == 1
    return got[0]


def leases_key(store: Store, job_id: str) -> str:
    return store.shard_of(job_id).leases


def queue_key(store: Store, job_id: str, tenant: str = "acme") -> str:
    return store.shard_of(job_id).tenant_queue(tenant)


async def complete(
    store: Store, lease: Claim, envelope: Envelope = SUCCESS, *, room: int = 0
) -> bool:
    """Commit ``lease``; ``room``: the worker's free slots then (``Leases.complete``)."""
    return bool(
        await store.complete(lease, envelope=envelope, history=(), transcript=(), room=room)
    )


async def record(store: Store, lease: Claim, index: int = 1, **fields: Any) -> bool:
    """A turn record written under ``lease`` (kept even when stale); True if it was ours."""
    written = await store.write(
        lease, progress=Progress(phase="turn-done", turn=index), turn=turn(index, **fields)
    )
    return bool(written)


async def names(store: Store, job_id: str) -> list[str]:
    return [event.name for event in await all_events(store, job_id)]


async def all_events(store: Store, job_id: str) -> list[Event]:
    return await store.events(job_id, after=None, block_ms=0, count=10_000)


async def subscribed(redis: Redis, channel: str) -> None:
    """Until someone listens on ``channel`` (pub/sub has no history to catch up on)."""

    async def listeners() -> int:
        [(_, count)] = await redis.pubsub_numsub(channel)
        return int(count)

    await until(listeners, what=f"a subscriber of {channel}")


async def watched(store: Store, channel: str, key: str) -> None:
    """Until ``store``'s hub is subscribed and someone here waits on ``channel`` for ``key``
    (a long-poll of job ``key`` on ``"done"``, a stream on ``"events"``)."""
    hub = store.hub
    await until(
        lambda: hub.live and hub.watching(store.channels[channel], key),
        what=f"a waiter on {channel} for {key}",
    )


async def waiting_for_work(store: Store) -> None:
    """Until ``store`` is subscribed to the ``work`` channel with its standing watch: a
    wake-up published from now on reaches it."""
    hub = store.hub
    await until(
        lambda: hub.live and hub.watching(store.channels["work"]),
        what="the worker's subscription to work",
    )


async def clock_past(redis: Redis, ms: float) -> int:
    """Until the server's clock reads past ``ms``; its reading then."""

    async def now() -> int | None:
        reading = await server_ms(redis)
        return reading if reading > ms else None

    return await until(now, what=f"the server's clock past {ms:.0f}")
