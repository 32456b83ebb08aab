"""A worker lost between writing a batch's end and queueing its callback: the batch stays
due, and the next step queues the callback, once however often it runs."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from redis.asyncio import Redis

from app.batches.runner import BatchRunner
from app.providers.router import build_router
from app.store.batches import BatchStore
from app.store.keys import BatchKeys
from tests.batches.fixtures import batch_settings, providers_for

CALLBACK = {"url": "https://hooks.example.com/b", "events": ["completed", "cancelled"]}


@pytest.fixture
async def redis(batch_redis: str) -> AsyncIterator[Redis]:
    client = Redis.from_url(batch_redis)
    yield client
    await client.aclose()


async def _items() -> AsyncIterator[dict[str, Any]]:
    yield {"customId": "only", "input": {"doc": 1}}


async def test_an_ended_batch_left_due_gets_its_callback_queued_once(
    redis: Redis, batch_sim: str, tmp_path: Path
) -> None:
    store = BatchStore(redis, prefix="brec")
    template = {"task": "Say hi", "signature": "{greeting :string}", "model": "oa"}
    batch_id, _ = await store.create(
        "alice",
        options={"template": template, "callback": CALLBACK},
        items=_items(),
        key=None,
        max_open=10,
        fields={"provider": "openai-sim", "mode": "provider_batch"},
    )
    # What a worker that died right after writing the end leaves: ended, still due.
    await store.end(batch_id, "alice", {"status": "cancelled", "phase": "ended"}, keep_due=True)
    assert await store.callbacks.deliveries(batch_id) == ()
    due = BatchKeys.due("brec")
    assert await redis.zscore(due, batch_id) is not None

    async with httpx.AsyncClient() as http:
        settings = batch_settings("redis://unused", tmp_path, key_prefix="brec")
        runner = BatchRunner(store, build_router(providers_for(batch_sim), http), settings)
        await runner.step(batch_id)
        await runner.step(batch_id)  # a second worker, late: nothing more

    (delivery,) = await store.callbacks.deliveries(batch_id)
    assert (delivery.event, delivery.state, delivery.attempts) == ("cancelled", "pending", 0)
    assert await redis.zscore(due, batch_id) is None
    outbox = BatchKeys.callback_shard("brec").outbox
    assert await redis.zrange(outbox, 0, -1) == [f"{batch_id} cancelled".encode()]
