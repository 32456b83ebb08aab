"""Time as the loop sees it: injected, so budgets and deadlines are testable."""

from __future__ import annotations

import time
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Protocol

# Seconds from a monotonic clock: what retries, deadlines and circuit cool-downs read.
Monotonic = Callable[[], float]


class Clock(Protocol):
    def monotonic(self) -> float:
        """Seconds, for durations and deadlines."""
        ...

    def now(self) -> datetime:
        """Wall time (UTC), for timestamps."""
        ...


class SystemClock:
    def monotonic(self) -> float:
        return time.monotonic()

    def now(self) -> datetime:
        return datetime.now(UTC)


def iso(moment: datetime) -> str:
    """ISO 8601 with milliseconds and a Z, as in the envelope spec."""
    return moment.astimezone(UTC).isoformat(timespec="milliseconds")[:-6] + "Z"  # not +00:00
