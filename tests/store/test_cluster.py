"""The store on a real Redis Cluster: three masters on loopback (``LocalCluster``), the real
``JobStore`` and ``Leases`` over ``connect(url, cluster=True)``, twice as many shards as
masters (the documented rule), so every master holds some.

What sharding must not change: every job is claimed exactly once, leases, fencing and the
reaper hold on every shard, Idempotency-Key replays find the first job, listings page
across shards, cancels reach the worker, and long-polls return when the job ends (pub/sub
through one node hears what scripts publish on the others).
"""

from __future__ import annotations

import asyncio
import contextlib
import secrets
from collections import Counter
from collections.abc import AsyncIterator, Callable, Iterator
from datetime import datetime
from pathlib import Path
from typing import Any, cast

import pytest
from redis.asyncio import Redis
from redis.asyncio.cluster import RedisCluster
from redis.crc import key_slot
from redis.exceptions import MovedError

from app.child import free_loopback_port
from app.core.wire import codes
from app.core.wire.envelope import Progress
from app.store import (
    IdempotencyConflict,
    JobStore,
    JobView,
    Leases,
    StoreOptions,
    StoreUnavailable,
    Written,
    connect,
    new_job_id,
    shard_of,
)
from app.store.connection import RedisClient
from app.store.eviction import EvictingRedis, eviction_policy, judge
from app.store.keys import Keys
from app.store.packing import HiredisConnection
from app.worker import Worker
from app.worker import claims as claims_module
from reprompt_sim.server import SimConfig, serve_in_background
from tests.both import Store
from tests.store.cluster import LocalCluster
from tests.store.helpers import LONG_MS, SPEC, SUCCESS, turn
from tests.waiting import until
from tests.worker.harness import TENANT, job, running, sim_router, worker_settings

pytestmark = pytest.mark.slow

MASTERS = 3
SHARDS = 2 * MASTERS

StoreFactory = Callable[..., Store]


@pytest.fixture(scope="session")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalCluster]:
    with LocalCluster(tmp_path_factory.mktemp("cluster"), masters=MASTERS) as cluster:
        yield cluster


@pytest.fixture
async def redis(cluster: LocalCluster) -> AsyncIterator[RedisClient]:
    client = connect(cluster.url, cluster=True)
    yield client
    await client.aclose()


@pytest.fixture
async def nodes(cluster: LocalCluster) -> AsyncIterator[dict[int, Redis]]:
    """A plain client per master: a key asked of a node that does not hold it is MOVED."""
    clients = {port: Redis(host="127.0.0.1", port=port) for port in cluster.ports}
    yield clients
    for client in clients.values():
        await client.aclose()


@pytest.fixture
async def make_store(redis: RedisClient) -> AsyncIterator[StoreFactory]:
    """Stores over the cluster client, on this test's own prefix (the cluster is shared)."""
    prefix = "c" + secrets.token_hex(6)
    made: list[Store] = []

    def make(**options: Any) -> Store:
        made.append(Store(redis, StoreOptions(prefix=prefix, shards=SHARDS, **options)))
        return made[-1]

    yield make
    for store in made:
        await store.aclose()


@pytest.fixture
def store(make_store: StoreFactory) -> Store:
    return make_store()


async def submit(store: JobStore, tenant: str = "acme", **fields: Any) -> JobView:
    job, created = await store.submit(tenant=tenant, spec=SPEC, **fields)
    assert created
    return job


def master_of(cluster: LocalCluster, key: str) -> int:
    return cluster.owner(key_slot(key.encode()))


async def after_lease(redis: RedisClient, store: Store) -> int:
    """A reaper's ``now_ms`` at which every lease taken so far has expired."""
    seconds, micros = await redis.time()
    return int(seconds) * 1000 + int(micros) // 1000 + store.options.lease_ms + 1000


async def test_shards_and_their_jobs_land_on_every_master(
    cluster: LocalCluster, nodes: dict[int, Redis], store: Store
) -> None:
    shard_masters = {master_of(cluster, shard.ring) for shard in store.keys.all_shards()}
    jobs = [await submit(store) for _ in range(2 * SHARDS)]

    by_master: Counter[int] = Counter()
    for view in jobs:
        key = store.shard_of(view.id).job(view.id)
        # The server's slot for the key is the one the store's layout promises.
        assert cluster.cli(cluster.ports[0], "CLUSTER", "KEYSLOT", key).strip() == str(
            key_slot(key.encode())
        )
        master = master_of(cluster, key)
        by_master[master] += 1
        assert await nodes[master].exists(key) == 1
        for other in set(cluster.ports) - {master}:
            with pytest.raises(MovedError):
                await nodes[other].exists(key)

    assert shard_masters == set(cluster.ports)
    assert {shard_of(view.id) for view in jobs} == set(range(SHARDS))
    assert set(by_master) == set(cluster.ports)


async def test_claims_take_shards_in_turn_and_every_job_is_claimed_exactly_once(
    make_store: StoreFactory,
) -> None:
    api = make_store()
    ids = [(await submit(api)).id for _ in range(60)]
    first = make_store()
    in_turn = [(await first.claim("w0"))[0] for _ in range(SHARDS)]

    workers = [make_store() for _ in range(3)]
    claimed = [c.job_id for c in in_turn]

    async def drain(leases: Leases, n: int) -> None:
        while got := await leases.claim(f"w{n}", n=n):
            claimed.extend(c.job_id for c in got)

    await asyncio.gather(*(drain(leases, n) for n, leases in enumerate(workers, 1)))

    # One claim at a time, with every shard holding work: the next claim starts at the
    # next shard, so six claims visit all six.
    assert sorted(shard_of(c.job_id) for c in in_turn) == list(range(SHARDS))
    assert sorted(claimed) == sorted(ids)
    assert await api.queue_stats() == (0, 0.0)


async def test_a_worker_runs_every_job_to_success_and_long_polls_return_when_they_end(
    cluster: LocalCluster, redis: RedisClient, tmp_path: Path
) -> None:
    # The API's pool and the worker's, as in a process (``app.assembly``).
    options = StoreOptions(prefix="c" + secrets.token_hex(6), shards=SHARDS, lease_ms=5000)
    worker_redis = connect(cluster.url, cluster=True)
    jobs, leases = JobStore(redis, options), Leases(worker_redis, options)
    try:
        with serve_in_background(SimConfig(seed=7)) as sim_url:
            async with sim_router(sim_url, tmp_path) as router:
                ids = []
                for i in range(24):
                    view, _ = await jobs.submit(tenant=TENANT, spec=job(name=f"c{i}"))
                    ids.append(view.id)
                # Waits no test outlives: each returns when its job ends, or never.
                polls = [jobs.wait(job_id, tenant=TENANT, wait_ms=LONG_MS) for job_id in ids]
                worker = Worker(leases, router, worker_settings(worker_concurrency=8))
                async with running(worker):
                    views = await asyncio.gather(*polls)
    finally:
        await jobs.aclose()
        await leases.aclose()
        await worker_redis.aclose()

    assert [v.status if v else None for v in views] == ["succeeded"] * len(ids)
    # Every node's connections (the startup node's and those discovered) pack with hiredis.
    nodes = cast(RedisCluster, worker_redis).get_nodes()
    assert len(nodes) == len(cluster.ports)
    assert {node.connection_class for node in nodes} == {HiredisConnection}
    keys = Keys(options.prefix, shards=SHARDS)
    masters = {master_of(cluster, keys.shard(shard_of(i)).job(i)) for i in ids}
    assert masters == set(cluster.ports)
    # Each long-poll returned when its job ended (it had no deadline to return at): the one
    # subscription (to the first node) heard the ends published by scripts on every master.


async def test_expired_leases_on_every_shard_are_requeued_and_the_stale_claims_write_nothing(
    redis: RedisClient, store: Store
) -> None:
    jobs = [await submit(store) for _ in range(SHARDS)]
    stale = await store.claim("zombie", n=SHARDS)
    assert {shard_of(c.job_id) for c in stale} == set(range(SHARDS))

    reaped = await store.reap(now_ms=await after_lease(redis, store))
    fresh = await store.claim("w2", n=SHARDS)

    assert sorted(reaped.requeued) == sorted(view.id for view in jobs)
    assert {c.job_id: c.attempt for c in fresh} == {view.id: 2 for view in jobs}
    for old in stale:
        assert not await store.heartbeat(old.job_id, old.token)
        progress = Progress(phase="turn-done", turn=1)
        assert await store.write(old, progress=progress, turn=turn(1)) is Written.STALE
        written = await store.complete(old, envelope=SUCCESS, history=(), transcript=())
        assert written is Written.STALE
    for new in fresh:
        assert await store.heartbeat(new.job_id, new.token)
        written = await store.complete(new, envelope=SUCCESS, history=(), transcript=())
        assert written is Written.OURS
    for view in jobs:
        done = await store.get(view.id, tenant="acme")
        assert done is not None
        assert (done.status, done.attempts, len(done.turns)) == ("succeeded", 2, 1)


async def test_a_job_lost_max_attempts_times_fails_worker_lost_on_every_shard(
    redis: RedisClient, make_store: StoreFactory
) -> None:
    store = make_store(max_attempts=2)
    jobs = [await submit(store) for _ in range(SHARDS)]
    for _ in range(2):
        assert len(await store.claim("lost", n=SHARDS)) == SHARDS
        reaped = await store.reap(now_ms=await after_lease(redis, store))

    assert reaped.requeued == []
    assert sorted(reaped.failed) == sorted(view.id for view in jobs)
    for view in jobs:
        ended = await store.wait(view.id, tenant="acme", wait_ms=0)
        assert ended is not None
        assert (ended.status, ended.result.error) == ("failed", codes.WORKER_LOST)
    assert await store.claim("w", n=SHARDS) == []


async def test_an_idempotency_key_replay_finds_the_first_job_whichever_master_holds_it(
    cluster: LocalCluster, store: Store
) -> None:
    keys = [f"order-{i}" for i in range(24)]
    firsts = {key: await submit(store, idempotency_key=key) for key in keys}

    replays = await asyncio.gather(
        *(
            store.submit(tenant="acme", spec=SPEC, idempotency_key=key)
            for key in keys
            for _ in range(4)
        )
    )

    masters = {master_of(cluster, store.shard_of(v.id).job(v.id)) for v in firsts.values()}
    assert masters == set(cluster.ports)
    assert all(not created for _, created in replays)
    assert Counter(view.id for view, _ in replays) == Counter(
        {view.id: 4 for view in firsts.values()}
    )
    with pytest.raises(IdempotencyConflict):
        await store.submit(tenant="acme", spec={**SPEC, "task": "other"}, idempotency_key="order-1")


async def test_listing_pages_through_every_shard_newest_first(store: Store) -> None:
    ids = [(await submit(store)).id for _ in range(15)]
    await submit(store, tenant="globex")
    done = await store.claim("w", n=5)
    for claim in done:
        await store.complete(claim, envelope=SUCCESS, history=(), transcript=())

    pages: list[list[str]] = []
    cursor: str | None = None
    while True:
        page, cursor = await store.list(tenant="acme", cursor=cursor, limit=4)
        pages.append([view.id for view in page])
        if cursor is None:
            break
    succeeded, more = await store.list(tenant="acme", status="succeeded", limit=100)

    assert [len(page) for page in pages] == [4, 4, 4, 3]
    assert [job_id for page in pages for job_id in page] == sorted(ids, reverse=True)
    assert more is None
    assert sorted(view.id for view in succeeded) == sorted(
        c.job_id for c in done if c.tenant == "acme"
    )


async def test_cancels_end_queued_and_running_jobs_and_reach_the_worker_from_every_master(
    store: Store, make_store: StoreFactory
) -> None:
    worker = make_store()
    queued = [await submit(store) for _ in range(SHARDS)]
    claims = await worker.claim("w", n=SHARDS)
    waiting = [await submit(store) for _ in range(SHARDS)]
    heard: list[str] = []

    async def listen() -> None:
        async with contextlib.aclosing(worker.cancellations()) as ids:
            async for job_id in ids:
                heard.append(job_id)
                if len(heard) == len(claims):
                    return

    await worker.hub.start()  # subscribed before the cancels are published
    listener = asyncio.create_task(listen())
    cancelled = [await store.cancel(view.id, tenant="acme") for view in queued + waiting]
    await asyncio.wait_for(listener, timeout=10)

    assert [v.status if v else None for v in cancelled] == ["cancelled"] * (2 * SHARDS)
    assert sorted(heard) == sorted(view.id for view in queued)
    for claim in claims:
        assert not await worker.heartbeat(claim.job_id, claim.token)
        written = await worker.complete(claim, envelope=SUCCESS, history=(), transcript=())
        assert not written
    assert await worker.claim("w", n=SHARDS) == []
    assert await store.queue_stats() == (0, 0.0)


async def test_a_submit_on_any_master_wakes_one_of_two_idle_workers(
    redis: RedisClient, make_store: StoreFactory
) -> None:
    api, a, b = make_store(), make_store(), make_store()
    for worker in (a, b):
        assert await worker.claim("w", n=4, register=True) == []  # listed on every shard
    for shard in range(SHARDS):  # PUBLISH's count is this node's only: not trusted here
        assert await redis.llen(api.keys.shard(shard).idle) == 2

    woke = []
    for _ in range(2 * SHARDS):  # the submits go round the shards, twice
        view = await submit(api)
        await asyncio.gather(a.wait_for_work(0.5), b.wait_for_work(0.5))
        woke.append((shard_of(view.id), a.woken, b.woken))
        [claim] = await (a if a.woken else b).claim("w", n=4, register=True)
        assert claim.job_id == view.id

    assert sorted(shard for shard, _, _ in woke) == sorted(list(range(SHARDS)) * 2)
    assert all(ta != tb for _, ta, tb in woke)  # exactly one of the two each time
    assert sum(ta for _, ta, _ in woke) == SHARDS  # and the list turns: each in turn


async def test_a_worker_dead_while_idle_delays_a_job_on_a_cluster_by_one_idle_look_at_most(
    redis: RedisClient, make_store: StoreFactory, tmp_path: Path
) -> None:
    # On a cluster PUBLISH's count cannot tell a dead worker: its fresh registration is
    # trusted, and the job waits for the live worker's next look at the queue.
    api, dead = make_store(), make_store()
    assert await dead.claim("w", n=4, register=True) == []  # first on every idle list
    await dead.hub.close()  # gone, as a killed process; still listed
    live = make_store()
    with serve_in_background(SimConfig(seed=3)) as sim_url:
        async with sim_router(sim_url, tmp_path) as router:
            worker = Worker(live, router, worker_settings(worker_concurrency=4))
            async with running(worker):

                async def listed() -> bool:
                    lengths = [await redis.llen(api.keys.shard(i).idle) for i in range(SHARDS)]
                    return lengths == [2] * SHARDS

                await until(listed, what="both workers listed on every shard")
                # Two jobs on one shard: its first wake-up goes to the dead worker, the
                # next (the list turned) to the live one.
                keys = [k for k in map(str, range(100)) if api.keys.shard_for(TENANT, k, 0) == 1]
                views = []
                for i, key in enumerate(keys[:2]):
                    view, _ = await api.submit(
                        tenant=TENANT, spec=job(name=f"d{i}"), idempotency_key=key
                    )
                    views.append(await api.wait(view.id, tenant=TENANT, wait_ms=10_000))

    for done in views:
        assert done is not None
        assert done.status == "succeeded"
        assert done.started_at is not None
    waited = [_seconds(v.started_at) - _seconds(v.created_at) for v in views if v and v.started_at]
    assert waited[0] <= claims_module.IDLE_WAIT_S + 0.5, waited
    assert waited[1] < 0.5, waited


def _seconds(iso: str) -> float:
    return datetime.fromisoformat(iso.replace("Z", "+00:00")).timestamp()


async def test_a_master_that_may_evict_jobs_is_found_whichever_node_it_is(
    cluster: LocalCluster, redis: RedisClient
) -> None:
    assert await eviction_policy(redis) == "noeviction"
    for port in cluster.ports:
        cluster.cli(port, "CONFIG", "SET", "maxmemory-policy", "allkeys-lru")
        try:
            policy = await eviction_policy(redis)
        finally:
            cluster.cli(port, "CONFIG", "SET", "maxmemory-policy", "noeviction")
        assert policy == "allkeys-lru"
        with pytest.raises(EvictingRedis):
            judge(policy)


async def test_a_hung_master_fails_ping_and_only_its_own_jobs(cluster: LocalCluster) -> None:
    # About 12 s: redis-py's cluster client retries a timed-out command, rediscovering the
    # cluster in between, so each failed call takes about eleven socket timeouts.
    redis = connect(cluster.url, cluster=True, socket_timeout_s=0.5)
    store = Store(redis, StoreOptions(prefix="c" + secrets.token_hex(6), shards=SHARDS))
    hung = cluster.ports[-1]
    try:
        jobs = [await submit(store) for _ in range(SHARDS)]
        on_hung = [v.id for v in jobs if master_of(cluster, store.shard_of(v.id).job(v.id)) == hung]
        elsewhere = [v.id for v in jobs if v.id not in on_hung]
        assert await store.ping()
        with cluster.frozen(hung):
            assert not await store.ping()
            with pytest.raises(StoreUnavailable):
                await store.get(on_hung[0], tenant="acme")
            assert await store.get(elsewhere[0], tenant="acme") is not None
        assert await store.ping()
        assert await store.get(on_hung[0], tenant="acme") is not None
    finally:
        await store.aclose()
        await redis.aclose()


async def test_a_cluster_no_node_of_which_answers_is_unavailable_not_a_crash() -> None:
    port = free_loopback_port()  # nothing listens there
    redis = connect(f"redis://127.0.0.1:{port}/0", cluster=True, socket_timeout_s=0.5)
    store = JobStore(redis, StoreOptions(shards=SHARDS))
    try:
        assert not await store.ping()
        with pytest.raises(StoreUnavailable):
            await store.get(new_job_id(shard=1), tenant="acme")
    finally:
        await store.aclose()
        await redis.aclose()
