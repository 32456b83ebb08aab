"""Long-poll and the event stream: they block in Redis and return as soon as something moves.

A wait that should end on an event is given ``LONG_MS``: if the event did not end it, the
test would hang (and fail by pytest-timeout) instead of passing at the wait's end.
"""

from __future__ import annotations

import asyncio
from typing import cast

import pytest
from redis.asyncio import Redis

from app.core.wire.envelope import Envelope, Progress
from app.core.wire.errors import InvalidInput
from app.core.wire.events import JobEnded
from tests.both import Store
from tests.store.helpers import LONG_MS, all_events, claim, complete, names, submit, turn, watched


async def test_wait_returns_as_soon_as_another_task_completes_the_job(store: Store) -> None:
    job = await submit(store)
    lease = await claim(store)
    waiting = asyncio.create_task(store.wait(job.id, tenant="acme", wait_ms=LONG_MS))
    await watched(store, "done", job.id)

    # A turn is no end: had the wait returned on it, it would hold the running job.
    await store.write(lease, progress=Progress(), events=[("turn_start", turn(1))])
    await complete(store, lease)
    done = await waiting

    assert done is not None
    assert done.status == "succeeded"


async def test_wait_returns_the_running_job_when_wait_ms_passes(store: Store) -> None:
    job = await submit(store)
    waiting = asyncio.create_task(store.wait(job.id, tenant="acme", wait_ms=1000))
    await watched(store, "done", job.id)  # it waits (and nothing will end the wait)

    view = await waiting

    assert view is not None
    assert view.status == "queued"


async def test_wait_on_a_finished_job_returns_at_once(store: Store) -> None:
    job = await submit(store)
    await store.cancel(job.id, tenant="acme")

    view = await store.wait(job.id, tenant="acme", wait_ms=LONG_MS)  # not waited out

    assert view is not None
    assert view.status == "cancelled"


async def test_wait_does_not_reveal_another_tenants_job(store: Store) -> None:
    job = await submit(store, tenant="acme")

    assert await store.wait(job.id, tenant="globex", wait_ms=5_000) is None


async def test_events_come_in_order_and_resume_after_an_id(store: Store) -> None:
    job = await submit(store)
    lease = await claim(store)
    await store.write(lease, progress=Progress(), events=[("turn_start", turn(1))])
    await store.write(lease, progress=Progress(), events=[("turn_end", turn(1, outcome="success"))])
    await complete(store, lease)

    events = await all_events(store, job.id)
    resumed = await store.events(job.id, after=events[1].id, block_ms=0)
    page = await store.events(job.id, after=None, block_ms=0, count=2)

    assert [e.name for e in events] == [
        "job_queued",
        "job_start",
        "turn_start",
        "turn_end",
        "job_end",
    ]
    assert events[3].decoded() == turn(1, outcome="success").model_dump(mode="json")
    assert [e.id for e in events] == sorted(e.id for e in events)
    assert resumed == events[2:]
    assert page == events[:2]
    assert await store.events(job.id, after=events[-1].id, block_ms=0) == []


async def test_events_block_until_the_next_event(store: Store) -> None:
    job = await submit(store)
    [queued] = await all_events(store, job.id)
    reading = asyncio.create_task(store.events(job.id, after=queued.id, block_ms=LONG_MS))
    await watched(store, "events", job.id)

    await store.claim("w1")
    events = await reading

    assert [e.name for e in events] == ["job_start"]


async def test_events_return_empty_when_nothing_happens_within_block_ms(store: Store) -> None:
    job = await submit(store)
    [queued] = await all_events(store, job.id)
    reading = asyncio.create_task(store.events(job.id, after=queued.id, block_ms=1000))
    await watched(store, "events", job.id)  # it blocks (and nothing will move)

    assert await reading == []


async def test_a_malformed_last_event_id_is_a_422_naming_it(store: Store) -> None:
    job = await submit(store)

    with pytest.raises(InvalidInput) as caught:
        await store.events(job.id, after="yesterday", block_ms=0)

    assert caught.value.field == "Last-Event-ID"


async def test_job_end_holds_the_stored_result_as_jobended_serialises_it(
    redis: Redis, store: Store
) -> None:
    # The commit script makes job_end from the result it stores (the envelope is sent once).
    job = await submit(store)
    lease = await claim(store)
    envelope = Envelope.success({"greeting": 'héllo "you"\n☃', "n": [1, 2.5, None]})
    await store.complete(
        lease,
        envelope=envelope,
        history=(),
        transcript=(),
        events=[("turn_end", turn(1, outcome="success"))],
    )

    stored = await redis.hget(store.shard_of(job.id).job(job.id), "events")
    raw = cast(bytes, stored or b"").decode()
    ended = JobEnded(status="succeeded", result=envelope).model_dump_json()
    assert raw.endswith(',{"name":"job_end","data":' + ended + "}]")
    assert await names(store, job.id) == ["job_queued", "job_start", "turn_end", "job_end"]
    view = await store.get(job.id, tenant="acme")
    assert view is not None
    assert view.result == envelope


async def test_a_job_made_here_is_waited_for_without_a_first_read_while_nothing_was_missed(
    store: Store,
) -> None:
    await store.hub.start()
    job = await submit(store)
    lease = await claim(store)
    waiting = asyncio.create_task(store.wait(job.id, tenant="acme", wait_ms=LONG_MS))
    await watched(store, "done", job.id)

    await complete(store, lease)
    done = await waiting
    assert done is not None
    assert done.status == "succeeded"
    # Ended and heard: the view its message carried answers the next wait too.
    again = await store.wait(job.id, tenant="acme", wait_ms=LONG_MS)
    assert again == done
    assert await store.wait(job.id, tenant="other", wait_ms=100) is None


async def test_an_end_missed_while_the_subscription_was_down_is_read_not_waited_for(
    store: Store,
) -> None:
    await store.hub.start()
    job = await submit(store)  # made here, the subscription live
    await store.hub.close()  # down: the end below is published to nobody here
    await complete(store, await claim(store))
    await store.hub.start()

    # Read at once: waited for, it would hang (nobody will publish its end again).
    done = await store.wait(job.id, tenant="acme", wait_ms=LONG_MS)

    assert done is not None
    assert done.status == "succeeded"
