"""Per-tenant limits inside one API process: how fast a tenant may call, how many waits it
may hold open. One tenant's flood gets 429s; the others do not notice it.

    fairness = Fairness(rate_per_s=50, burst=100, max_waits=100)
    fairness.admit("acme", body_bytes=1_000_000)   # TooManyRequests (429, Retry-After)
    with fairness.waiting("acme"):          # a long-poll or an event stream
        ...

A request costs one token, plus one per ``BYTES_PER_TOKEN`` of body: a 1 MB submission
costs what 65 small requests do, so a tenant cannot flood with large bodies at the
request rate.

Per process: with several API replicas a tenant may use each replica's share (the replicas
sit behind one load balancer, so a tenant's share of the whole is replicas × the rate).
Waits hold no Redis connection (they watch one pub/sub subscription), so the cap protects
the process's memory and sockets, not Redis.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass, field
from typing import Final

from app.core.wire.errors import RepromptError

TOO_MANY_REQUESTS: Final = "too-many-requests"
BYTES_PER_TOKEN: Final = 16_384
# Buckets idle this long are dropped (a full bucket is what a new one would be anyway).
_IDLE_S: Final = 300.0


class TooManyRequests(RepromptError):
    """This tenant is over its request rate or its open waits; retry after ``retry_after_s``."""

    code = TOO_MANY_REQUESTS
    status = 429
    retryable = True

    def __init__(self, detail: str, *, retry_after_s: float) -> None:
        super().__init__(detail)
        self.retry_after_s = retry_after_s


@dataclass(slots=True)
class _Bucket:
    tokens: float
    stamp: float = field(default_factory=time.monotonic)


class Fairness:
    def __init__(self, *, rate_per_s: float, burst: int, max_waits: int) -> None:
        self.rate_per_s = rate_per_s
        self.burst = burst
        self.max_waits = max_waits
        self._buckets: dict[str, _Bucket] = {}
        self._waits: dict[str, int] = {}
        self._swept = time.monotonic()

    def admit(self, tenant: str, *, body_bytes: int = 0) -> None:
        """Take a request's cost from the tenant's bucket (``rate_per_s`` ≤ 0: no limit)."""
        if self.rate_per_s <= 0:
            return
        cost = 1 + max(body_bytes, 0) // BYTES_PER_TOKEN
        now = time.monotonic()
        bucket = self._buckets.get(tenant)
        if bucket is None:
            bucket = self._buckets[tenant] = _Bucket(tokens=float(self.burst), stamp=now)
        else:
            bucket.tokens = min(self.burst, bucket.tokens + (now - bucket.stamp) * self.rate_per_s)
            bucket.stamp = now
        if bucket.tokens < min(cost, self.burst):
            wait_s = (min(cost, self.burst) - bucket.tokens) / self.rate_per_s
            raise TooManyRequests(
                f"more than {self.rate_per_s:g} requests per second (bursts of {self.burst}; "
                f"a request counts once more per {BYTES_PER_TOKEN // 1024} KiB of body); "
                "slow down",
                retry_after_s=max(1.0, math.ceil(wait_s)),
            )
        bucket.tokens -= cost
        if now - self._swept > _IDLE_S:
            self._sweep(now)

    def waiting(self, tenant: str) -> Waiting:
        """Hold one of the tenant's open waits (long-poll, event stream) for the block."""
        return Waiting(self._waits, tenant, self.max_waits)

    def _sweep(self, now: float) -> None:
        self._swept = now
        for tenant, bucket in list(self._buckets.items()):
            if now - bucket.stamp > _IDLE_S:
                del self._buckets[tenant]


class Waiting:
    """``Fairness.waiting``'s block: 429 on entry when the tenant holds its most open waits.
    (A class, not a generator: every long-poll enters one.)"""

    __slots__ = ("_most", "_tenant", "_waits")

    def __init__(self, waits: dict[str, int], tenant: str, most: int) -> None:
        self._waits = waits
        self._tenant = tenant
        self._most = most

    def __enter__(self) -> None:
        held = self._waits.get(self._tenant, 0)
        if self._most > 0 and held >= self._most:
            raise TooManyRequests(
                f"{held} long-polls or event streams of yours are open on this server, the "
                "most it holds for one caller; close some or wait with shorter waitMs",
                retry_after_s=5.0,
            )
        self._waits[self._tenant] = held + 1

    def __exit__(self, *exc_info: object) -> None:
        left = self._waits.get(self._tenant, 1) - 1
        if left > 0:
            self._waits[self._tenant] = left
        else:
            self._waits.pop(self._tenant, None)
