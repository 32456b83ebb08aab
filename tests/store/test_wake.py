"""A submit hands its job to one idle worker, claimed for it, or wakes one (issue 11).

A worker whose claim comes back short registers on the shard's idle list (lua/claim.lua).
A submit that finds the shard with no queued job and a worker listed claims the job for
that worker in its own script (attempt, owner, lease of the worker's length, job_start),
takes the worker off the list and publishes the claimed job on the worker's own channel
(lua/submit.lua): no claim round trip. The worker lists itself again with that job's
commit (lua/complete.lua). A registration whose subscription is gone (the worker died),
or that is older than ``WAKE_STALE_MS``, is dropped and the next worker tried; with
nobody to take it the job is queued and every worker told on the shared channel. With
jobs queued on the shard, a tenant at its cap, or an entry of a worker that takes no
hand-off, the job is queued and one idle worker woken, as before. An API process that
finds jobs queued or nobody listed tries no hand-off for ``WAKE_EMPTY_S``: no command
spent on it under load.
"""

from __future__ import annotations

import asyncio
import time

import pytest
from redis.asyncio import Redis

from app.store import Claim
from app.store import claiming as claiming_module
from app.store import submitting as submitting_module
from app.store.connection import WAKE_STALE_MS
from app.tracecontext import TraceContext
from tests.both import Store
from tests.store.conftest import StoreFactory
from tests.store.helpers import SPEC, SUCCESS, after_lease, clock_past, complete, server_ms, submit
from tests.waiting import PATIENCE_S, awaited


@pytest.fixture(autouse=True)
def slow_to_look_again(monkeypatch: pytest.MonkeyPatch) -> None:
    """``WAKE_EMPTY_S`` is a few tens of ms: long enough here for a test's next steps to
    fall within it (the tests that need it over clear ``_no_handoff``)."""
    monkeypatch.setattr(submitting_module, "WAKE_EMPTY_S", 60.0)


async def idle_list(redis: Redis, store: Store) -> list[str]:
    entries = await redis.lrange(store.keys.shard(0).idle, 0, -1)
    return [e.decode() if isinstance(e, bytes) else e for e in entries]


def token(entry: str) -> str:
    """The wake token of an idle-list entry, "<token>/<lease>/<cap>/<worker id> <ms>"."""
    return entry.split()[0].split("/")[0]


async def tokens(redis: Redis, store: Store) -> list[str]:
    return [token(e) for e in await idle_list(redis, store)]


async def woken(*stores: Store, within_s: float = PATIENCE_S) -> list[bool]:
    """Which of ``stores`` a wake-up (not a hand-off) reached within ``within_s`` (a wake-up
    that comes returns at once: the patience only bounds one that never does)."""

    async def wake_up(store: Store) -> bool:
        deadline = time.monotonic() + within_s
        while (left := deadline - time.monotonic()) > 0:
            await store.wait_for_work(left)
            if not store.woken:
                return False
            if not store.handed_only:
                return True
        return False

    return list(await asyncio.gather(*(wake_up(s) for s in stores)))


async def handed(store: Store) -> Claim:
    """The one job handed to ``store``."""
    [claim] = await awaited(store.handed(), what="a job handed over")
    return claim


def nothing_handed(*stores: Store) -> bool:
    return all(not s.take_handed() for s in stores)


async def idle(store: Store, worker: str | None = None, slots: int = 1) -> None:
    """A worker's round: a claim of ``slots`` jobs that finds nothing (so it registers,
    once per slot)."""
    assert await store.claim(worker or store.wake_token, n=slots, register=True) == []


async def listening(*stores: Store) -> None:
    """Workers subscribed to their channels."""
    for store in stores:
        await store.wait_for_work(0.01)


async def test_a_submit_hands_its_job_to_one_idle_worker_claimed_for_it(
    redis: Redis, make_store: StoreFactory
) -> None:
    api, a, b = make_store(), make_store(lease_ms=7000), make_store()
    await listening(a, b)
    await idle(a, "worker-a")
    await idle(b, "worker-b")
    assert await tokens(redis, api) == [a.wake_token, b.wake_token]

    before = await server_ms(redis)
    job = await submit(api)
    claim = await handed(a)

    # The claim a claim would have made: attempt 1 (the fencing token), the spec, the tenant.
    assert (claim.job_id, claim.token, claim.attempt, claim.tenant) == (job.id, 1, 1, "acme")
    assert claim.spec == SPEC
    view = await api.get(job.id, tenant="acme")
    assert view is not None
    assert view.status == "in_progress"
    assert view.attempts == 1
    shard = api.shard_of(job.id)
    assert await redis.hget(shard.job(job.id), "owner") == b"worker-a"
    assert await redis.llen(shard.tenant_queue("acme")) == 0
    assert await redis.llen(shard.ring) == 0
    lease_end = await redis.zscore(shard.leases, job.id)
    assert lease_end is not None
    assert before + 7000 <= lease_end <= await server_ms(redis) + 7000
    assert [e.name for e in await api.events(job.id, after=None, block_ms=0)] == [
        "job_queued",
        "job_start",
    ]
    # Off the list, so the next job goes to the other worker; b heard nothing.
    assert await tokens(redis, api) == [b.wake_token]
    assert nothing_handed(b)

    second = await submit(api)
    assert (await handed(b)).job_id == second.id
    assert await tokens(redis, api) == []

    # Nobody listed: queued, every worker told on the shared channel.
    third = await submit(api)
    assert await woken(a, b) == [True, True]
    assert await redis.lrange(shard.tenant_queue("acme"), 0, -1) == [third.id.encode()]
    # Found nobody: for a while the next submits try no hand-off (the workers it took off
    # come back with their commits), but wake one listed worker.
    assert api._no_handoff


async def test_the_commit_of_a_handed_job_lists_its_worker_again_before_the_done_message(
    redis: Redis, make_store: StoreFactory
) -> None:
    api, a = make_store(), make_store()
    await listening(a)
    await idle(a)
    job = await submit(api)
    claim = await handed(a)
    assert await idle_list(redis, api) == []

    async with api.hub.watch(api.channels["done"], job.id) as done:
        listed_when_done: list[list[str]] = []

        async def watch() -> None:
            await done.wait(5)
            listed_when_done.append(await tokens(redis, api))

        watcher = asyncio.create_task(watch())
        assert await complete(a, claim, room=1)
        await watcher
    assert listed_when_done == [[a.wake_token]]

    # Listed again: the next job is handed to it too, no claim in between.
    nxt = await submit(api)
    assert (await handed(a)).job_id == nxt.id
    view = await api.get(job.id, tenant="acme")
    assert view is not None
    assert view.status == "succeeded"
    assert view.result == SUCCESS


async def test_a_worker_is_listed_once_per_spare_slot_and_each_hand_off_takes_one(
    redis: Redis, make_store: StoreFactory
) -> None:
    api, a = make_store(), make_store()
    await listening(a)
    await idle(a, slots=3)
    [entry] = set(await idle_list(redis, api))
    assert await idle_list(redis, api) == [entry] * 3

    jobs = [await submit(api) for _ in range(3)]
    claims: list[Claim] = []
    while len(claims) < 3:
        claims += await awaited(a.handed(), what="the jobs handed over")
    assert [c.job_id for c in claims] == [j.id for j in jobs]
    assert await idle_list(redis, api) == []  # handed all it offered: a hung worker strands 3

    queued = await submit(api)  # nobody listed: it waits, every worker told
    assert await woken(a) == [True]
    assert nothing_handed(a)
    view = await api.get(queued.id, tenant="acme")
    assert view is not None
    assert view.status == "queued"

    assert [c.job_id for c in await a.claim("w", n=2, register=True)] == [queued.id]
    assert await tokens(redis, api) == [a.wake_token]  # a short claim lists it anew
    api._no_handoff.clear()  # as WAKE_EMPTY_S later
    nxt = await submit(api)
    assert (await handed(a)).job_id == nxt.id
    assert await idle_list(redis, api) == []
    assert await complete(a, claims[0], room=1)  # a slot frees: its commit lists a copy
    assert await tokens(redis, api) == [a.wake_token]


async def test_a_claim_that_takes_jobs_takes_as_many_copies_off(
    redis: Redis, make_store: StoreFactory
) -> None:
    api, a = make_store(), make_store()
    await listening(a)
    await idle(a, slots=4)
    [entry] = set(await idle_list(redis, api))
    api._no_handoff[0] = time.monotonic() + 60  # the API tries no hand-off: jobs queue
    queued = [await submit(api, tenant=f"t{i}") for i in range(2)]

    claims = await a.claim("w", n=8, register=True)  # short: it stays listed

    assert sorted(c.job_id for c in claims) == sorted(j.id for j in queued)
    assert await idle_list(redis, api) == [entry] * 2  # 4 offered, 2 taken by the claim


async def test_a_dead_workers_copies_go_at_once_and_leave_takes_every_copy_off(
    redis: Redis, make_store: StoreFactory
) -> None:
    api, dead, live = make_store(), make_store(), make_store()
    await listening(dead, live)
    await idle(dead, slots=3)
    await idle(live, slots=2)
    await dead.hub.close()  # its subscription gone, as with a killed process; still listed

    job = await submit(api)

    assert (await handed(live)).job_id == job.id
    assert await tokens(redis, api) == [live.wake_token]  # dead's 3 dropped, live's 2nd left
    await live.leave()
    assert await idle_list(redis, api) == []
    assert not live.listed


async def test_a_renewal_lists_as_many_copies_as_the_worker_has_room_for_then(
    redis: Redis, make_store: StoreFactory, monkeypatch: pytest.MonkeyPatch
) -> None:
    api, a = make_store(), make_store()
    await listening(a)
    await idle(a, slots=4)
    [before] = set(await idle_list(redis, api))
    job = await submit(api)
    claim = await handed(a)
    assert await idle_list(redis, api) == [before] * 3

    monkeypatch.setattr(claiming_module, "WAKE_RENEW_S", 0.0)
    await clock_past(redis, int(before.split()[1]))  # a renewal stamps a later ms
    await idle(a, slots=2)  # room for two now
    [after] = set(await idle_list(redis, api))
    assert after != before
    assert await idle_list(redis, api) == [after] * 2
    assert await complete(a, claim, room=2)  # room for the two it has listed: none more
    assert await idle_list(redis, api) == [after] * 2
    view = await api.get(job.id, tenant="acme")
    assert view is not None
    assert view.status == "succeeded"


async def test_jobs_queued_on_the_shard_go_first_and_a_tenant_at_its_cap_is_not_handed_a_job(
    redis: Redis, make_store: StoreFactory
) -> None:
    api, a = make_store(max_in_flight=1), make_store(max_in_flight=1)
    await listening(a)
    await idle(a)
    first = await submit(api, tenant="x")  # handed: x runs one job now (its cap)
    assert (await handed(a)).job_id == first.id
    shard = api.shard_of(first.id)
    assert await redis.hget(shard.running, "x") == b"1"
    await idle(a)  # listed again (a short claim)

    capped = await submit(api, tenant="x")  # x at its cap: queued, a woken (finds nothing)
    assert nothing_handed(a)
    assert await woken(a) == [True]
    assert await redis.lrange(shard.tenant_queue("x"), 0, -1) == [capped.id.encode()]
    assert await a.claim("a", n=4, register=True) == []  # x is at its cap

    other = await submit(api, tenant="y")  # x's job is queued on the shard: y's waits too
    assert nothing_handed(a)
    assert await redis.lrange(shard.tenant_queue("y"), 0, -1) == [other.id.encode()]
    assert await woken(a) == [True]
    [claim] = await a.claim("a", n=4, register=True)
    assert claim.job_id == other.id
    # Jobs were queued: for a while the API tries no hand-off, but still wakes one worker.
    assert api._no_handoff
    await idle(a)
    later = await submit(api, tenant="z")
    assert nothing_handed(a)
    assert await woken(a) == [True]
    assert [c.job_id for c in await a.claim("a", n=4, register=True)] == [later.id]


async def test_a_worker_that_died_while_listed_is_dropped_and_the_job_handed_to_the_next(
    redis: Redis, make_store: StoreFactory
) -> None:
    api, dead, live = make_store(), make_store(), make_store()
    await listening(dead, live)
    await idle(dead)
    await idle(live)
    await dead.hub.close()  # its subscription gone, as with a killed process; still listed

    job = await submit(api)

    assert (await handed(live)).job_id == job.id
    assert await idle_list(redis, api) == []  # the dead one dropped, the live one taken


async def test_a_job_nobody_heard_is_queued_and_every_worker_told(
    redis: Redis, make_store: StoreFactory
) -> None:
    api, dead, other = make_store(), make_store(), make_store()
    await listening(dead, other)
    await idle(dead)
    await dead.hub.close()

    job = await submit(api)

    assert await woken(other) == [True]  # the shared channel
    shard = api.shard_of(job.id)
    view = await api.get(job.id, tenant="acme")
    assert view is not None
    assert view.status == "queued"
    assert view.attempts == 0
    assert await redis.zscore(shard.leases, job.id) is None
    assert await redis.lrange(shard.tenant_queue("acme"), 0, -1) == [job.id.encode()]
    assert await idle_list(redis, api) == []
    [claim] = await other.claim("w", n=4)
    assert (claim.job_id, claim.attempt) == (job.id, 1)


async def test_a_stale_registration_is_dropped_and_with_nobody_left_every_worker_is_told(
    redis: Redis, make_store: StoreFactory
) -> None:
    api, stuck, other = make_store(), make_store(), make_store()
    await listening(stuck, other)  # other listens on the shared channel, never registered
    # A registration from a worker that stopped claiming long ago (still subscribed).
    old = await server_ms(redis) - WAKE_STALE_MS - 5000
    await redis.rpush(api.keys.shard(0).idle, f"{stuck.wake_token}/30000/0/stuck {old}")

    await submit(api)

    assert nothing_handed(stuck)
    assert await woken(stuck, other) == [True, True]  # the shared channel: everyone
    assert await idle_list(redis, api) == []


async def test_an_entry_without_the_hand_off_fields_is_woken_not_handed_a_job(
    redis: Redis, make_store: StoreFactory
) -> None:
    """A worker of the version before lists "<token> <ms>": it is woken, as then."""
    api, old = make_store(), make_store()
    await listening(old)
    await redis.rpush(api.keys.shard(0).idle, f"{old.wake_token} {await server_ms(redis)}")

    job = await submit(api)

    assert await woken(old) == [True]
    assert nothing_handed(old)
    view = await api.get(job.id, tenant="acme")
    assert view is not None
    assert view.status == "queued"


async def test_a_claim_without_room_for_every_queued_job_hands_the_wake_up_on(
    redis: Redis, make_store: StoreFactory
) -> None:
    api, a, b = make_store(), make_store(), make_store()
    await listening(a, b)
    await idle(b)
    api._no_handoff[0] = time.monotonic() + 60  # the API tries no hand-off: jobs queue
    await submit(api, tenant="x")
    await submit(api, tenant="x")
    assert await woken(b) == [True]  # the first submit's, to the idle worker (drained)

    assert len(await a.claim("a", n=1, register=True)) == 1  # room for one only
    assert await woken(b) == [True]  # told in the same script: a left a job behind
    assert len(await b.claim("b", n=4, register=True)) == 1


async def test_a_replayed_idempotency_key_hands_nothing_over(
    redis: Redis, make_store: StoreFactory
) -> None:
    api, a, b = make_store(), make_store(), make_store()
    await listening(a, b)
    await idle(a)
    await idle(b)
    first, created = await api.submit(tenant="acme", spec={"task": "t"}, idempotency_key="k1")
    assert created
    assert (await handed(a)).job_id == first.id

    again, created = await api.submit(tenant="acme", spec={"task": "t"}, idempotency_key="k1")

    assert not created
    assert again.id == first.id
    assert again.status == "in_progress"
    assert await tokens(redis, api) == [b.wake_token]  # b still listed: nothing handed
    assert nothing_handed(b)


async def test_a_handed_job_whose_worker_never_starts_it_is_reaped_and_claimed_again(
    redis: Redis, make_store: StoreFactory
) -> None:
    api, a = make_store(lease_ms=1000), make_store(lease_ms=1000)
    await listening(a)
    await idle(a)
    job = await submit(api)
    lost = await handed(a)  # and then the worker is gone: no heartbeat, no commit

    reaped = await api.reap(now_ms=await after_lease(redis, api))

    assert reaped.requeued == [job.id]
    [again] = await api.claim("w2", n=4)
    assert (again.job_id, again.attempt) == (job.id, 2)
    assert not await complete(a, lost)  # the first claim is fenced off
    assert await complete(api, again)
    view = await api.get(job.id, tenant="acme")
    assert view is not None
    assert view.status == "succeeded"
    assert view.attempts == 2


async def test_a_handed_job_can_be_cancelled_and_released(
    redis: Redis, make_store: StoreFactory
) -> None:
    api, a = make_store(max_in_flight=2), make_store(max_in_flight=2)
    await listening(a)
    await idle(a)
    job = await submit(api)
    claim = await handed(a)
    shard = api.shard_of(job.id)

    cancelled = await api.cancel(job.id, tenant="acme")

    assert cancelled is not None
    assert cancelled.status == "cancelled"
    assert await redis.zscore(shard.leases, job.id) is None
    assert await redis.hget(shard.running, "acme") == b"0"
    assert not await complete(a, claim)  # fenced: the cancel stands

    await idle(a)
    second = await submit(api)
    handed_second = await handed(a)
    assert await a.release(handed_second)  # a stopping worker gives it back: queued again
    view = await api.get(second.id, tenant="acme")
    assert view is not None
    assert view.status == "queued"
    assert view.attempts == 0
    assert await redis.hget(shard.running, "acme") == b"0"
    [claim2] = await api.claim("w2", n=4)
    assert (claim2.job_id, claim2.attempt) == (second.id, 1)


async def test_unlist_takes_a_worker_off_every_list_and_waits_for_a_job_already_handed(
    redis: Redis, make_store: StoreFactory
) -> None:
    api, a = make_store(), make_store()
    await listening(a)
    await idle(a)
    job = await submit(api)
    await asyncio.sleep(0)  # the message is on its way, not yet read

    await a.unlist(wait_s=2.0)

    [claim] = a.take_handed()
    assert claim.job_id == job.id
    await idle(a)  # claims after unlist no longer list it
    assert await idle_list(redis, api) == []
    other = await submit(api)
    assert nothing_handed(a)
    view = await api.get(other.id, tenant="acme")
    assert view is not None
    assert view.status == "queued"


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
    store = make_store()
    await listening(store)
    await idle(store)
    [before] = await idle_list(redis, store)
    await idle(store)
    assert await idle_list(redis, store) == [before]  # fresh: no command spent on it

    monkeypatch.setattr(claiming_module, "WAKE_RENEW_S", 0.0)
    await clock_past(redis, int(before.split()[1]))  # a renewal stamps a later ms
    await idle(store)
    [after] = await idle_list(redis, store)
    assert after != before
    assert token(after) == store.wake_token
    assert int(after.split()[1]) > int(before.split()[1])

    await store.aclose()
    assert await idle_list(redis, store) == []


async def test_a_lone_worker_is_listed_and_the_api_skips_an_empty_list_for_a_while(
    redis: Redis, make_store: StoreFactory
) -> None:
    api, alone = make_store(), make_store()
    await listening(alone)
    await idle(alone)
    assert await tokens(redis, api) == [alone.wake_token]  # alone, and listed all the same

    first = await submit(api)  # handed to it: no wake-up, no claim
    assert (await handed(alone)).job_id == first.id
    assert not api._no_handoff

    queued = await submit(api)  # the list is empty now: queued, the shared channel
    assert await woken(alone) == [True]
    assert api._no_handoff  # no hand-off tried for WAKE_EMPTY_S
    assert [c.job_id for c in await alone.claim("w", n=2, register=True)] == [queued.id]
    assert await tokens(redis, api) == [alone.wake_token]  # a short claim: listed again

    woke = await submit(api)  # within WAKE_EMPTY_S: woken on its own channel, not handed
    assert nothing_handed(alone)
    assert await woken(alone) == [True]
    # A claim that fills every slot it asked for takes it off the list.
    assert [c.job_id for c in await alone.claim("w", n=1, register=True)] == [woke.id]

    busy = await submit(api)  # a wake-up that finds nobody listed: the shared channel
    assert await woken(alone) == [True]
    assert [c.job_id for c in await alone.claim("w", n=4, register=True)] == [busy.id]

    api._no_handoff.clear()  # as WAKE_EMPTY_S later
    last = await submit(api)
    assert (await handed(alone)).job_id == last.id


async def test_in_a_burst_of_submits_only_the_first_few_look_for_a_worker_to_hand_a_job_to(
    redis: Redis, make_store: StoreFactory, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Submits of one API process in flight together to a shard (sent in one round trip)
    would each spend a command on the hand-off before any reply could say the workers are
    taken: only ``HANDOFFS_AT_ONCE`` try it (here one), the rest queue as before, the first
    of them waking one."""
    monkeypatch.setattr(submitting_module, "HANDOFFS_AT_ONCE", 1)
    api, a, b = make_store(), make_store(), make_store()
    await listening(a, b)
    await idle(a)
    await idle(b)

    jobs = await asyncio.gather(*(submit(api, tenant=f"t{i}") for i in range(5)))

    [taken] = await a.handed()
    assert taken.job_id == jobs[0].id
    assert await tokens(redis, api) == [b.wake_token]  # b was woken, not handed a job
    assert await woken(b) == [True]
    assert nothing_handed(b)
    claimed = await b.claim("b", n=10, register=True)
    assert sorted(c.job_id for c in claimed) == sorted(j.id for j in jobs[1:])


async def test_a_handed_claim_carries_what_a_claim_of_the_job_gives(
    redis: Redis, make_store: StoreFactory
) -> None:
    # The hand-off's message holds the claim's values as the API wrote them (the model, the
    # client's trace context, the creation time, a tenant that JSON escapes): the worker
    # gets the Claim a claim of the same job gives.
    api, a = make_store(lease_ms=7000), make_store(lease_ms=7000)
    await listening(a)
    await idle(a)
    trace = TraceContext(
        traceparent="00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01",
        tracestate="vendor=a/b",
    )
    tenant = 'a/"é\\'
    job, _ = await api.submit(tenant=tenant, spec=SPEC, model="sim-model", trace=trace)
    claim = await handed(a)
    assert await a.release(claim)  # back to the queue, attempt given back
    [again] = await api.claim("w2", n=1)

    assert claim == again
    assert (claim.job_id, claim.attempt, claim.tenant, claim.model) == (
        job.id,
        1,
        tenant,
        "sim-model",
    )
    assert claim.trace == trace
