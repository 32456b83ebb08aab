"""Small steps the store tests share."""

from __future__ import annotations

import asyncio
from typing import Any

from redis.asyncio import Redis

from app.core.envelope import Envelope
from app.store import Claim, Event, JobStore, JobView

SPEC: dict[str, Any] = {"task": "Say hi", "signature": "greeting: str"}
SUCCESS = Envelope.success({"greeting": "hi"}).to_dict()


async def server_ms(redis: Redis) -> int:
    seconds, micros = await redis.time()
    return int(seconds) * 1000 + int(micros) // 1000


async def after_lease(redis: Redis, store: JobStore) -> int:
    """A reaper's ``now_ms`` at which every lease taken so far has expired."""
    return await server_ms(redis) + store.lease_ms + 1000


async def submit(store: JobStore, tenant: str = "acme", **spec: Any) -> JobView:
    job, created = await store.submit(tenant=tenant, spec={**SPEC, **spec})
    assert created
    return job


async def claim(store: JobStore, worker: str = "w1") -> Claim:
    got = await store.claim(worker)
    assert got is not None
    return got


async def names(store: JobStore, job_id: str) -> list[str]:
    return [event.name for event in await all_events(store, job_id)]


async def all_events(store: JobStore, job_id: str) -> list[Event]:
    return await store.events(job_id, after=None, block_ms=0, count=10_000)


async def subscribed(redis: Redis, channel: str) -> None:
    """Until someone listens on ``channel`` (pub/sub has no history to catch up on)."""
    async with asyncio.timeout(5):
        while True:
            [(_, listeners)] = await redis.pubsub_numsub(channel)
            if listeners:
                return
            await asyncio.sleep(0.01)
