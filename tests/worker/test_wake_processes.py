"""Worker processes (``reprompt worker``) handed jobs one at a time (issue 11).

Two idle workers: a submit hands its job, claimed, to exactly one of them (each counts its
waits on /metrics, ``reprompt_worker_idle_waits_total{ended="handoff"}``; none is woken to
claim), the jobs go round both, and a worker killed while idle takes no job with it: its
subscription went with the process, the submit sees nobody heard and hands the job to the
live one at once. A worker that took a job and died before running it (stopped, then
killed) loses nothing either: the lease it got in the submit runs out and the reaper of
the live one requeues the job, which then runs there. A worker that stops (SIGTERM) leaves
the idle list first.
"""

from __future__ import annotations

import asyncio
import signal
from collections.abc import Callable

import pytest
from redis.asyncio import Redis

from app.child import free_loopback_port
from tests.both import Store
from tests.worker.harness import (
    WorkerProcess,
    eventually,
    finished,
    job,
    listed_workers,
    scrape,
    submit,
)

pytestmark = pytest.mark.slow

Spawn = Callable[..., WorkerProcess]
JOBS = 6


async def waits(port: int, ended: str) -> float:
    value = await asyncio.to_thread(scrape, port, "reprompt_worker_idle_waits_total", ended=ended)
    assert value is not None
    return value


async def handed(port: int) -> float:
    return await waits(port, "handoff")


async def listed(store: Store, redis: Redis, count: int) -> None:
    """Until ``count`` workers are on shard 0's idle list."""

    async def check() -> bool:
        return await listed_workers(redis, store) == count

    await eventually(check, what=f"{count} workers on the idle list")


async def test_each_submit_hands_its_job_to_exactly_one_of_two_idle_workers_in_turn(
    store: Store, spawn: Spawn, redis_url: str
) -> None:
    ports = [free_loopback_port(), free_loopback_port()]
    for port in ports:
        await spawn(worker_metrics_port=port).ready()
    redis = Redis.from_url(redis_url)
    try:
        await listed(store, redis, 2)
        before = [await handed(port) for port in ports]
        woken_before = [await waits(port, "woken") for port in ports]

        for i in range(JOBS):
            view = await finished(store, await submit(store, job(name=f"one-{i}")))
            assert view.status == "succeeded"
            assert view.attempts == 1

        after = [await handed(port) for port in ports]
        woken_after = [await waits(port, "woken") for port in ports]
        await listed(store, redis, 2)  # each one's commit listed it again
    finally:
        await redis.aclose()

    gained = [b - a for a, b in zip(before, after, strict=True)]
    # One hand-off per job in all (the shared channel would wake both: 2 per job), and
    # the idle list turns, so both workers get some; no worker was woken to claim.
    assert sum(gained) == JOBS
    assert min(gained) >= 1
    assert woken_after == woken_before


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
        before = await handed(live_port)

        for i in range(JOBS):
            view = await finished(store, await submit(store, job(name=f"dead-{i}")))
            assert view.status == "succeeded"

        gained = await handed(live_port) - before
        left = await listed_workers(redis, store)
    finally:
        await redis.aclose()

    # Every job was handed to the live worker (none waited for its once-a-second look),
    # the one whose turn fell on the dead worker included: that submit saw nobody heard
    # it there, dropped the entry and handed the job to the next.
    assert gained == JOBS
    assert left == 1


async def test_a_worker_killed_after_it_was_handed_a_job_loses_nothing(
    store: Store, spawn: Spawn, redis_url: str
) -> None:
    doomed = await spawn().ready()
    redis = Redis.from_url(redis_url)
    try:
        await listed(store, redis, 1)
        doomed.send(signal.SIGSTOP)  # subscribed still: the submit's PUBLISH reaches it
        await spawn().ready()
        await listed(store, redis, 2)  # the stopped one first in line

        job_id = await submit(store, job(name="orphan"))
        shard = store.shard_of(job_id)
        assert await redis.hget(shard.job(job_id), "status") == b"in_progress"
        assert await redis.zscore(shard.leases, job_id) is not None
        doomed.send(signal.SIGKILL)  # it never ran the job it was handed
        assert await doomed.exit_code() == -signal.SIGKILL

        view = await finished(store, job_id)
    finally:
        await redis.aclose()

    # The lease the submit took for the dead worker ran out; the live worker's reaper
    # requeued the job (the lost attempt counts) and the live worker ran it.
    assert view.status == "succeeded"
    assert view.attempts == 2
    events = await store.events(job_id, after=None, block_ms=0, count=100)
    assert [e.name for e in events][:3] == ["job_queued", "job_start", "job_requeued"]
    assert not doomed.logged(rf"job {job_id} started")


async def test_a_worker_that_stops_leaves_the_idle_list_and_the_next_job_goes_to_the_other(
    store: Store, spawn: Spawn, redis_url: str
) -> None:
    stopping = await spawn().ready()
    live_port = free_loopback_port()
    await spawn(worker_metrics_port=live_port).ready()
    redis = Redis.from_url(redis_url)
    try:
        await listed(store, redis, 2)
        stopping.send(signal.SIGTERM)
        assert await stopping.exit_code() == 0
        await listed(store, redis, 1)  # it took itself off (its subscription may linger)
        before = await handed(live_port)

        view = await finished(store, await submit(store, job(name="after-stop")))

        gained = await handed(live_port) - before
    finally:
        await redis.aclose()
    assert view.status == "succeeded"
    assert view.attempts == 1
    assert gained == 1
