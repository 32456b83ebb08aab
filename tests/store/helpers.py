"""Small steps the store tests share."""

from __future__ import annotations

import asyncio
from typing import Any

from redis.asyncio import Redis

from app.core.wire.envelope import Envelope, Progress
from app.core.wire.record import TokenUsage, TurnRecord
from app.store import Claim, Event, JobView
from tests.both import Store

SPEC: dict[str, Any] = {"task": "Say hi", "signature": "greeting: str"}
SUCCESS = Envelope.success({"greeting": "hi"})


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
    async with asyncio.timeout(5):
        while True:
            [(_, listeners)] = await redis.pubsub_numsub(channel)
            if listeners:
                return
            await asyncio.sleep(0.01)
