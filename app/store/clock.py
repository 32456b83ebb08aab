"""An estimate of the Redis server's clock, kept by the API process off the job path.

Leases are reckoned on Redis's clock (``TIME`` in the scripts, lua/common.lua). A submit
that hands its job to an idle worker leases the job in its own script (lua/submit.lua);
with this estimate passed as an argument that script runs no ``TIME``: one command less
per handed job.

    clock = ServerClock(sample)       # sample: one TIME round trip
    now = clock.now_ms()              # Redis-now (ms), or None: the script reads TIME
    await clock.aclose()

The estimate is one ``TIME`` reading and the local *monotonic* clock since: the API host's
wall clock (however skewed, or stepped) plays no part. A reading is taken in the
background: the first time it is asked for, then whenever it is older than ``refresh_s``
(at most one in flight). Each reading is the best (shortest round trip) of ``samples``
``TIME`` calls; one whose round trip took more than ``max_rtt_ms`` is not used.

Skew: Redis read its clock somewhere within the round trip, so the estimate is taken at
the round trip's *start* (the reading plus the monotonic time since the request was sent):
it is never behind Redis's clock, and ahead of it by at most the round trip (bounded by
``max_rtt_ms``) plus the drift between the two clocks since the reading. A handed job's
first lease is therefore never shorter than ``lease_ms``, and longer by at most that
error; the worker's first heartbeat (every ``heartbeat_ms`` ≤ ``lease_ms`` / 3) puts the
lease back on ``TIME``. A reading older than ``max_age_s`` (refreshes failing, or no
submit for a while) is not used: the script reads ``TIME``, as without an estimate.

The drift between the API host's monotonic clock and Redis's clock over ``max_age_s`` is
parts per million of it (an NTP slew is at most 500 ppm: 30 ms a minute). A step of
Redis's clock moves the estimate only at the next refresh, but moves every lease at once
anyway (the reaper reads ``TIME``).
"""

from __future__ import annotations

import asyncio
import contextlib
import math
import time
from collections.abc import Awaitable, Callable
from typing import Final

from redis.exceptions import RedisError

# One TIME reading: (seconds, microseconds), as redis-py's ``time()`` returns it.
Sample = Callable[[], Awaitable[tuple[int, int]]]

REFRESH_S: Final = 30.0
MAX_AGE_S: Final = 60.0
MAX_RTT_MS: Final = 25.0
SAMPLES: Final = 3
# A reading that does not answer within this long is given up (the pool's socket timeout
# could be 30 s); the next submit after ``refresh_s`` tries again.
_SAMPLE_TIMEOUT_S: Final = 2.0


class ServerClock:
    """Redis-now in ms, estimated from a ``TIME`` reading and the local monotonic clock."""

    def __init__(
        self,
        sample: Sample,
        *,
        refresh_s: float = REFRESH_S,
        max_age_s: float = MAX_AGE_S,
        max_rtt_ms: float = MAX_RTT_MS,
        samples: int = SAMPLES,
        monotonic: Callable[[], float] = time.monotonic,
    ) -> None:
        if not 0 < refresh_s <= max_age_s or max_rtt_ms <= 0 or samples < 1:
            raise ValueError("need 0 < refresh_s <= max_age_s, max_rtt_ms > 0, samples >= 1")
        self._sample = sample
        self._refresh_s = refresh_s
        self._max_age_s = max_age_s
        self._max_rtt_s = max_rtt_ms / 1000
        self._samples = samples
        self._monotonic = monotonic
        # Redis's clock (ms) at local monotonic time ``_at`` (s); ``None``: no reading.
        self._server_ms: float | None = None
        self._at = 0.0
        self._tried = -math.inf  # when the last refresh started (monotonic s)
        self._task: asyncio.Task[bool] | None = None

    def now_ms(self) -> int | None:
        """The estimate of Redis-now (ms, rounded up), or ``None`` when there is no reading
        recent enough (one is then taken in the background: call from a running loop)."""
        now = self._monotonic()
        if now - self._tried >= self._refresh_s and not self._refreshing():
            self._tried = now
            self._task = asyncio.get_running_loop().create_task(self.refresh(), name="redis-clock")
        if self._server_ms is None or now - self._at > self._max_age_s:
            return None
        return math.ceil(self._server_ms + (now - self._at) * 1000)

    def _refreshing(self) -> bool:
        """A refresh is under way (on this loop: one left on a loop that is gone never ends)."""
        task = self._task
        return (
            task is not None and not task.done() and task.get_loop() is asyncio.get_running_loop()
        )

    @property
    def age_s(self) -> float | None:
        """How old the reading in use is (s), or ``None`` without one."""
        return None if self._server_ms is None else self._monotonic() - self._at

    async def refresh(self) -> bool:
        """Take a reading now; whether it was good enough to use (the last good one stays
        in use, within ``max_age_s``, when it was not)."""
        best: tuple[float, float, float] | None = None  # rtt, server ms, sent at
        try:
            async with asyncio.timeout(_SAMPLE_TIMEOUT_S):
                for _ in range(self._samples):
                    sent = self._monotonic()
                    seconds, micros = await self._sample()
                    rtt = self._monotonic() - sent
                    if best is None or rtt < best[0]:
                        best = (rtt, int(seconds) * 1000 + int(micros) / 1000, sent)
        except (TimeoutError, RedisError, OSError, ValueError, TypeError):
            pass  # what was read so far counts (the task must not end with an error)
        if best is None or best[0] > self._max_rtt_s:
            return False
        _, self._server_ms, self._at = best
        return True

    async def aclose(self) -> None:
        task, self._task = self._task, None
        if task is not None and not task.done():
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task
