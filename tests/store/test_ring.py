"""The ring and the wake-ups after issue 11's cut in Redis commands per job.

The ring holds exactly the tenants with queued jobs, each once (no LPOS at submit); a
claim pops the tenants it serves and puts back those with jobs left, serving one job per
tenant per round exactly as a job-by-job round robin would; a submit behind queued jobs
wakes no worker, and a worker still never sleeps through queued work.
"""

from __future__ import annotations

import asyncio
import random
from pathlib import Path
from typing import Any, cast

import pytest
from redis.asyncio import Redis

from app.worker import Worker
from app.worker import claims as claims_module
from reprompt_sim.server import SimConfig, serve_in_background
from tests.both import Store
from tests.store.conftest import StoreFactory
from tests.store.helpers import LONG_S, SPEC, after_lease, claim, complete, submit
from tests.waiting import until
from tests.worker.harness import (
    TENANT,
    Gate,
    eventually,
    job,
    running,
    sim_router,
    worker_settings,
)


async def ring_of(redis: Redis, store: Store) -> list[str]:
    members = await redis.lrange(store.keys.shard(0).ring, 0, -1)
    return [t.decode() if isinstance(t, bytes) else t for t in members]


async def queued_tenants(redis: Redis, store: Store, tenants: list[str]) -> set[str]:
    shard = store.keys.shard(0)
    return {t for t in tenants if await redis.llen(shard.tenant_queue(t)) > 0}


class RoundRobin:
    """The reference: a ring of tenants served one job at a time, a tenant going to the
    ring's end after each job while it has more (what the claim script did with one LMOVE
    and one LPOP per job)."""

    def __init__(self) -> None:
        self.queues: dict[str, list[str]] = {}
        self.ring: list[str] = []

    def submit(self, tenant: str, job_id: str) -> None:
        queue = self.queues.setdefault(tenant, [])
        queue.append(job_id)
        if len(queue) == 1:
            self.ring.append(tenant)

    def claim(self, n: int) -> list[str]:
        picked: list[str] = []
        while len(picked) < n and self.ring:
            tenant = self.ring.pop(0)
            picked.append(self.queues[tenant].pop(0))
            if self.queues[tenant]:
                self.ring.append(tenant)
        return picked


@pytest.mark.parametrize("seed", [1, 2, 3])
async def test_batch_claims_serve_tenants_exactly_as_a_job_by_job_round_robin(
    redis: Redis, store: Store, seed: int
) -> None:
    rng = random.Random(seed)
    tenants = ["a", "b", "c", "d", "e"]
    model = RoundRobin()
    for _ in range(12):
        for _ in range(rng.randint(0, 8)):
            tenant = rng.choice(tenants[: rng.randint(1, len(tenants))])
            model.submit(tenant, (await submit(store, tenant=tenant)).id)
        n = rng.choice([1, 2, 3, 5, 8, 13])

        got = [c.job_id for c in await store.claim("w1", n=n)]

        assert got == model.claim(n)
        assert await ring_of(redis, store) == model.ring  # the same turn for the next claim


async def test_the_ring_holds_exactly_the_tenants_with_queued_jobs_through_every_move(
    redis: Redis, make_store: StoreFactory
) -> None:
    store = make_store(lease_ms=60_000)
    rng = random.Random(7)
    tenants = ["a", "b", "c"]
    queued: dict[str, str] = {}  # job id → tenant, while queued
    held = []
    for _ in range(150):
        move = rng.choice(["submit", "submit", "claim", "cancel", "release", "reap"])
        if move == "submit":
            tenant = rng.choice(tenants)
            queued[(await submit(store, tenant=tenant)).id] = tenant
        elif move == "claim":
            for c in await store.claim("w1", n=rng.randint(1, 4)):
                queued.pop(c.job_id)
                held.append(c)
        elif move == "cancel" and queued:
            job_id = rng.choice(sorted(queued))
            await store.cancel(job_id, tenant=queued.pop(job_id))
        elif move == "release" and held:
            c = held.pop(rng.randrange(len(held)))
            assert await store.release(c)
            queued[c.job_id] = c.tenant
        elif move == "reap" and held:
            reaped = await store.reap(now_ms=await after_lease(redis, store))
            assert sorted(reaped.requeued + reaped.failed) == sorted(c.job_id for c in held)
            queued.update({c.job_id: c.tenant for c in held if c.job_id in reaped.requeued})
            held = []

        ring = await ring_of(redis, store)
        assert len(ring) == len(set(ring)), f"a tenant twice after {move}: {ring}"
        assert set(ring) == await queued_tenants(redis, store, tenants) == set(queued.values())


async def test_a_ring_written_before_the_invariant_heals_at_the_next_claims(
    redis: Redis, store: Store
) -> None:
    job = await submit(store, tenant="a")
    ring = store.keys.shard(0).ring
    await redis.rpush(ring, "gone", "a")  # a tenant with no jobs, and "a" twice

    (got,) = await store.claim("w1", n=5)

    assert got.job_id == job.id
    assert await ring_of(redis, store) == []
    again = await submit(store, tenant="a")
    assert await ring_of(redis, store) == ["a"]
    assert (await claim(store)).job_id == again.id


async def test_a_submit_behind_queued_jobs_wakes_no_worker(redis: Redis, store: Store) -> None:
    pubsub = redis.pubsub()
    await pubsub.subscribe(store.channels["work"])
    try:
        for tenant in ("a", "a", "a", "b", "a", "b"):
            await submit(store, tenant=tenant)
        await claim_all(store)
        await submit(store, tenant="a")  # the queue is empty again: a wake-up

        wakes = await messages(redis, pubsub, store.channels["work"])
    finally:
        await cast(Any, pubsub).aclose()  # untyped in redis-py

    assert wakes == ["0", "0", "0"]  # a's first job, b's first job, a's after the claims


async def claim_all(store: Store) -> None:
    while await store.claim("w1", n=100):
        pass


async def messages(redis: Redis, pubsub: Any, channel: str) -> list[str]:
    """Every message published on ``channel`` so far: read up to a mark published now, which
    comes after them all (one server delivers a channel's messages in order)."""
    mark = "end of the test"
    await redis.publish(channel, mark)
    got: list[str] = []
    while True:
        message = await pubsub.get_message(ignore_subscribe_messages=True, timeout=None)
        if message is not None:
            if message["data"].decode() == mark:
                return got
            got.append(message["data"].decode())


async def test_a_wake_up_between_an_empty_claim_and_the_wait_is_not_lost(store: Store) -> None:
    assert await store.wait_for_work(timeout_s=0.05) is None  # subscribed
    heard: list[str] = []
    store.hub.listen(store.channels["work"], lambda key, payload: heard.append(key))
    assert await store.claim("w1", n=4) == []
    await submit(store)  # published before the worker waits again
    await until(lambda: heard, what="the wake-up to be heard")

    shard = await store.wait_for_work(timeout_s=LONG_S)  # at once: waited out, it would hang

    assert store.woken
    assert shard == 0
    assert len(await store.claim("w1", n=4)) == 1
    assert await store.wait_for_work(timeout_s=0.3) is None
    assert not store.woken  # the claim took it: no wake, the wait ran out


async def test_the_tenant_index_expiry_moves_once_per_window_not_per_submit(
    redis: Redis, make_store: StoreFactory
) -> None:
    store = make_store(retention_s=3600, max_job_s=600)
    index = store.keys.shard(0).tenant_index("acme")
    first = await submit(store)
    ttl = await redis.ttl(index)
    assert 3600 + 600 < ttl <= 3600 + 600 + 3600  # to the window's end, then a job's life
    await redis.persist(index)

    second = await submit(store)

    assert await redis.ttl(index) == -1  # not touched by a submit in the same window
    members = cast(list[bytes], await redis.zrange(index, 0, -1))
    (mark,) = [m for m in members if not m.startswith(b"job_01")]
    await redis.zrem(index, mark)  # as when a new window begins
    third = await submit(store)
    assert await redis.ttl(index) > 3600 + 600
    page, _ = await store.list(tenant="acme")
    assert [j.id for j in page] == [third.id, second.id, first.id]  # the mark is no job


async def test_submit_with_wait_ms_answers_the_finished_job(store: Store) -> None:
    async def work() -> None:
        claims = await until(lambda: store.claim("w1"), what="the job to be claimed")
        assert await complete(store, claims[0])

    worker = asyncio.create_task(work())
    view, created = await store.submit(tenant="acme", spec=SPEC, wait_ms=5000)
    await worker

    assert created
    assert view.status == "succeeded"
    still, created = await store.submit(tenant="acme", spec=SPEC, wait_ms=200)
    assert created
    assert still.status == "queued"  # nobody claims it: as it is after the wait


async def test_submit_with_wait_ms_on_a_replayed_key_answers_the_first_job(
    store: Store,
) -> None:
    first, _ = await store.submit(tenant="acme", spec=SPEC, idempotency_key="k")
    assert await complete(store, await claim(store))

    again, created = await store.submit(tenant="acme", spec=SPEC, idempotency_key="k", wait_ms=5000)

    assert not created
    assert again.id == first.id
    assert again.status == "succeeded"


async def test_jobs_queued_while_every_slot_is_busy_start_as_slots_free_without_a_wake_up(
    store: Store, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # An idle worker looks at the queue only when woken (no once-a-second look here), so a
    # job stranded without a wake-up would never finish.
    monkeypatch.setattr(claims_module, "IDLE_WAIT_S", 60.0)
    with serve_in_background(SimConfig(seed=5)) as sim:
        async with sim_router(sim, tmp_path) as router:
            gate = Gate(router, hold=lambda n: n <= 2)
            worker = Worker(store, gate, worker_settings(worker_concurrency=2))
            async with running(worker):
                held = [await submit(store, tenant=TENANT, **job()) for _ in range(2)]
                await eventually(_both_held(gate), what="both jobs held in their model call")
                behind = [await submit(store, tenant=TENANT, **job()) for _ in range(6)]
                gate.open()

                ends = [
                    await store.wait(j.id, tenant=TENANT, wait_ms=20_000) for j in held + behind
                ]

    assert [view.status if view else None for view in ends] == ["succeeded"] * 8


def _both_held(gate: Gate) -> Any:
    async def check() -> bool:
        return gate.waiting == 2

    return check
