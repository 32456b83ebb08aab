"""The workers' lane: a Redis client of their own for claims, heartbeats and reaps.

A worker holding thousands of jobs sends writes and commits in bursts larger than its
pool; on the lane, the calls that keep its leases never queue behind them.
"""

from __future__ import annotations

from typing import Any

from app.store.connection import RedisClient, Role, StoreOptions
from app.store.scripts import Scripts


class OnLane(Role):
    """The base of ``Leases``' parts. ``lane``: owned and closed by the caller; None: the
    role's own client."""

    def __init__(
        self,
        redis: RedisClient,
        options: StoreOptions | None = None,
        *,
        lane: RedisClient | None = None,
        **fields: Any,
    ) -> None:
        super().__init__(redis, options, **fields)
        self._lane = redis if lane is None else lane
        # The lane's scripts, auto-pipelined on the lane's client; the role's without one.
        self._own_lane = None if lane is None else Scripts(lane)
        self._lane_scripts = self.scripts if self._own_lane is None else self._own_lane

    async def aclose(self) -> None:
        await super().aclose()
        if self._own_lane is not None:
            await self._own_lane.aclose()
