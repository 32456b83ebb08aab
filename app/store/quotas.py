"""Per-tenant quotas every API replica shares: a request rate and a count of open waits.

Counted in Redis, so a tenant given N requests per second gets N in total however many API
processes serve it, not N per process::

    quotas = Quotas(store.scripts, store.keys, now_ms=store.server_now_ms, keep_ms=120_000)
    wait_ms = await quotas.take("acme", cost=1, rate_per_s=50, burst=100)  # 0: admitted
    held = await quotas.hold("acme", "w-1", most=100, lease_ms=90_000)     # 0: held
    await quotas.renew("acme", "w-1", lease_ms=90_000)   # a wait longer than its lease
    await quotas.release("acme", "w-1")

Cost: one script a request (``lua/rate.lua``: ``GET``, ``SET``; one key a tenant, expiring
when its bucket is full again), one more to open a wait (``lua/hold.lua``: ``ZCARD``,
``ZADD``, ``PEXPIRE``) and one command to close it (``ZREM``): one sorted set a tenant,
each wait leased, so the waits of a process that died drop out when their leases end.
Both run on Redis's clock (``now_ms``: the store's estimate of it, else the script reads
``TIME``): the replicas' own clocks play no part. ``keep_ms``: the longest lease a wait
gets; a tenant's set of waits outlives its last change by that long.
"""

from __future__ import annotations

from collections.abc import Callable

from app.store.errors import edge
from app.store.keys import Keys
from app.store.protocol import HOLD, RATE, HoldArgs, HoldKeys, RateArgs, RateKeys
from app.store.scripts import Scripts


class Quotas:
    """The shared counters (``scripts`` and ``keys`` are the store's)."""

    __slots__ = ("_keep_ms", "_keys", "_now_ms", "_scripts")

    def __init__(
        self, scripts: Scripts, keys: Keys, *, now_ms: Callable[[], int | None], keep_ms: int
    ) -> None:
        self._scripts = scripts
        self._keys = keys
        self._now_ms = now_ms
        self._keep_ms = keep_ms

    def _now(self) -> int | str:
        now = self._now_ms()
        return "" if now is None else now

    @edge
    async def take(self, tenant: str, *, cost: int, rate_per_s: float, burst: int) -> int:
        """Take ``cost`` tokens from the tenant's bucket: 0, or the ms until it could."""
        reply = await self._scripts.run(
            RATE,
            RateKeys(bucket=self._keys.rate(tenant)),
            RateArgs(interval_ms=1000.0 / rate_per_s, burst=burst, cost=cost, now=self._now()),
        )
        return int(reply)

    @edge
    async def hold(self, tenant: str, wait_id: str, *, most: int, lease_ms: int) -> int:
        """Open a wait for ``lease_ms``: 0, or how many the tenant holds (``most`` or more)."""
        reply = await self._scripts.run(
            HOLD,
            HoldKeys(waits=self._keys.waits(tenant)),
            HoldArgs(
                id=wait_id,
                most=most,
                lease_ms=lease_ms,
                keep_ms=max(self._keep_ms, lease_ms),
                renew="",
                now=self._now(),
            ),
        )
        return int(reply)

    @edge
    async def renew(self, tenant: str, wait_id: str, *, lease_ms: int) -> bool:
        """Extend an open wait's lease; False when it had already ended."""
        reply = await self._scripts.run(
            HOLD,
            HoldKeys(waits=self._keys.waits(tenant)),
            HoldArgs(
                id=wait_id,
                most=0,
                lease_ms=lease_ms,
                keep_ms=max(self._keep_ms, lease_ms),
                renew="1",
                now=self._now(),
            ),
        )
        return int(reply) == 0

    @edge
    async def release(self, tenant: str, wait_id: str) -> None:
        """Close a wait."""
        await self._scripts.call("ZREM", self._keys.waits(tenant), wait_id)
