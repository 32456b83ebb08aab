"""The API's estimate of Redis's clock (app/store/clock.py), and the hand-off's lease on it.

A submit that hands its job to an idle worker leases the job in its own script
(lua/submit.lua). With a recent estimate of Redis-now from the API process, that script
runs no ``TIME``, and the lease still ends ``lease_ms`` after Redis's clock (never before,
after by at most a few ms), whatever the API host's wall clock says. Without a usable
estimate (none yet, too old, or measured over a slow round trip) the script reads ``TIME``.
"""

from __future__ import annotations

import asyncio
import time
import types
from typing import Any

import pytest
from redis.asyncio import Redis

from app.store import submitting as submitting_module
from app.store.clock import ServerClock
from tests.both import Store
from tests.store.conftest import StoreFactory
from tests.store.helpers import clock_past, server_ms, submit
from tests.waiting import until

LEASE_MS = 7000
# How far a lease started on the estimate may end after TIME + lease_ms (ms): the TIME
# round trip on loopback (bounded by MAX_RTT_MS) and ms rounding.
AHEAD_MS = 27


async def time_calls(redis: Redis) -> int:
    stats: dict[str, Any] = await redis.info("commandstats")
    return int(stats.get("cmdstat_time", {}).get("calls", 0))


async def listed(worker: Store) -> None:
    """A worker waiting for work: subscribed, and on the shard's idle list."""
    await worker.wait_for_work(0.01)
    assert await worker.claim(worker.wake_token, n=4, register=True) == []


async def read(clock: ServerClock) -> None:
    """A good reading taken (on a loaded machine a round trip can take over 25 ms: the
    reading is then refused, and taken again)."""
    await until(clock.refresh, what="a TIME round trip under 25 ms", every=0.05)


async def estimated(api: Store) -> None:
    """The API's estimate taken (a first submit would start it in the background)."""
    clock = api._clock
    assert clock is not None
    clock.now_ms()  # starts a reading, as a submit does
    await settled(api)
    if clock.age_s is None:
        await read(clock)


async def settled(api: Store) -> None:
    """No reading of the API's clock under way."""
    clock = api._clock
    assert clock is not None
    task = clock._task
    if task is not None:
        async with asyncio.timeout(5):
            await asyncio.wait([task])


async def handed_lease(redis: Redis, api: Store, worker: Store) -> tuple[int, int, int, int]:
    """A job handed to ``worker``: (TIME before the submit, its lease's end, TIME after,
    TIME calls the submit made)."""
    await listed(worker)
    calls = await time_calls(redis)
    before = await server_ms(redis)
    job = await submit(api)
    after = await server_ms(redis)
    await settled(api)
    calls = await time_calls(redis) - calls - 2  # not the two reads here
    async with asyncio.timeout(2):
        [claim] = await worker.handed()
    assert claim.job_id == job.id
    lease_end = await redis.zscore(api.shard_of(job.id).leases, job.id)
    assert lease_end is not None
    return before, int(lease_end), after, calls


async def test_a_handed_job_is_leased_on_the_estimate_of_redis_clock_without_a_time(
    redis: Redis, make_store: StoreFactory
) -> None:
    api, worker = make_store(), make_store(lease_ms=LEASE_MS)
    await estimated(api)

    before, lease_end, after, calls = await handed_lease(redis, api, worker)

    assert calls == 0  # the script read no TIME
    # Never shorter than lease_ms on Redis's clock, longer by a few ms at most.
    assert before + LEASE_MS <= lease_end <= after + LEASE_MS + AHEAD_MS


@pytest.mark.parametrize("skew_s", [3600.0, -3600.0])
async def test_the_api_hosts_skewed_wall_clock_does_not_move_the_lease(
    redis: Redis, make_store: StoreFactory, monkeypatch: pytest.MonkeyPatch, skew_s: float
) -> None:
    # The API process's wall clock an hour off (its ids and created_ms follow it, as they
    # always did); the estimate runs on the monotonic clock from a TIME reading.
    skewed = types.SimpleNamespace(
        time=lambda: time.time() + skew_s, monotonic=time.monotonic, perf_counter=time.perf_counter
    )
    monkeypatch.setattr(submitting_module, "time", skewed)
    api, worker = make_store(), make_store(lease_ms=LEASE_MS)
    await estimated(api)

    before, lease_end, after, calls = await handed_lease(redis, api, worker)

    assert calls == 0
    assert before + LEASE_MS <= lease_end <= after + LEASE_MS + AHEAD_MS


async def test_without_a_recent_estimate_the_hand_off_reads_time(
    redis: Redis, make_store: StoreFactory
) -> None:
    api, worker = make_store(), make_store(lease_ms=LEASE_MS)
    # The API's monotonic clock, moved by hand: the estimate ages past max_age_s.
    now = [1000.0]
    real = time.monotonic()
    readings = [0]

    async def reading() -> tuple[int, int]:
        readings[0] += 1
        return await api._server_time()

    clock = api._clock = ServerClock(
        reading, refresh_s=30, max_age_s=60, monotonic=lambda: now[0] + time.monotonic() - real
    )
    await read(clock)
    assert clock.now_ms() is not None
    now[0] += 61  # no refresh for a minute (Redis unreachable, say): not used any more
    assert clock.now_ms() is None
    await settled(api)  # the refresh that look started
    now[0] += 61
    readings[0] = 0

    before, lease_end, after, calls = await handed_lease(redis, api, worker)

    # The submit started a refresh too (its TIMEs counted apart): the script read TIME.
    assert readings[0] >= 1
    assert calls - readings[0] == 1
    assert before + LEASE_MS <= lease_end <= after + LEASE_MS
    await clock.aclose()


async def test_the_estimate_is_never_behind_redis_clock_and_ahead_by_the_round_trip_at_most(
    redis: Redis, make_store: StoreFactory
) -> None:
    api = make_store()
    clock = api._clock
    assert clock is not None
    await read(clock)
    for _ in range(50):
        before = await server_ms(redis)
        estimate = clock.now_ms()
        after = await server_ms(redis)
        assert estimate is not None
        assert before <= estimate <= after + AHEAD_MS
        await clock_past(redis, after)  # the next sample at a later ms


async def test_a_reading_over_a_slow_round_trip_is_not_used(redis: Redis) -> None:
    async def slow() -> tuple[int, int]:
        seconds, micros = await redis.time()
        await asyncio.sleep(0.03)  # 30 ms round trips: the reading could be 30 ms off
        return int(seconds), int(micros)

    clock = ServerClock(slow, max_rtt_ms=10, samples=2)
    assert not await clock.refresh()
    assert clock.age_s is None
    assert clock.now_ms() is None  # and a refresh is under way in the background
    await clock.aclose()


async def test_a_failed_reading_keeps_the_last_good_one_within_its_age(redis: Redis) -> None:
    fail = [False]

    async def sample() -> tuple[int, int]:
        if fail[0]:
            raise ConnectionError("gone")
        seconds, micros = await redis.time()
        return int(seconds), int(micros)

    clock = ServerClock(sample)
    await read(clock)
    fail[0] = True
    assert not await clock.refresh()
    before = await server_ms(redis)
    estimate = clock.now_ms()
    assert estimate is not None
    assert before <= estimate <= await server_ms(redis) + AHEAD_MS


def test_bounds_are_checked() -> None:
    async def sample() -> tuple[int, int]:
        return 0, 0

    with pytest.raises(ValueError, match="refresh_s"):
        ServerClock(sample, refresh_s=90, max_age_s=60)
    with pytest.raises(ValueError, match="max_rtt_ms"):
        ServerClock(sample, max_rtt_ms=0)
