"""The ``done`` message a commit publishes (lua/complete.lua) carries the finished job as a
read right after it finds it: the id, then each stored field's name and value a line each,
no JSON encoding in the script. ``app.store.jobs.carried_view`` reads it (and the JSON
object an older commit script sent). A value with a line break sends only the id: the
long-poll reads the job.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

from redis.asyncio import Redis

from app.core.turn.conversation import TranscriptEntry
from app.store.connection import VIEW_FIELDS
from app.store.reading import carried_view
from app.store.records import job_view, text
from tests.both import Store
from tests.store.helpers import LONG_MS, SPEC, SUCCESS, claim, turn, watched
from tests.waiting import until

TRANSCRIPT = (
    TranscriptEntry(role="system", content='Answer with "JSON".\nOne object: {"a": 1}'),
    TranscriptEntry(role="user", content="Capital of Norway?\\n é ✓"),
)


@asynccontextmanager
async def done_messages(redis: Redis, store: Store) -> AsyncIterator[list[str]]:
    """The ``done`` channel's messages while the block runs (and a moment after)."""
    heard: list[str] = []
    pubsub = redis.pubsub()
    await pubsub.subscribe(store.channels["done"])
    await pubsub.get_message(timeout=1)  # the subscription's confirmation
    try:
        yield heard
        async with asyncio.timeout(5):
            while not heard:
                message = await pubsub.get_message(ignore_subscribe_messages=True, timeout=1)
                if message is not None:
                    heard.append(message["data"].decode())
    finally:
        await pubsub.aclose()  # type: ignore[no-untyped-call]


async def test_the_done_message_carries_the_job_as_a_read_finds_it(
    redis: Redis, store: Store
) -> None:
    job, _ = await store.submit(
        tenant='acme "a/b"',
        spec=SPEC,
        metadata={"team": "géo", "note": 'line\nbreak "q"'},
        model="sim-model",
        idempotency_key="key-1",
    )
    lease = await claim(store)
    async with done_messages(redis, store) as heard:
        assert await store.complete(
            lease, envelope=SUCCESS, history=(), transcript=TRANSCRIPT, turn=turn(1)
        )

    [message] = heard
    job_id, _, payload = message.partition("\n")
    assert job_id == job.id
    assert not payload.startswith("{")  # not JSON: the stored text as it is
    # The transcript's JSON as stored, not escaped a second time.
    assert json.dumps(TRANSCRIPT[0].content, ensure_ascii=False)[1:-1] in payload
    carried = carried_view(payload)
    read = await store.get(job.id, tenant='acme "a/b"')
    assert carried is not None
    assert read is not None
    assert carried == read
    assert (carried.model, carried.idempotency_key, carried.metadata["note"]) == (
        "sim-model",
        "key-1",
        'line\nbreak "q"',
    )
    assert len(carried.turns) == 1
    assert carried.transcript == TRANSCRIPT
    assert carried.started_at is not None
    # A long-poll of it answers the carried view, the same as a read.
    assert await store.wait(job.id, tenant='acme "a/b"', wait_ms=1000) == read


async def test_a_value_with_a_line_break_sends_only_the_id(redis: Redis, store: Store) -> None:
    tenant = "acme\nwest"  # nothing writes such a value today: the message stays correct
    job, _ = await store.submit(tenant=tenant, spec=SPEC)
    lease = await claim(store)
    async with done_messages(redis, store) as heard:
        assert await store.complete(lease, envelope=SUCCESS, history=(), transcript=())
    assert heard == [job.id]
    view = await store.wait(job.id, tenant=tenant, wait_ms=1000)  # read, not carried
    assert view is not None
    assert view.status == "succeeded"
    assert view.tenant == tenant


async def test_a_json_message_of_an_older_commit_script_is_read(redis: Redis, store: Store) -> None:
    job, _ = await store.submit(tenant="acme", spec=SPEC, metadata={"k": "v"})
    lease = await claim(store)
    assert await store.complete(lease, envelope=SUCCESS, history=(), transcript=TRANSCRIPT)
    raw = await redis.hmget(store.shard_of(job.id).job(job.id), VIEW_FIELDS)
    stored = {k: text(v) for k, v in zip(VIEW_FIELDS, raw, strict=True) if v is not None}

    carried = carried_view(json.dumps(stored))  # what the script sent before (cjson)

    assert carried is not None
    assert carried == job_view(stored) == await store.get(job.id, tenant="acme")


async def test_a_message_it_cannot_read_makes_the_long_poll_read_the_job(
    redis: Redis, store: Store
) -> None:
    # (From a commit script of another version, say.) The waiter reads instead.
    assert carried_view("id\njob_x\nstatus") is None  # no tenant, no created_ms
    assert carried_view("{not json") is None
    await store.hub.start()  # live: the job is known here as made here (no first read)
    job, _ = await store.submit(tenant="acme", spec=SPEC)
    lease = await claim(store)
    waiting = asyncio.ensure_future(store.wait(job.id, tenant="acme", wait_ms=LONG_MS))
    await watched(store, "done", job.id)
    heard: list[str] = []
    store.hub.listen(store.channels["done"], lambda key, payload: heard.append(key))
    await redis.publish(store.channels["done"], f"{job.id}\nid\n{job.id}\nstatus")
    await until(lambda: heard, what="the unreadable message to be heard")
    # Read: still running, it waits on (had it taken the message's word, or returned the
    # running job, the view it ends with below would not be the finished one).
    # A long-poll that comes after such a message reads too (the job is not gone).
    now = await store.wait(job.id, tenant="acme", wait_ms=0)
    assert now is not None
    assert now.status == "in_progress"
    assert await store.complete(lease, envelope=SUCCESS, history=(), transcript=())
    view = await waiting
    assert view is not None
    assert view.status == "succeeded"
