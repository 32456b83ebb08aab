"""Per-tenant limits every API replica shares: how fast a tenant may call, how many waits it
may hold open. One tenant's flood gets 429s; the others do not notice it.

    fairness = Fairness(quotas, rate_per_s=50, burst=100, max_waits=100)
    await fairness.admit("acme", body_bytes=1_000_000)   # TooManyRequests (429, Retry-After)
    async with fairness.waiting("acme", for_ms=30_000):  # a long-poll
        ...
    held = await fairness.hold("acme")                   # an event stream: renew while open
    await held.keep(); await held.release()

A request costs one token, plus one per ``BYTES_PER_TOKEN`` of body: a 1 MB submission
costs what 65 small requests do, so a tenant cannot flood with large bodies at the
request rate.

The counts live in Redis (``app.store.quotas``), so N replicas behind a load balancer give a
tenant its rate once, not N times. ``quotas`` None (no API keys: one tenant) is no limit.
"""

from __future__ import annotations

import contextlib
import math
import secrets
import time
from typing import Final

from app.core.wire.errors import RepromptError
from app.store.errors import StoreUnavailable
from app.store.quotas import Quotas

TOO_MANY_REQUESTS: Final = "too-many-requests"
BYTES_PER_TOKEN: Final = 16_384
# A wait's lease past its own length: a process that dies holding waits frees them this late.
WAIT_GRACE_MS: Final = 30_000
# An event stream has no length: it is leased this long and renewed a third of the way in.
STREAM_LEASE_MS: Final = 90_000


class TooManyRequests(RepromptError):
    """This tenant is over its request rate or its open waits; retry after ``retry_after_s``."""

    code = TOO_MANY_REQUESTS
    status = 429
    retryable = True

    def __init__(self, detail: str, *, retry_after_s: float) -> None:
        super().__init__(detail)
        self.retry_after_s = retry_after_s


class Fairness:
    def __init__(
        self, quotas: Quotas | None, *, rate_per_s: float, burst: int, max_waits: int
    ) -> None:
        self.quotas = quotas
        self.rate_per_s = rate_per_s
        self.burst = burst
        self.max_waits = max_waits

    @staticmethod
    def longest_lease_ms(max_wait_ms: int) -> int:
        """The longest lease a wait gets when no wait is longer than ``max_wait_ms``."""
        return max(max_wait_ms, STREAM_LEASE_MS) + WAIT_GRACE_MS

    async def admit(self, tenant: str, *, body_bytes: int = 0) -> None:
        """Take a request's cost from the tenant's bucket (``rate_per_s`` ≤ 0: no limit)."""
        if self.quotas is None or self.rate_per_s <= 0:
            return
        cost = 1 + max(body_bytes, 0) // BYTES_PER_TOKEN
        wait_ms = await self.quotas.take(
            tenant, cost=cost, rate_per_s=self.rate_per_s, burst=self.burst
        )
        if wait_ms > 0:
            raise TooManyRequests(
                f"more than {self.rate_per_s:g} requests per second (bursts of {self.burst}; "
                f"a request counts once more per {BYTES_PER_TOKEN // 1024} KiB of body); "
                "slow down",
                retry_after_s=max(1.0, math.ceil(wait_ms / 1000)),
            )

    async def hold(self, tenant: str, *, for_ms: int = STREAM_LEASE_MS) -> Held:
        """One of the tenant's open waits, leased for ``for_ms`` plus a grace; 429 when it
        holds its most."""
        if self.quotas is None or self.max_waits <= 0:
            return Held(None, tenant, "", 0)
        wait_id = secrets.token_hex(8)
        lease_ms = for_ms + WAIT_GRACE_MS
        held = await self.quotas.hold(tenant, wait_id, most=self.max_waits, lease_ms=lease_ms)
        if held:
            raise TooManyRequests(
                f"{held} long-polls or event streams of yours are open, the most the service "
                "holds for one caller; close some or wait with shorter waitMs",
                retry_after_s=5.0,
            )
        return Held(self.quotas, tenant, wait_id, lease_ms)

    def waiting(self, tenant: str, *, for_ms: int) -> Waiting:
        """``async with``: hold one of the tenant's open waits for the block."""
        return Waiting(self, tenant, for_ms)


class Held:
    """An open wait: ``keep`` renews its lease when a third of it has gone, ``release`` ends it."""

    __slots__ = ("_kept", "_lease_ms", "_quotas", "_tenant", "_wait_id")

    def __init__(self, quotas: Quotas | None, tenant: str, wait_id: str, lease_ms: int) -> None:
        self._quotas = quotas
        self._tenant = tenant
        self._wait_id = wait_id
        self._lease_ms = lease_ms
        self._kept = time.monotonic()

    async def keep(self) -> None:
        if self._quotas is None or (time.monotonic() - self._kept) * 3000 < self._lease_ms:
            return
        self._kept = time.monotonic()
        await self._quotas.renew(self._tenant, self._wait_id, lease_ms=self._lease_ms)

    async def release(self) -> None:
        if self._quotas is not None:
            quotas, self._quotas = self._quotas, None
            # Redis gone now: the wait's lease ends it; the answer already made stands.
            with contextlib.suppress(StoreUnavailable):
                await quotas.release(self._tenant, self._wait_id)


class Waiting:
    """``Fairness.waiting``'s block (a class, not a generator: every long-poll enters one)."""

    __slots__ = ("_fairness", "_for_ms", "_held", "_tenant")

    def __init__(self, fairness: Fairness, tenant: str, for_ms: int) -> None:
        self._fairness = fairness
        self._tenant = tenant
        self._for_ms = for_ms
        self._held: Held | None = None

    async def __aenter__(self) -> None:
        self._held = await self._fairness.hold(self._tenant, for_ms=self._for_ms)

    async def __aexit__(self, *exc_info: object) -> None:
        if self._held is not None:
            await self._held.release()
