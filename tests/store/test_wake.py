"""A submit wakes one idle worker, on its own channel, not every worker (issue 11).

A worker whose claim comes back short registers on the shard's idle list (lua/claim.lua);
a submit that finds its tenant's queue empty turns the list and publishes on that worker's
channel alone (lua/submit.lua). A registration whose subscription is gone (the worker
died), or that is older than ``WAKE_STALE_MS``, is dropped and the next worker tried; with
nobody to wake, every worker is told on the shared channel, as before. A worker alone on
the shared channel does not list itself (the shared channel wakes just it), and an API
process that finds the list empty skips it for ``WAKE_EMPTY_S``: no command spent on it.
"""

from __future__ import annotations

import asyncio
import time

import pytest
from redis.asyncio import Redis

from app.store import leases as leases_module
from app.store.connection import WAKE_STALE_MS
from tests.both import Store
from tests.store.conftest import StoreFactory
from tests.store.helpers import submit


async def idle_list(redis: Redis, store: Store) -> list[str]:
    entries = await redis.lrange(store.keys.shard(0).idle, 0, -1)
    return [e.decode() if isinstance(e, bytes) else e for e in entries]


async def woken(*stores: Store, within_s: float = 0.5) -> list[bool]:
    """Which of ``stores`` a wake-up reached within ``within_s``."""
    waits = [s.wait_for_work(within_s) for s in stores]
    await asyncio.gather(*waits)
    return [s.woken for s in stores]


async def idle(store: Store) -> None:
    """A worker's round: a claim that finds nothing (so it registers), then the wait."""
    assert await store.claim(store.wake_token, n=4, register=True) == []


async def listening(*stores: Store) -> None:
    """Workers subscribed, so each finds the others when it counts the workers."""
    for store in stores:
        await store.wait_for_work(0.01)


async def test_a_submit_wakes_one_of_two_idle_workers_and_the_next_submit_the_other(
    redis: Redis, make_store: StoreFactory
) -> None:
    a, b = make_store(), make_store()
    await listening(a, b)
    await idle(a)
    await idle(b)
    assert [e.split()[0] for e in await idle_list(redis, a)] == [a.wake_token, b.wake_token]

    await submit(a)  # the queue was empty: a wake-up, for one worker
    first = await woken(a, b)
    assert first == [True, False]
    assert len(await a.claim("a", n=4, register=True)) == 1  # the woken one takes it

    await submit(a)
    assert await woken(a, b) == [False, True]  # the list turned: the other one this time
    assert len(await b.claim("b", n=4, register=True)) == 1
    assert len(await idle_list(redis, a)) == 2  # both still registered: no command per job


async def test_a_claim_that_fills_every_slot_leaves_the_idle_list_and_a_short_one_rejoins(
    redis: Redis, make_store: StoreFactory
) -> None:
    a, b = make_store(), make_store()
    await listening(a, b)
    await idle(a)
    await idle(b)
    for _ in range(3):
        await submit(a, tenant="x")
    await woken(a, b, within_s=0.05)

    assert len(await a.claim("a", n=2, register=True)) == 2  # every slot it asked for
    assert [e.split()[0] for e in await idle_list(redis, a)] == [b.wake_token]
    await submit(a, tenant="y")  # y's queue was empty: the wake-up goes to b, not busy a
    assert await woken(a, b) == [False, True]

    assert len(await a.claim("a", n=4, register=True)) == 2  # short: back on the list
    assert a.wake_token in {e.split()[0] for e in await idle_list(redis, a)}


async def test_a_claim_without_room_for_every_queued_job_hands_the_wake_up_on(
    redis: Redis, make_store: StoreFactory
) -> None:
    a, b = make_store(), make_store()
    await listening(a, b)
    await idle(a)
    await idle(b)
    await submit(a, tenant="x")  # the queue was empty: a is woken
    await submit(a, tenant="x")  # queued behind it: no wake-up of its own
    assert await woken(a, b, within_s=0.3) == [True, False]

    assert len(await a.claim("a", n=1, register=True)) == 1  # room for one only
    assert await woken(b) == [True]  # told in the same script: a left a job behind
    assert len(await b.claim("b", n=4, register=True)) == 1


async def test_a_worker_that_died_while_idle_is_dropped_and_the_next_one_woken(
    redis: Redis, make_store: StoreFactory
) -> None:
    dead, live = make_store(), make_store()
    await listening(dead, live)
    await idle(dead)
    await idle(live)
    await dead.hub.close()  # its subscription gone, as with a killed process; still listed

    await submit(live)

    assert await woken(live) == [True]
    assert [e.split()[0] for e in await idle_list(redis, live)] == [live.wake_token]


async def test_a_stale_registration_is_dropped_and_with_nobody_left_every_worker_is_told(
    redis: Redis, make_store: StoreFactory
) -> None:
    stuck, other = make_store(), make_store()
    await other.wait_for_work(0.01)  # listens on the shared channel, never registered
    # A registration from a worker that stopped claiming long ago (still subscribed).
    old = int(time.time() * 1000) - WAKE_STALE_MS - 5000
    await stuck.wait_for_work(0.01)
    await redis.rpush(stuck.keys.shard(0).idle, f"{stuck.wake_token} {old}")

    await submit(other)

    assert await woken(stuck, other) == [True, True]  # the shared channel: everyone
    assert await idle_list(redis, other) == []


async def test_a_claim_without_register_leaves_the_idle_list_alone(
    redis: Redis, store: Store
) -> None:
    assert await store.claim("w1", n=4) == []
    await submit(store)
    assert len(await store.claim("w1", n=4)) == 1

    assert await idle_list(redis, store) == []


async def test_a_registration_is_renewed_after_wake_renew_s_and_left_on_close(
    redis: Redis, make_store: StoreFactory, monkeypatch: pytest.MonkeyPatch
) -> None:
    store, other = make_store(), make_store()
    await listening(store, other)
    await idle(store)
    [before] = await idle_list(redis, store)
    await idle(store)
    assert await idle_list(redis, store) == [before]  # fresh: no command spent on it

    monkeypatch.setattr(leases_module, "WAKE_RENEW_S", 0.0)
    await asyncio.sleep(0.01)
    await idle(store)
    [after] = await idle_list(redis, store)
    assert after != before
    assert after.split()[0] == store.wake_token
    assert int(after.split()[1]) > int(before.split()[1])

    await store.aclose()
    assert await idle_list(redis, store) == []


async def test_a_lone_worker_is_not_listed_and_the_api_skips_the_empty_list_for_a_while(
    redis: Redis, make_store: StoreFactory, monkeypatch: pytest.MonkeyPatch
) -> None:
    api, alone = make_store(), make_store()
    await listening(alone)
    await idle(alone)  # counts the workers: itself only
    await idle(alone)
    assert await idle_list(redis, alone) == []

    await submit(api)  # an empty list: the shared channel wakes the lone worker
    assert await woken(alone) == [True]
    assert len(await alone.claim("w", n=4, register=True)) == 1
    assert api._idle_empty  # found empty: the next submits skip it for WAKE_EMPTY_S

    # A second worker comes: after its count the first one lists itself too.
    monkeypatch.setattr(leases_module, "_ALONE_CHECK_S", 0.0)
    second = make_store()
    await listening(second)
    await idle(second)
    await idle(alone)  # finds the other worker (its count is due): listed from its next claim
    await idle(alone)
    assert {e.split()[0] for e in await idle_list(redis, api)} == {
        alone.wake_token,
        second.wake_token,
    }
    await submit(api)  # within WAKE_EMPTY_S of the empty list: still everyone
    assert await woken(alone, second) == [True, True]
    await alone.claim("w", n=4, register=True)

    api._idle_empty.clear()  # as WAKE_EMPTY_S later
    await submit(api)  # the list again: one of them
    assert sorted(await woken(alone, second)) == [False, True]
