"""Worker processes (``reprompt worker``) woken one at a time (issue 11).

Two idle workers: a submit wakes exactly one of them (each counts its waits on /metrics,
``reprompt_worker_idle_waits_total{ended="woken"}``), the wake-ups go round both, and a
worker killed while idle takes no wake-up with it: its subscription went with the process,
the submit sees nobody heard and wakes the live one at once.
"""

from __future__ import annotations

import asyncio
import signal
import time
from collections.abc import Callable

import pytest
from redis.asyncio import Redis

from app.child import free_loopback_port
from tests.both import Store
from tests.worker.harness import WorkerProcess, eventually, finished, job, scrape, submit

pytestmark = pytest.mark.slow

Spawn = Callable[..., WorkerProcess]
JOBS = 6


async def woken(port: int) -> float:
    value = await asyncio.to_thread(scrape, port, "reprompt_worker_idle_waits_total", ended="woken")
    assert value is not None
    return value


async def listed(store: Store, redis: Redis, count: int) -> None:
    """Until ``count`` workers are on shard 0's idle list."""

    async def check() -> bool:
        return int(await redis.llen(store.keys.shard(0).idle)) == count

    await eventually(check, what=f"{count} workers on the idle list")


async def test_each_submit_wakes_exactly_one_of_two_idle_workers_in_turn(
    store: Store, spawn: Spawn, redis_url: str
) -> None:
    ports = [free_loopback_port(), free_loopback_port()]
    for port in ports:
        await spawn(worker_metrics_port=port).ready()
    redis = Redis.from_url(redis_url)
    try:
        await listed(store, redis, 2)
        before = [await woken(port) for port in ports]

        for i in range(JOBS):
            view = await finished(store, await submit(store, job(name=f"one-{i}")))
            assert view.status == "succeeded"

        after = [await woken(port) for port in ports]
    finally:
        await redis.aclose()

    gained = [b - a for a, b in zip(before, after, strict=True)]
    # One wake-up per job in all (the shared channel would wake both: 2 per job), and
    # the idle list turns, so both workers get some.
    assert sum(gained) == JOBS
    assert min(gained) >= 1


async def test_a_worker_killed_while_idle_does_not_keep_the_next_job_waiting(
    store: Store, spawn: Spawn, redis_url: str
) -> None:
    live_port = free_loopback_port()
    dead = await spawn().ready()
    await spawn(worker_metrics_port=live_port).ready()
    redis = Redis.from_url(redis_url)
    try:
        await listed(store, redis, 2)  # the list turns: the dead one's turn comes
        dead.send(signal.SIGKILL)
        assert await dead.exit_code() == -signal.SIGKILL

        async def closed() -> bool:  # Redis saw the dead worker's connections close
            channels = await redis.pubsub_channels(store.keys.wake_channel("*"))
            return len(channels) == 1

        await eventually(closed, what="the dead worker's subscription to close")
        before = await woken(live_port)

        waits = []
        for i in range(JOBS):
            started = time.monotonic()
            view = await finished(store, await submit(store, job(name=f"dead-{i}")))
            waits.append(time.monotonic() - started)
            assert view.status == "succeeded"

        gained = await woken(live_port) - before
        left = await redis.llen(store.keys.shard(0).idle)
    finally:
        await redis.aclose()

    # Every job reached the live worker by a wake-up (none waited for its once-a-second
    # look), the one whose turn fell on the dead worker included: that submit saw nobody
    # heard it there, dropped the entry and woke the next.
    assert gained == JOBS
    assert left == 1
    assert max(waits) < 1.0, waits
