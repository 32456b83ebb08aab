"""Time as the loop sees it: injected, so budgets and deadlines are testable."""

from __future__ import annotations

import time
from datetime import UTC, datetime
from typing import Protocol


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
    return (
        moment.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%S.") + f"{moment.microsecond // 1000:03d}Z"
    )
