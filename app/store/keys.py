"""Every Redis key reprompt uses, built in this one module under one hash tag.

All keys share the hash tag ``{jobs}`` so that on Redis Cluster they live in one slot and
the Lua scripts that touch several of them stay legal::

    keys = Keys("rp")
    keys.job("job_01j…")         # rp:{jobs}:job:job_01j…      hash: the job record
    keys.turns("job_01j…")       # rp:{jobs}:turns:job_01j…    list: turn records, in order
    keys.events("job_01j…")      # rp:{jobs}:events:job_01j…   stream: the job's events
    keys.queue                   # rp:{jobs}:queue             list: queued ids, front = next
    keys.leases                  # rp:{jobs}:leases            zset: running id → lease expiry (ms)
    keys.wake                    # rp:{jobs}:wake              list: tokens that wake idle workers
    keys.fence                   # rp:{jobs}:fence             counter: fencing tokens
    keys.tenant("acme")          # rp:{jobs}:tenant:acme       zset (all scores 0): ids by id order
    keys.idempotency("acme", k)  # rp:{jobs}:idem:acme:<sha256(k)>  string: "<id> <body sha256>"
    keys.cancel_channel          # rp:{jobs}:cancel            pub/sub: cancelled running ids

Scripts that discover a job id inside Redis (claim, reap, queue stats) cannot receive that
job's keys up front; they get the prefixes ``job_prefix`` / ``turns_prefix`` /
``events_prefix`` from here and append the id, so the layout is still defined only here.
"""

from __future__ import annotations

import hashlib
import re
from typing import Final

PREFIX_PATTERN: Final = re.compile(r"^[A-Za-z0-9_-]{1,32}$")
HASH_TAG: Final = "{jobs}"


class Keys:
    """The key layout for one ``prefix`` (``REPROMPT_KEY_PREFIX``, default ``rp``)."""

    __slots__ = (
        "base",
        "cancel_channel",
        "events_prefix",
        "fence",
        "job_prefix",
        "leases",
        "queue",
        "turns_prefix",
        "wake",
    )

    def __init__(self, prefix: str = "rp") -> None:
        # A brace in the prefix would move the hash tag and split the keys across slots.
        if not PREFIX_PATTERN.match(prefix):
            raise ValueError(f"key prefix must match {PREFIX_PATTERN.pattern}, got {prefix!r}")
        self.base = f"{prefix}:{HASH_TAG}:"
        self.job_prefix = f"{self.base}job:"
        self.turns_prefix = f"{self.base}turns:"
        self.events_prefix = f"{self.base}events:"
        self.queue = f"{self.base}queue"
        self.leases = f"{self.base}leases"
        self.wake = f"{self.base}wake"
        self.fence = f"{self.base}fence"
        self.cancel_channel = f"{self.base}cancel"

    def job(self, job_id: str) -> str:
        return self.job_prefix + job_id

    def turns(self, job_id: str) -> str:
        return self.turns_prefix + job_id

    def events(self, job_id: str) -> str:
        return self.events_prefix + job_id

    def tenant(self, tenant: str) -> str:
        return f"{self.base}tenant:{tenant}"

    def idempotency(self, tenant: str, key: str) -> str:
        # Hashed: the client's key may be long or hold anything; the digest has a fixed shape.
        digest = hashlib.sha256(key.encode()).hexdigest()
        return f"{self.base}idem:{tenant}:{digest}"
