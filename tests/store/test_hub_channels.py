"""Each role subscribes only to the channels it waits on (``Role.HEARS``): the API's
(``JobStore``) to job ends and events, the worker's (``Leases``) to work, cancels and
callbacks; and every wait still wakes with the roles apart, as in the processes."""

from __future__ import annotations

import asyncio

import pytest
from redis.asyncio import Redis

from app.core.wire.envelope import Progress
from app.store import JobStore, Leases
from app.store.connection import CHANNELS
from tests.both import Store
from tests.store.helpers import LONG_MS, LONG_S, SPEC, SUCCESS, subscribed, turn
from tests.waiting import PATIENCE_S, awaited, until


async def listeners(redis: Redis, role: JobStore | Leases) -> dict[str, int]:
    counts = await redis.pubsub_numsub(*(role.channels[name] for name in CHANNELS))
    return {name: int(n) for name, (_, n) in zip(CHANNELS, counts, strict=True)}


@pytest.mark.parametrize(
    ("role", "heard"),
    [
        (JobStore, {"done", "events"}),
        (Leases, {"work", "cancel", "outbox"}),
        (Store, set(CHANNELS)),  # both roles in one object: both sets
    ],
)
async def test_a_role_subscribes_only_to_what_it_waits_on(
    redis: Redis, prefix: str, role: type[JobStore], heard: set[str]
) -> None:
    store = role(redis, prefix=prefix)
    try:
        await store.hub.start()
        assert await listeners(redis, store) == {n: int(n in heard) for n in CHANNELS}
    finally:
        await store.aclose()


async def test_watching_a_channel_the_role_does_not_hear_is_refused(
    redis: Redis, prefix: str
) -> None:
    jobs, leases = JobStore(redis, prefix=prefix), Leases(redis, prefix=prefix)
    try:
        with pytest.raises(ValueError, match="does not subscribe"):
            async with jobs.hub.watch(jobs.channels["work"]):
                pass
        with pytest.raises(ValueError, match="does not subscribe"):
            leases.hub.standing(leases.channels["done"])
    finally:
        await jobs.aclose()
        await leases.aclose()


async def test_with_the_roles_apart_every_wait_wakes(redis: Redis, prefix: str) -> None:
    jobs, leases = JobStore(redis, prefix=prefix), Leases(redis, prefix=prefix)
    try:
        # An idle worker wakes for a submit.
        assert await leases.wait_for_work(0.05) is None
        idle = asyncio.ensure_future(leases.wait_for_work(LONG_S))
        await subscribed(redis, leases.channels["work"])
        job, _ = await jobs.submit(tenant="acme", spec=SPEC)
        assert await awaited(idle, what="the worker's wake-up") == 0
        [lease] = await leases.claim("w1")

        # A long-poll wakes for an event (events stream) and for the end.
        stream = asyncio.ensure_future(jobs.events(job.id, after="2", block_ms=LONG_MS))
        poll = asyncio.ensure_future(jobs.wait(job.id, tenant="acme", wait_ms=LONG_MS))
        await subscribed(redis, jobs.channels["events"])
        await leases.write(lease, progress=Progress(), events=[("turn_start", turn(1))])
        assert [e.name for e in await awaited(stream, what="the event")] == ["turn_start"]
        await leases.complete(lease, envelope=SUCCESS, history=(), transcript=())
        view = await awaited(poll, what="the end")
        assert view is not None
        assert view.status == "succeeded"

        # A running job's cancel reaches the worker.
        other, _ = await jobs.submit(tenant="acme", spec=SPEC)
        await leases.claim("w1")
        cancels = leases.cancellations()
        first = asyncio.ensure_future(anext(cancels))
        await subscribed(redis, leases.channels["cancel"])
        await jobs.cancel(other.id, tenant="acme")
        assert await awaited(first, what="the cancel") == other.id
        await cancels.aclose()
    finally:
        await jobs.aclose()
        await leases.aclose()


async def test_a_lost_subscription_wakes_every_waiter_and_comes_back(
    redis: Redis, prefix: str
) -> None:
    jobs, leases = JobStore(redis, prefix=prefix), Leases(redis, prefix=prefix)
    try:
        job, _ = await jobs.submit(tenant="acme", spec=SPEC)
        await jobs.hub.start()
        generation = jobs.hub.generation
        async with jobs.hub.watch(jobs.channels["done"], job.id) as watch:
            waiting = asyncio.ensure_future(watch.wait(LONG_S))
            await redis.client_kill_filter(_type="pubsub")  # every subscription drops
            assert await awaited(waiting, what="the waiter woken to re-read") is True
            await until(
                lambda: jobs.hub.live and jobs.hub.generation > generation,
                what="the subscription back",
            )
            assert jobs.hub.generation >= generation + 2  # lost, then live again
            # Messages are heard again, with the view the end carries.
            [lease] = await leases.claim("w1")
            await leases.complete(lease, envelope=SUCCESS, history=(), transcript=())
            # (The watch may hear the resubscription's wake-up first: then the message.)
            assert await watch.wait(PATIENCE_S) is True
            if watch.payload is None:
                assert await watch.wait(PATIENCE_S) is True
            assert watch.payload is not None
            assert job.id in watch.payload
    finally:
        await jobs.aclose()
        await leases.aclose()


async def test_a_listener_that_fails_costs_the_others_nothing(redis: Redis, prefix: str) -> None:
    jobs = JobStore(redis, prefix=prefix)
    channel = jobs.channels["done"]
    heard: list[str] = []

    def broken(key: str, payload: bytes | None) -> None:
        raise RuntimeError("a bug")

    jobs.hub.listen(channel, broken)
    jobs.hub.listen(channel, lambda key, payload: heard.append(key))
    try:
        async with jobs.hub.watch(channel, "job-1") as watch:
            generation = jobs.hub.generation
            await redis.publish(channel, "job-1")
            assert await watch.wait(PATIENCE_S) is True
            await redis.publish(channel, "job-2")
            await redis.publish(channel, "job-1")
            assert await watch.wait(PATIENCE_S) is True
        assert heard == ["job-1", "job-2", "job-1"]
        assert jobs.hub.live
        assert jobs.hub.generation == generation  # the subscription never dropped
    finally:
        await jobs.aclose()


async def test_a_subscription_that_stops_answering_is_dropped_and_made_again(
    redis: Redis, prefix: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr("app.store.hub._POLL_S", 0.2)
    jobs = JobStore(redis, prefix=prefix)
    try:
        await jobs.hub.start()
        generation = jobs.hub.generation
        async with jobs.hub.watch(jobs.channels["done"], "job-1") as watch:
            await redis.execute_command("CLIENT", "PAUSE", 1500, "ALL")  # type: ignore[no-untyped-call]  # no reply to PING
            assert await watch.wait(LONG_S) is True  # woken when the hub gave it up
            assert jobs.hub.generation > generation
            await until(
                lambda: jobs.hub.live and jobs.hub.generation >= generation + 2,
                what="the subscription made again once Redis answers",
            )
            watch.reset()
            await redis.publish(jobs.channels["done"], "job-1")
            assert await watch.wait(PATIENCE_S) is True
    finally:
        await jobs.aclose()
