"""Claims, leases, the reaper, fencing and release: how no job is lost or run twice."""

from __future__ import annotations

import asyncio

import pytest
from redis.asyncio import Redis

from app.core.turn.conversation import TranscriptEntry
from app.core.wire import codes
from app.core.wire.envelope import Envelope, Progress
from app.core.wire.record import Rejection, Spend, TokenUsage
from app.store import QueueFull, TenantQuota, shard_of
from tests.both import Store
from tests.store.conftest import StoreFactory
from tests.store.helpers import (
    LONG_S,
    SPEC,
    SUCCESS,
    after_lease,
    all_events,
    claim,
    clock_past,
    complete,
    leases_key,
    names,
    queue_key,
    record,
    server_ms,
    submit,
    turn,
    waiting_for_work,
)


async def test_claim_takes_jobs_in_submission_order(store: Store) -> None:
    jobs = [await submit(store, task=f"t{i}") for i in range(5)]

    claimed = [(await claim(store)).job_id for _ in jobs]

    assert claimed == [job.id for job in jobs]
    assert await store.claim("w1") == []


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
    assert await redis.zscore(leases_key(store, job.id), job.id) is not None
    assert await names(store, job.id) == ["job_queued", "job_start"]
    assert (await store.queue_stats())[0] == 0


async def test_concurrent_claimers_get_each_job_exactly_once(store: Store) -> None:
    jobs = {(await submit(store)).id for _ in range(40)}

    claims = await asyncio.gather(*(store.claim(f"w{i}") for i in range(120)))

    got = [c for batch in claims for c in batch]
    assert sorted(c.job_id for c in got) == sorted(jobs)
    assert {c.token for c in got} == {1}  # a token is per job: the claim's attempt


async def test_heartbeat_extends_the_lease(redis: Redis, make_store: StoreFactory) -> None:
    store = make_store(lease_ms=2000)
    job = await submit(store)
    lease = await claim(store)
    before = await redis.zscore(leases_key(store, job.id), job.id)
    assert before is not None
    await clock_past(redis, before - store.options.lease_ms)  # a later renewal, by a ms

    assert await store.heartbeat(job.id, lease.token)

    after = await redis.zscore(leases_key(store, job.id), job.id)
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
    assert await redis.zscore(leases_key(store, lost.id), lost.id) is None
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
    assert await redis.llen(queue_key(store, jobs[0].id)) == 30


async def test_a_zombie_worker_cannot_write_after_its_job_was_reaped_and_reclaimed(
    redis: Redis, store: Store
) -> None:
    job = await submit(store)
    zombie = await claim(store, "zombie")
    assert await record(store, zombie, 1, model="zombie")
    await store.reap(now_ms=await after_lease(redis, store))
    owner = await claim(store, "owner")
    assert await record(store, owner, 1, model="owner")
    before = await store.get(job.id, tenant="acme")
    events_before = await all_events(store, job.id)

    refused = [
        await store.heartbeat(job.id, zombie.token),
        await store.write(zombie, progress=Progress(), events=[("turn_end", turn(2))]),
        await store.release(zombie),
        await complete(store, zombie),
    ]

    assert [bool(r) for r in refused] == [False] * 4
    assert await store.get(job.id, tenant="acme") == before
    assert await all_events(store, job.id) == events_before
    # The zombie's last call was paid for: its record is kept, nothing else it says.
    assert not await record(store, zombie, 2, model="zombie")
    kept = await store.get(job.id, tenant="acme")
    assert kept is not None
    assert [t.model for t in kept.turns] == ["zombie", "owner", "zombie"]
    assert kept.result == before.result if before is not None else False
    assert await store.heartbeat(job.id, owner.token)
    assert await complete(store, owner, Envelope.success({"by": "owner"}))
    assert not await complete(store, zombie)
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
            complete(store, lease, Envelope.success({"token": lease.token}))
            for lease in [old, new] * 5
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

    assert await store.complete(lease, envelope=failure, history=history, transcript=transcript)

    view = await store.get(job.id, tenant="acme")
    assert view is not None
    assert (view.status, view.result, view.history, view.transcript) == (
        "failed",
        failure,
        history,
        transcript,
    )
    assert view.finished_at is not None
    assert await redis.zscore(leases_key(store, job.id), job.id) is None
    end = (await all_events(store, job.id))[-1]
    assert (end.name, end.decoded()) == (
        "job_end",
        {"status": "failed", "result": failure.model_dump(mode="json")},
    )


async def test_complete_needs_a_final_envelope(store: Store) -> None:
    await submit(store)
    lease = await claim(store)

    with pytest.raises(ValueError, match="final envelope"):
        await complete(store, lease, Envelope.in_progress())


async def test_record_turn_appends_turns_and_shows_progress(store: Store) -> None:
    job = await submit(store)
    lease = await claim(store)

    for index in range(1, 4):
        assert await record(store, lease, index)

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

    assert await store.release(lease)

    view = await store.get(held.id, tenant="acme")
    assert view is not None
    assert (view.status, view.attempts) == ("queued", 0)
    assert await redis.zscore(leases_key(store, held.id), held.id) is None
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
    waiter = asyncio.ensure_future(store.wait_for_work(timeout_s=LONG_S))
    await waiting_for_work(store)

    await submit(store)
    await waiter

    assert store.woken  # by the submit's message, not at the end of the wait


async def test_wait_for_work_wakes_on_requeue(redis: Redis, store: Store) -> None:
    await submit(store)
    await claim(store)
    waiter = asyncio.ensure_future(store.wait_for_work(timeout_s=LONG_S))
    await waiting_for_work(store)

    await store.reap(now_ms=await after_lease(redis, store))

    await waiter
    assert store.woken


async def test_wait_for_work_returns_after_its_timeout(store: Store) -> None:
    assert await store.wait_for_work(timeout_s=0.3) is None

    assert not store.woken  # the wait ran out: no message ended it


async def test_queue_stats_reports_depth_and_the_oldest_jobs_age(
    redis: Redis, store: Store
) -> None:
    assert await store.queue_stats() == (0, 0.0)
    before = await server_ms(redis)
    await submit(store)
    made = await server_ms(redis)  # the first job was made between these readings
    await clock_past(redis, made + 250)
    await submit(store)

    depth, age = await store.queue_stats()
    after = await server_ms(redis)

    assert depth == 2
    assert 0.25 <= age <= (after - before) / 1000  # the first job's age, not the second's


# -- fairness, batches, caps, accounting ---------------------------------------------------


async def test_claims_take_tenants_in_turn_so_a_backlog_does_not_starve_others(
    store: Store,
) -> None:
    flood = [await submit(store, tenant="flood", task=f"f{i}") for i in range(20)]
    await submit(store, tenant="quiet", task="q")

    first = [(await claim(store)).tenant for _ in range(4)]

    # The quiet tenant's one job is the second claimed, not the 21st.
    assert first == ["flood", "quiet", "flood", "flood"]
    assert len(flood) == 20


async def test_a_batch_claim_leases_several_jobs_in_one_call(store: Store) -> None:
    jobs = [await submit(store, tenant=t) for t in ("a", "b", "a", "c")]

    batch = await store.claim("w1", n=3)

    assert len(batch) == 3
    assert [c.tenant for c in batch] == ["a", "b", "c"]  # round robin inside the batch too
    assert {c.job_id for c in batch} <= {j.id for j in jobs}
    assert len(await store.claim("w1", n=10)) == 1


async def test_a_tenant_over_its_queued_jobs_gets_queue_full_others_do_not(
    make_store: StoreFactory,
) -> None:
    store = make_store(max_queued=3)
    for _ in range(3):
        await submit(store, tenant="flood")

    with pytest.raises(QueueFull) as full:
        await store.submit(tenant="flood", spec=SPEC)

    assert full.value.status == 429
    assert full.value.retry_after_s
    await submit(store, tenant="quiet")  # another tenant is not affected
    await claim(store)
    await submit(store, tenant="flood")  # a claim made room


async def test_a_tenant_over_its_stored_bytes_gets_a_quota_error(make_store: StoreFactory) -> None:
    store = make_store(max_tenant_bytes=2_000)
    big = "x" * 900
    await submit(store, tenant="flood", input=big)
    await submit(store, tenant="flood", input=big)

    with pytest.raises(TenantQuota) as quota:
        await submit(store, tenant="flood", input=big)

    assert quota.value.status == 429
    await submit(store, tenant="quiet", input=big)


async def test_what_earlier_attempts_spent_comes_with_the_next_claim(
    redis: Redis, store: Store
) -> None:
    await submit(store)
    lost = await claim(store)
    assert lost.earlier is None
    assert await record(store, lost, 1, cost_usd=0.002)
    assert await record(store, lost, 2, cost_usd=None)
    await store.reap(now_ms=await after_lease(redis, store))

    again = await claim(store)

    assert again.earlier is not None
    assert again.earlier.calls == 2
    assert again.earlier.input_tokens == 20
    assert again.earlier.output_tokens == 10
    assert again.earlier.cost_known is False  # one call had no known price
    view = await store.get(again.job_id, tenant="acme")
    assert view is not None
    assert [t.index for t in view.turns] == [1, 2]


async def test_the_cached_tokens_earlier_attempts_spent_come_with_the_next_claim(
    redis: Redis, store: Store
) -> None:
    await submit(store)
    lost = await claim(store)
    cached = TokenUsage(input_tokens=1500, output_tokens=5, cached_input_tokens=1280)
    written = TokenUsage(input_tokens=1500, output_tokens=5, cache_write_tokens=1400)
    assert await record(store, lost, 1, usage=written, cost_usd=0.002)
    assert await record(store, lost, 2, usage=cached, cost_usd=0.001)
    await store.reap(now_ms=await after_lease(redis, store))

    again = await claim(store)

    assert again.earlier is not None
    assert again.earlier.input_tokens == 3000
    assert again.earlier.cached_input_tokens == 1280
    assert again.earlier.cache_write_tokens == 1400


async def test_the_first_spend_of_a_job_and_its_commit_keep_the_spend_as_the_worker_wrote_it(
    redis: Redis, store: Store
) -> None:
    # The first spend is the total as it is (lua/common.lua add_spend): a cost with more
    # digits than Lua's number formatting keeps comes back exact, and a commit's turn adds.
    await submit(store)
    lost = await claim(store)
    assert await record(store, lost, 1, cost_usd=0.000123456789012345678)
    await store.reap(now_ms=await after_lease(redis, store))
    again = await claim(store)
    assert again.earlier is not None
    assert (again.earlier.calls, again.earlier.cost) == (1, 0.000123456789012345678)
    assert again.earlier.cost_known is True

    assert await store.complete(
        again, envelope=SUCCESS, history=(), transcript=(), turn=turn(2, cost_usd=0.5)
    )
    [total] = await redis.hmget(store.shard_of(again.job_id).job(again.job_id), ["spent"])
    assert total is not None
    spent = Spend.model_validate_json(total)
    assert (spent.calls, spent.input_tokens, spent.cost_known) == (2, 20, True)
    assert abs(spent.cost - 0.500123456789) < 1e-9


async def test_a_sharded_store_spreads_jobs_and_claims_from_every_shard(
    make_store: StoreFactory,
) -> None:
    store = make_store(shards=4)
    jobs = [await submit(store, task=f"t{i}") for i in range(16)]

    assert {shard_of(job.id) for job in jobs} == {0, 1, 2, 3}
    claimed = await store.claim("w1", n=100)
    assert sorted(c.job_id for c in claimed) == sorted(j.id for j in jobs)
    assert await store.queue_stats() == (0, 0.0)


async def test_an_idempotent_replay_finds_its_job_on_a_sharded_store(
    make_store: StoreFactory,
) -> None:
    store = make_store(shards=8)
    first, created = await store.submit(tenant="acme", spec=SPEC, idempotency_key="k")
    again, again_created = await store.submit(tenant="acme", spec=SPEC, idempotency_key="k")

    assert (created, again_created) == (True, False)
    assert again.id == first.id


async def test_a_tenant_at_its_running_cap_waits_while_others_run(
    make_store: StoreFactory, redis: Redis
) -> None:
    store = make_store(max_in_flight=2)
    for _ in range(5):
        await submit(store, tenant="flood")
    quiet = await submit(store, tenant="quiet")

    batch = await store.claim("w1", n=10)

    assert sorted(c.tenant for c in batch) == ["flood", "flood", "quiet"]
    assert await store.claim("w1", n=10) == []  # flood is at its cap, quiet has nothing
    done = next(c for c in batch if c.tenant == "flood")
    assert await complete(store, done)  # one of flood's jobs ends: room for one more
    (next_one,) = await store.claim("w1", n=10)
    assert next_one.tenant == "flood"
    lost = next(c for c in batch if c.tenant == "quiet")
    await store.cancel(lost.job_id, tenant="quiet")
    await store.reap(now_ms=await after_lease(redis, store))  # flood's two come back
    assert len(await store.claim("w1", n=10)) == 2
    assert quiet.id == lost.job_id
