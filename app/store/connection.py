"""What both store roles share: the Redis client, the key layout, the Lua scripts, options,
and the process's one pub/sub subscription.

    redis = connect(url)                        # one pool per process and role
    redis = connect(url, cluster=True)          # Redis Cluster: shards spread over masters
    options = StoreOptions(prefix="rp", lease_ms=30_000, shards=4)
    jobs, leases = JobStore(redis, options), Leases(redis, options)
    ...
    await jobs.aclose()                         # stops the pub/sub task (not the client)
"""

from __future__ import annotations

import inspect
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, ClassVar, Final

from redis.asyncio import BlockingConnectionPool, Redis
from redis.asyncio.cluster import RedisCluster
from redis.asyncio.retry import Retry
from redis.backoff import NoBackoff

from app.core.wire.base import compact_json
from app.core.wire.envelope import Envelope
from app.core.wire.spec import CALLBACK_EVENTS
from app.store.hub import Hub
from app.store.ids import is_job_id, shard_of
from app.store.keys import Keys, ShardKeys
from app.store.outbox import Outbox
from app.store.packing import use_hiredis
from app.store.records import JobView, job_view
from app.store.scripts import Scripts

CHANNELS: Final = ("work", "done", "events", "cancel", "outbox")
# A worker waiting for work is on each shard's idle list, and a submit hands one of them
# its job, claimed, or wakes one, on its own channel (``Keys.wake_channel``; lua/submit.lua,
# lua/claim.lua). The worker renews
# its entry every WAKE_RENEW_S (it claims at least once a second while it waits); a submit
# drops an entry older than WAKE_STALE_MS as a worker that stopped claiming.
WAKE_RENEW_S: Final = 10.0
WAKE_STALE_MS: Final = 30_000
# An API process whose submit found jobs queued on a shard or nobody on its idle list
# tries no hand-off there for WAKE_EMPTY_S (it still wakes one listed worker). Short: under
# load the hand-off is the cheaper way (no claim, no wake-up), to come back to as soon as
# the queued jobs are claimed; a look that fails costs one or two commands.
WAKE_EMPTY_S: Final = 0.05
# A worker is listed once per free slot, up to HANDOFF_SLOTS copies of its entry per shard
# (lua/claim.lua): each hand-off takes one and the job's commit puts it back, so that many
# jobs at most are handed to it at once (and stranded, should it hang).
HANDOFF_SLOTS: Final = 64
# How many submits of one API process in flight to a shard at once try a hand-off: the
# rest of a burst (sent in one round trip, before any reply could say that the listed
# workers are taken) is queued, to be claimed in batches (lua/submit.lua).
HANDOFFS_AT_ONCE: Final = 8
# Each publish wakes every process subscribed to its channel: a role subscribes only to the
# channels it waits on (``Role.HEARS``), so a job's end does not wake the workers nor its
# queueing the API. ``done``/``events``: long-polls and event streams (``JobStore``);
# ``work``/``cancel``/``outbox``: idle workers, cancelled runs, callbacks (``Leases``).
# A finished job's view travels in its ``done`` message (a long-poll answers without a
# read) when its parts add up to at most this many bytes: every API process hears it.
DONE_VIEW_MAX_BYTES: Final = 16_384
# The job hash's fields a view is built from (``app.store.records.job_view``): not the
# spec, nor the events (read by ``JobStore.events`` alone; a long job has many).
VIEW_FIELDS: Final = (
    "id",
    "tenant",
    "status",
    "created_ms",
    "started_ms",
    "finished_ms",
    "attempts",
    "result",
    "turns",
    "history",
    "transcript",
    "metadata",
    "model",
    "idem",
    "action",
    "pauses",
    "callback",
    *(f"cb:{event}" for event in CALLBACK_EVENTS),  # its deliveries (lua/outbox.lua)
)

RedisClient = Redis | RedisCluster


@dataclass(frozen=True, slots=True)
class StoreOptions:
    prefix: str = "rp"
    shards: int = 1
    lease_ms: int = 30_000
    max_attempts: int = 3
    retention_s: int = 604_800
    idempotency_ttl_s: int = 86_400
    max_queued: int = 10_000  # per tenant, per shard
    max_tenant_bytes: int = 0  # per tenant, shard and window (retention); 0: no cap
    max_in_flight: int = 0  # running jobs per tenant, per shard; 0: no cap
    max_job_s: int = 3_600  # how long a job can run at most (its deadline cap)
    callback_window_s: int = 86_400  # how long a callback delivery is retried

    def __post_init__(self) -> None:
        if (
            self.lease_ms <= 0
            or self.max_attempts < 1
            or self.retention_s < 1
            or self.idempotency_ttl_s < 1
        ):
            raise ValueError("lease_ms, max_attempts, retention_s, idempotency_ttl_s must be > 0")


def connect(
    url: str,
    *,
    cluster: bool = False,
    max_connections: int = 200,
    socket_timeout_s: float = 30.0,
    queue_s: float | None = None,
) -> RedisClient:
    """The Redis client (and pool) of one process role. Close it with ``aclose()``.

    No call holds a connection while it waits (waits go through one pub/sub subscription),
    so the pool is sized for concurrent commands, not for waiting clients. A command that
    finds every connection busy fails at once (``StoreUnavailable``), or with ``queue_s``
    waits up to that long for one: a worker holding thousands of jobs sends bursts of
    writes and commits far larger than any pool (not on a cluster: its pools cannot wait).
    Commands are encoded by hiredis (``app.store.packing``). A command is sent once: a
    lost connection fails it (whether it ran is unknown), it is not sent again (a script
    that ran twice could queue a job twice).
    """
    options: dict[str, Any] = {
        "socket_timeout": socket_timeout_s,
        "socket_connect_timeout": 5.0,
        "socket_keepalive": True,
        "health_check_interval": 30,
        "max_connections": max_connections,
    }
    if cluster:
        return use_hiredis(RedisCluster.from_url(url, **options))
    options["retry"] = Retry(NoBackoff(), 0)
    if queue_s is not None:
        pool = BlockingConnectionPool.from_url(url, timeout=queue_s, **options)
        return use_hiredis(Redis.from_pool(pool))
    return use_hiredis(Redis.from_url(url, **options))


class Role:
    """The base of ``JobStore`` (API side) and ``Leases`` (worker side).

    ``redis`` is injected and owned by the caller (who closes it); the role owns its pub/sub
    subscription (``aclose()``).
    """

    # The channels (of ``CHANNELS``) this role waits on; a class with several roles (tests'
    # ``Store``) hears them all.
    HEARS: ClassVar[tuple[str, ...]] = ()

    def __init__(
        self, redis: RedisClient, options: StoreOptions | None = None, **fields: Any
    ) -> None:
        self.options = options or StoreOptions(**fields)
        self._redis = redis
        self.keys = Keys(self.options.prefix, shards=self.options.shards)
        # Script calls and job reads, auto-pipelined (not on a cluster).
        self.scripts = Scripts(redis)
        self._queued_result = Envelope.in_progress().model_dump_json()
        self.channels = {name: self.keys.channel(name) for name in CHANNELS}
        heard = [self.channels[name] for name in self.hears()]
        self.hub = Hub(_pubsub_client(redis), [*heard, *self._own_channels()])
        self.outbox = Outbox(
            self.scripts,
            self.keys,
            self.hub,
            channel=self.channels["outbox"],
            window_s=self.options.callback_window_s,
        )

    @classmethod
    def hears(cls) -> tuple[str, ...]:
        """``HEARS`` of every class of the role, in ``CHANNELS`` order."""
        wanted = {name for klass in cls.__mro__ for name in vars(klass).get("HEARS", ())}
        return tuple(name for name in CHANNELS if name in wanted)

    def _own_channels(self) -> list[str]:
        """Channels of this role object alone, beside the shared ones (``HEARS``)."""
        return []

    @property
    def exact_publish(self) -> bool:
        """Whether PUBLISH counts every subscriber it reached: on a cluster it counts only
        the node's it ran on (the message still reaches every node)."""
        return not isinstance(self._redis, RedisCluster)

    async def aclose(self) -> None:
        await self.hub.close()
        await self.scripts.aclose()

    def shard_of(self, job_id: str) -> ShardKeys:
        return self.keys.shard(shard_of(job_id))

    async def _read(self, job_ids: Sequence[str]) -> list[JobView | None]:
        """Each job as stored, in one round trip: every field a view shows, not the spec
        (a job's input can be a megabyte, and no answer includes it)."""
        valid = [job_id for job_id in job_ids if is_job_id(job_id)]
        raws: dict[str, Any] = {}
        if len(valid) == 1:
            key = self.shard_of(valid[0]).job(valid[0])
            raws[valid[0]] = await self.scripts.call("HMGET", key, *VIEW_FIELDS)
        elif valid:
            async with self._redis.pipeline(transaction=False) as pipe:
                for job_id in valid:
                    pipe.hmget(self.shard_of(job_id).job(job_id), VIEW_FIELDS)
                for job_id, raw in zip(valid, await pipe.execute(), strict=True):
                    raws[job_id] = raw
        return [
            job_view(dict(zip(VIEW_FIELDS, raws[j], strict=True))) if j in raws else None
            for j in job_ids
        ]

    def _block_s(self, wanted_s: float) -> float:
        """``wanted_s``, cut below the pool's socket timeout so a block never trips it."""
        timeout = _socket_timeout(self._redis)
        if timeout:
            return max(0.001, min(wanted_s, timeout * 0.8))
        return wanted_s


def _pubsub_client(redis: RedisClient) -> Redis:
    """A plain client for pub/sub. On a cluster, messages published on any node reach
    subscribers on every node, so one node's connection hears them all: the node the URL
    names (a new client has not discovered the others yet)."""
    if isinstance(redis, RedisCluster):
        startup = list(redis.nodes_manager.startup_nodes.values())
        node = redis.get_default_node() or (redis.get_nodes() or startup)[0]
        kwargs = dict(getattr(redis, "connection_kwargs", {}))
        kwargs.pop("max_connections", None)
        return use_hiredis(Redis(host=node.host, port=int(node.port), **_plain(kwargs)))
    return redis


def _plain(kwargs: dict[str, Any]) -> dict[str, Any]:
    allowed = set(inspect.signature(Redis.__init__).parameters) - {"self", "host", "port"}
    return {k: v for k, v in kwargs.items() if k in allowed}


def _socket_timeout(redis: RedisClient) -> float | None:
    """The read timeout of the client's connections (redis-py 8 defaults it to 5 s)."""
    pool = getattr(redis, "connection_pool", None)
    options = getattr(pool, "connection_kwargs", None) or getattr(redis, "connection_kwargs", {})
    if "socket_timeout" in options:
        timeout = options["socket_timeout"]
    else:
        # Not given: the default of whichever class in the connection's MRO declares it.
        timeout = None
        for klass in getattr(getattr(pool, "connection_class", None), "__mro__", ()):
            parameter = inspect.signature(klass.__init__).parameters.get("socket_timeout")
            if parameter is not None:
                timeout = parameter.default
                break
    return float(timeout) if isinstance(timeout, int | float) and timeout > 0 else None


dumps: Final = compact_json
