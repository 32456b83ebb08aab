"""Every Redis key reprompt uses, built in this one module.

Jobs are spread over ``shards`` (``REPROMPT_SHARDS``, default 1). Each shard's keys share
one hash tag, so on Redis Cluster a shard lives in one slot and every Lua script, which
only ever touches one shard, stays legal; different shards land on different slots,
spread over the slot space so any number of masters shares them::

    keys = Keys("rp", shards=4)
    shard = keys.shard(2)
    shard.job("job_01j…")          # rp:{s2-…}:job:job_01j…  hash: the whole job
    shard.tenant_queue("acme")     # rp:{s2-…}:q:acme        list: acme's queued job ids
    shard.ring                     # rp:{s2-…}:ring          list: tenants with queued jobs
    shard.leases                   # rp:{s2-…}:leases        zset: running id → lease end (ms)
    shard.running                  # rp:{s2-…}:running       hash: tenant → running jobs (capped)
    shard.actions                  # rp:{s2-…}:actions       zset: requires_action id → expiry (ms)
    shard.outbox                   # rp:{s2-…}:outbox        zset: "<id> <event>" → due (ms)
    shard.idle                     # rp:{s2-…}:idle          list: "<token> <ms>", hungry workers
    shard.tenant_index("acme")     # rp:{s2-…}:t:acme        zset: acme's ids by created ms
    shard.tenant_bytes("acme", w)  # rp:{s2-…}:b:acme:<w>    counter: bytes submitted in window w
    shard.idempotency("acme", k)   # rp:{s2-…}:idem:acme:<sha256(k)>   "<id> <body sha256>"
    keys.channel("work")           # rp:work                 pub/sub: a job was queued on shard n
    keys.channel("outbox")         # rp:outbox               pub/sub: a callback is due (job id)
    keys.wake_channel(token)       # rp:work:<token>         pub/sub: one worker's own wake-ups
    keys.console_session(d)        # rp:console:session:<d>  a sign-in (d: sha256 of its token)
    keys.console_signins(d)        # rp:console:signins:<d>  sign-ins this minute (d: of address)
    keys.rate("acme")              # rp:rate:acme            string: acme's request bucket (GCRA)
    keys.waits("acme")             # rp:waits:acme           zset: acme's open waits → lease end

A callback delivery's state is a field of its job's hash (``cb:<event>``), so it lives and
expires with the job. The Lua library ``lua/outbox.lua`` derives the outbox key and channel
from a job key (``job_prefix`` minus ``job:`` plus ``outbox``; the prefix plus
``:outbox``): keep the layout here and there in step (``tests/store/test_outbox.py``).

A job id carries its shard's number (``app.store.ids``), so any process finds a job's keys
from its id alone; the Idempotency-Key picks the shard of the job it creates, so a replay
lands where the first job is. The shard count may grow, never shrink: ids keep naming
their shard.
"""

from __future__ import annotations

import hashlib
import re
from functools import cache
from typing import Final

from redis.crc import REDIS_CLUSTER_HASH_SLOTS, key_slot

PREFIX_PATTERN: Final = re.compile(r"^[A-Za-z0-9_-]{1,32}$")
MAX_SHARDS: Final = 256


@cache
def shard_tag(index: int) -> str:
    """The hash tag of shard ``index``: slots of the first n shards spread over the space.

    Shard i aims at slot ``v(i) × 16384`` where v is the van der Corput sequence (0, 1/2,
    1/4, 3/4, …), so every prefix of the shard list is spread evenly across the masters of
    any cluster, whatever the shard count.
    """
    if not 0 <= index < MAX_SHARDS:
        raise ValueError(f"shard index must be 0..{MAX_SHARDS - 1}")
    fraction, denominator, n = 0.0, 1.0, index
    while n:
        denominator *= 2
        fraction += (n % 2) / denominator
        n //= 2
    target = int(fraction * REDIS_CLUSTER_HASH_SLOTS)
    best, best_distance = "", REDIS_CLUSTER_HASH_SLOTS
    for attempt in range(20_000):
        tag = f"s{index}-{attempt}"
        distance = abs(key_slot(tag.encode()) - target)
        if distance < best_distance:
            best, best_distance = tag, distance
            if distance <= 16:
                break
    return best


class ShardKeys:
    """The keys of one shard."""

    __slots__ = (
        "actions",
        "base",
        "idle",
        "index",
        "job_prefix",
        "leases",
        "outbox",
        "ring",
        "running",
        "tag",
    )

    def __init__(self, prefix: str, index: int) -> None:
        self.index = index
        self.tag = shard_tag(index)
        self.base = f"{prefix}:{{{self.tag}}}:"
        self.job_prefix = f"{self.base}job:"
        self.ring = f"{self.base}ring"
        self.leases = f"{self.base}leases"
        self.running = f"{self.base}running"
        self.actions = f"{self.base}actions"
        self.outbox = f"{self.base}outbox"  # callback deliveries by due time (lua/outbox.lua)
        # Workers with free slots that found this shard's queues empty, woken one at a time
        # by a submit (lua/submit.lua, lua/claim.lua).
        self.idle = f"{self.base}idle"

    def job(self, job_id: str) -> str:
        return self.job_prefix + job_id

    def tenant_queue(self, tenant: str) -> str:
        return f"{self.base}q:{tenant}"

    @property
    def queue_prefix(self) -> str:
        return f"{self.base}q:"

    def tenant_index(self, tenant: str) -> str:
        return f"{self.base}t:{tenant}"

    def tenant_bytes(self, tenant: str, window: int) -> str:
        return f"{self.base}b:{tenant}:{window}"

    def idempotency(self, tenant: str, key: str) -> str:
        # Hashed: the client's key may be long or hold anything; the digest has a fixed shape.
        return f"{self.base}idem:{tenant}:{idempotency_digest(key)}"


class Keys:
    """The key layout for one ``prefix`` (``REPROMPT_KEY_PREFIX``, default ``rp``)."""

    __slots__ = ("prefix", "shards")

    def __init__(self, prefix: str = "rp", *, shards: int = 1) -> None:
        if not PREFIX_PATTERN.match(prefix):
            raise ValueError(f"key prefix must match {PREFIX_PATTERN.pattern}, got {prefix!r}")
        if not 1 <= shards <= MAX_SHARDS:
            raise ValueError(f"shards must be 1..{MAX_SHARDS}")
        self.prefix = prefix
        self.shards = shards

    def shard(self, index: int) -> ShardKeys:
        return _shard_keys(self.prefix, index)

    def all_shards(self) -> list[ShardKeys]:
        return [self.shard(i) for i in range(self.shards)]

    def channel(self, name: str) -> str:
        """A pub/sub channel: ``work`` (a job was queued: the shard), ``done`` (a job ended:
        its id), ``events`` (a job has a new event: its id), ``cancel`` (a running job was
        cancelled: its id), ``outbox`` (a callback of a job is due: its id)."""
        return f"{self.prefix}:{name}"

    def wake_channel(self, token: str) -> str:
        """One worker's own channel: a submit that finds it idle wakes it alone (the shard)."""
        return f"{self.prefix}:work:{token}"

    # -- the per-tenant quotas every API replica shares (app/store/quotas.py) -----------
    # One key each, outside the shards (no script touches a job with them); each expires.

    def rate(self, tenant: str) -> str:
        return f"{self.prefix}:rate:{tenant}"

    def waits(self, tenant: str) -> str:
        return f"{self.prefix}:waits:{tenant}"

    def shard_for(self, tenant: str, idempotency_key: str | None, fallback: int) -> int:
        """Where a new job goes: the Idempotency-Key's shard (so a replay finds the first
        job), else ``fallback`` (spread by the caller)."""
        if idempotency_key is None:
            return fallback % self.shards
        digest = hashlib.sha256(f"{tenant}\0{idempotency_key}".encode()).digest()
        return int.from_bytes(digest[:4], "big") % self.shards

    # The console's (#32): sign-in sessions and sign-in attempts, by a digest (never the
    # session token or the client address itself).
    def console_session(self, digest: str) -> str:
        return f"{self.prefix}:console:session:{digest}"

    def console_signins(self, digest: str) -> str:
        return f"{self.prefix}:console:signins:{digest}"


# -- Batches (#30): one hash tag per batch, so each batch's keys share a cluster slot ----


class BatchKeys:
    """The keys of one batch (``{prefix}:{b:<id>}:…``) and the batches' shared ones."""

    __slots__ = ("base", "batch_id", "prefix")

    def __init__(self, prefix: str, batch_id: str) -> None:
        self.prefix = prefix
        self.batch_id = batch_id
        self.base = f"{prefix}:{{b:{batch_id}}}:"

    @property
    def meta(self) -> str:
        return self.base + "meta"

    @property
    def items(self) -> str:
        """index → the item as submitted (customId, input, override)."""
        return self.base + "items"

    @property
    def ids(self) -> str:
        """customId → index."""
        return self.base + "ids"

    @property
    def answers(self) -> str:
        """index → JSON array of the answers its rounds brought."""
        return self.base + "answers"

    @property
    def tags(self) -> str:
        """index → the last round whose line for the item was taken in."""
        return self.base + "tags"

    @property
    def errors(self) -> str:
        """index → provider errors on its lines so far."""
        return self.base + "errors"

    @property
    def results(self) -> str:
        """index → the item's final result line."""
        return self.base + "results"

    @property
    def lease(self) -> str:
        return self.base + "lease"

    def all(self) -> tuple[str, ...]:
        return (
            self.meta,
            self.items,
            self.ids,
            self.answers,
            self.tags,
            self.errors,
            self.results,
            self.lease,
        )

    @staticmethod
    def due(prefix: str) -> str:
        """Batches with a step to take, scored by when (ms)."""
        return f"{prefix}:batches:due"

    @staticmethod
    def open_of(prefix: str, tenant: str) -> str:
        """A tenant's batches that have not ended."""
        return f"{prefix}:batches:open:{tenant}"

    @staticmethod
    def listing(prefix: str, tenant: str) -> str:
        """A tenant's batches, scored by creation time."""
        return f"{prefix}:batches:tenant:{tenant}"

    @staticmethod
    def idempotency(prefix: str, tenant: str, key: str) -> str:
        return f"{prefix}:batches:idem:{tenant}:{idempotency_digest(key)}"

    @staticmethod
    def callback_shard(prefix: str) -> ShardKeys:
        """Where a batch's callback delivery lives: shard 0, as a small hash at
        ``job(<batch id>)`` (tenant, callback, ``cb:<event>``) beside that shard's outbox,
        so the outbox's scripts lease and record it as they do a job's."""
        return _shard_keys(prefix, 0)


def idempotency_digest(key: str) -> str:
    return hashlib.sha256(key.encode()).hexdigest()


@cache
def _shard_keys(prefix: str, index: int) -> ShardKeys:
    return ShardKeys(prefix, index)
