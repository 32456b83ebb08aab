"""Claims, leases, the reaper, fencing and release: how no job is lost or run twice."""

from __future__ import annotations

import asyncio
import time

import pytest
from redis.asyncio import Redis

from app.core import codes
from app.core.conversation import TranscriptEntry
from app.core.envelope import Envelope, Progress
from app.core.turn import Rejection
from tests.both import Store
from tests.store.conftest import StoreFactory
from tests.store.helpers import SUCCESS, after_lease, all_events, claim, names, submit, turn

PROGRESS = Progress(phase="turn-done", turn=1)


async def test_claim_takes_jobs_in_submission_order(store: Store) -> None:
    jobs = [await submit(store, task=f"t{i}") for i in range(5)]

    claimed = [(await claim(store)).job_id for _ in jobs]

    assert claimed == [job.id for job in jobs]
    assert await store.claim("w1") is None


async def test_claim_leases_the_job_to_its_worker(redis: Redis, store: Store) -> None:
    job = await submit(store, task="t")

    first = await claim(store)
    view = await store.get(job.id, tenant="acme")

    assert (first.job_id, first.attempt, first.tenant) == (job.id, 1, "acme")
    assert first.spec["task"] == "t"
    assert view is not None
    assert view.status == "in_progress"
    assert view.attempts == 1
    assert view.started_at is not None
    assert await redis.zscore(store.keys.leases, job.id) is not None
    assert await names(store, job.id) == ["job_queued", "job_start"]
    assert (await store.queue_stats())[0] == 0


async def test_concurrent_claimers_get_each_job_exactly_once(store: Store) -> None:
    jobs = {(await submit(store)).id for _ in range(40)}

    claims = await asyncio.gather(*(store.claim(f"w{i}") for i in range(120)))

    got = [c for c in claims if c is not None]
    assert sorted(c.job_id for c in got) == sorted(jobs)
    assert len({c.token for c in got}) == 40


async def test_heartbeat_extends_the_lease(redis: Redis, make_store: StoreFactory) -> None:
    store = make_store(lease_ms=2000)
    job = await submit(store)
    lease = await claim(store)
    before = await redis.zscore(store.keys.leases, job.id)
    await asyncio.sleep(0.05)

    assert await store.heartbeat(job.id, lease.token)

    after = await redis.zscore(store.keys.leases, job.id)
    assert before is not None
    assert after is not None
    assert after > before
    # Past the old expiry but before the new one, the reaper leaves it alone.
    assert (await store.reap(now_ms=int(before) + 1)).requeued == []
    assert (await store.reap(now_ms=int(after) - 1)).requeued == []
    assert await store.heartbeat(job.id, lease.token)


async def test_ping_answers_while_redis_is_up(store: Store) -> None:
    assert await store.ping()


async def test_reaper_leaves_live_leases_alone(store: Store) -> None:
    await submit(store)
    await claim(store)

    reaped = await store.reap()

    assert reaped.requeued == []
    assert reaped.failed == []


async def test_reaper_requeues_an_expired_lease_at_the_front_counting_the_attempt(
    redis: Redis, store: Store
) -> None:
    lost = await submit(store, task="lost")
    waiting = await submit(store, task="waiting")
    first = await claim(store)

    reaped = await store.reap(now_ms=await after_lease(redis, store))

    assert reaped.requeued == [lost.id]
    view = await store.get(lost.id, tenant="acme")
    assert view is not None
    assert (view.status, view.attempts) == ("queued", 1)
    assert await redis.zscore(store.keys.leases, lost.id) is None
    again = await claim(store)
    assert (again.job_id, again.attempt) == (lost.id, 2)
    assert again.token > first.token
    assert (await claim(store)).job_id == waiting.id
    assert await names(store, lost.id) == [
        "job_queued",
        "job_start",
        "job_requeued",
        "job_start",
    ]
    requeued = (await all_events(store, lost.id))[2]
    assert requeued.decoded() == {"attempt": 1, "reason": "lease-expired"}


async def test_a_job_that_loses_its_worker_max_attempts_times_fails_worker_lost(
    redis: Redis, make_store: StoreFactory
) -> None:
    store = make_store(max_attempts=2)
    poison = await submit(store, task="poison")
    healthy = await submit(store, task="healthy")

    await claim(store)
    assert (await store.reap(now_ms=await after_lease(redis, store))).requeued == [poison.id]
    await claim(store)
    reaped = await store.reap(now_ms=await after_lease(redis, store))

    assert reaped.failed == [poison.id]
    view = await store.get(poison.id, tenant="acme")
    assert view is not None
    assert view.status == "failed"
    assert view.finished_at is not None
    assert view.result.status == "error"
    assert view.result.error == codes.WORKER_LOST
    assert "2 times" in (view.result.detail or "")
    end = (await all_events(store, poison.id))[-1]
    assert end.name == "job_end"
    assert end.decoded() == {"status": "failed", "result": view.result.model_dump(mode="json")}
    # Other jobs keep flowing.
    assert (await claim(store)).job_id == healthy.id


async def test_concurrent_reapers_requeue_each_expired_job_once(redis: Redis, store: Store) -> None:
    jobs = [await submit(store) for _ in range(30)]
    for _ in jobs:
        await claim(store)
    now = await after_lease(redis, store)

    results = await asyncio.gather(*(store.reap(now_ms=now) for _ in range(8)))

    requeued = [job_id for result in results for job_id in result.requeued]
    assert sorted(requeued) == sorted(job.id for job in jobs)
    assert (await store.queue_stats())[0] == 30
    assert await redis.llen(store.keys.queue) == 30


async def test_a_zombie_worker_cannot_write_after_its_job_was_reaped_and_reclaimed(
    redis: Redis, store: Store
) -> None:
    job = await submit(store)
    zombie = await claim(store, "zombie")
    assert await store.record_turn(job.id, zombie.token, turn(1, model="zombie"), PROGRESS)
    await store.reap(now_ms=await after_lease(redis, store))
    owner = await claim(store, "owner")
    assert await store.record_turn(job.id, owner.token, turn(1, model="owner"), PROGRESS)
    before = await store.get(job.id, tenant="acme")
    events_before = await all_events(store, job.id)

    refused = [
        await store.heartbeat(job.id, zombie.token),
        await store.record_turn(job.id, zombie.token, turn(2, model="zombie"), PROGRESS),
        await store.record_event(job.id, zombie.token, "turn_end", turn(2)),
        await store.release(job.id, zombie.token),
        await store.complete(job.id, zombie.token, envelope=SUCCESS, history=[], transcript=[]),
    ]

    assert refused == [False] * 5
    assert await store.get(job.id, tenant="acme") == before
    assert await all_events(store, job.id) == events_before
    assert await store.heartbeat(job.id, owner.token)
    done = Envelope.success({"by": "owner"})
    assert await store.complete(job.id, owner.token, envelope=done, history=[], transcript=[])
    assert not await store.complete(
        job.id, zombie.token, envelope=SUCCESS, history=[], transcript=[]
    )
    view = await store.get(job.id, tenant="acme")
    assert view is not None
    assert view.result.data == {"by": "owner"}
    assert (await names(store, job.id)).count("job_end") == 1


async def test_exactly_one_of_racing_completes_commits(redis: Redis, store: Store) -> None:
    job = await submit(store)
    old = await claim(store)
    await store.reap(now_ms=await after_lease(redis, store))
    new = await claim(store)

    committed = await asyncio.gather(
        *(
            store.complete(
                job.id,
                token,
                envelope=Envelope.success({"token": token}),
                history=[],
                transcript=[],
            )
            for token in [old.token, new.token] * 5
        )
    )

    assert sum(committed) == 1
    view = await store.get(job.id, tenant="acme")
    assert view is not None
    assert view.result.data == {"token": new.token}
    assert (await names(store, job.id)).count("job_end") == 1


async def test_complete_records_the_final_envelope_and_frees_the_lease(
    redis: Redis, store: Store
) -> None:
    job = await submit(store)
    lease = await claim(store)
    failure = Envelope.failure(codes.BUDGET_EXHAUSTED, "out of turns")
    history = (
        Rejection(
            turn=1,
            type="must_return",
            outcome="invalid",
            error_code="llm-invalid-output",
            diagnosis="not JSON",
        ),
    )
    transcript = (TranscriptEntry(role="user", content="hi"),)

    assert await store.complete(
        job.id, lease.token, envelope=failure, history=history, transcript=transcript
    )

    view = await store.get(job.id, tenant="acme")
    assert view is not None
    assert (view.status, view.result, view.history, view.transcript) == (
        "failed",
        failure,
        history,
        transcript,
    )
    assert view.finished_at is not None
    assert await redis.zscore(store.keys.leases, job.id) is None
    end = (await all_events(store, job.id))[-1]
    assert (end.name, end.decoded()) == (
        "job_end",
        {"status": "failed", "result": failure.model_dump(mode="json")},
    )


async def test_complete_needs_a_final_envelope(store: Store) -> None:
    job = await submit(store)
    lease = await claim(store)

    with pytest.raises(ValueError, match="final envelope"):
        await store.complete(
            job.id,
            lease.token,
            envelope=Envelope.in_progress(),
            history=[],
            transcript=[],
        )


async def test_record_turn_appends_turns_and_shows_progress(store: Store) -> None:
    job = await submit(store)
    lease = await claim(store)

    for index in range(1, 4):
        assert await store.record_turn(
            job.id, lease.token, turn(index), Progress(phase="turn-done", turn=index)
        )

    view = await store.get(job.id, tenant="acme")
    assert view is not None
    assert view.turns == (turn(1), turn(2), turn(3))
    assert view.result.model_dump(mode="json") == {
        "status": "in-progress",
        "progress": {"phase": "turn-done", "turn": 3},
        "warnings": [],
    }


async def test_release_puts_the_job_back_at_the_front_without_counting_the_attempt(
    redis: Redis, store: Store
) -> None:
    held = await submit(store, task="held")
    behind = await submit(store, task="behind")
    lease = await claim(store)

    assert await store.release(held.id, lease.token)

    view = await store.get(held.id, tenant="acme")
    assert view is not None
    assert (view.status, view.attempts) == ("queued", 0)
    assert await redis.zscore(store.keys.leases, held.id) is None
    assert not await store.heartbeat(held.id, lease.token)
    again = await claim(store)
    assert (again.job_id, again.attempt) == (held.id, 1)
    assert (await claim(store)).job_id == behind.id
    released = (await all_events(store, held.id))[2]
    assert (released.name, released.decoded()) == (
        "job_requeued",
        {"attempt": 1, "reason": "released"},
    )


async def test_wait_for_work_wakes_on_submit(store: Store) -> None:
    waiter = asyncio.ensure_future(store.wait_for_work(timeout_s=10))
    await asyncio.sleep(0.1)
    started = time.monotonic()

    await submit(store)
    await asyncio.wait_for(waiter, timeout=5)

    assert time.monotonic() - started < 2


async def test_wait_for_work_wakes_on_requeue(redis: Redis, store: Store) -> None:
    await submit(store)
    await claim(store)
    while await redis.lpop(store.keys.wake):  # tokens left by the submit
        pass
    waiter = asyncio.ensure_future(store.wait_for_work(timeout_s=10))
    await asyncio.sleep(0.1)

    await store.reap(now_ms=await after_lease(redis, store))

    await asyncio.wait_for(waiter, timeout=5)


async def test_wait_for_work_returns_after_its_timeout(store: Store) -> None:
    started = time.monotonic()

    await store.wait_for_work(timeout_s=0.3)

    assert 0.25 <= time.monotonic() - started < 3


async def test_queue_stats_reports_depth_and_the_oldest_jobs_age(store: Store) -> None:
    assert await store.queue_stats() == (0, 0.0)
    await submit(store)
    await asyncio.sleep(0.25)
    await submit(store)

    depth, age = await store.queue_stats()

    assert depth == 2
    assert 0.2 <= age < 5
