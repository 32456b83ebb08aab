"""Circuit breakers, one per (provider, model): stop calling a model that keeps failing.

::

    closed --N consecutive transient failures--> open --cooldown--> half_open
       ^                                           ^                    |
       +--------------- probe succeeds ------------+---- probe fails ---+

Only transient failures count (timeout, unavailable, rate limit: ``ProviderError.retryable``);
any answer from the provider, even a non-retryable error such as a token-limit 400, proves
it is up and closes the circuit. While open, calls fail fast with ``ProviderUnavailable``;
half-open lets exactly one probe through. One ``Circuits`` per event loop (not thread-safe)::

    circuits = Circuits(failure_threshold=5, cooldown_s=30, clock=time.monotonic)
    breaker = circuits.breaker("openai", "gpt-4o-mini")
    if breaker.allow(): ...; breaker.record_success()
    circuits.snapshot()
    # {"openai/gpt-4o-mini": {"state": "closed", "failures": 0, "opened_at": None}}
"""

from __future__ import annotations

import logging
import time
from typing import Final, Literal, TypedDict

from app.core.turn.clock import Monotonic

State = Literal["closed", "open", "half_open"]

DEFAULT_FAILURE_THRESHOLD: Final = 5
DEFAULT_COOLDOWN_S: Final = 30.0

logger = logging.getLogger(__name__)


class CircuitState(TypedDict):
    """One breaker as the API and metrics read it. ``opened_at`` is a reading of the clock."""

    state: State
    failures: int
    opened_at: float | None


class Breaker:
    """The state of one (provider, model)."""

    def __init__(self, key: str, *, failure_threshold: int, cooldown_s: float, clock: Monotonic):
        self.key = key
        self._threshold = failure_threshold
        self._cooldown_s = cooldown_s
        self._clock = clock
        self._state: State = "closed"
        self._failures = 0
        self._opened_at: float | None = None
        self._probing = False

    @property
    def state(self) -> State:
        return self._state

    def allow(self) -> bool:
        """May a call go out now? In half-open, True for the one probe only."""
        if self._state == "closed":
            return True
        if self._state == "open":
            assert self._opened_at is not None
            if self._clock() - self._opened_at < self._cooldown_s:
                return False
            self._state = "half_open"
            logger.info("circuit %s half-open: letting one probe through", self.key)
        if self._probing:
            return False
        self._probing = True
        return True

    def record_success(self) -> None:
        if self._state != "closed":
            logger.info("circuit %s closed", self.key)
        self._state = "closed"
        self._failures = 0
        self._opened_at = None
        self._probing = False

    def record_failure(self) -> None:
        self._failures += 1
        self._probing = False
        if self._state == "half_open" or (
            self._state == "closed" and self._failures >= self._threshold
        ):
            self._state = "open"
            self._opened_at = self._clock()
            logger.warning(
                "circuit %s open after %d consecutive failures; failing fast for %gs",
                self.key,
                self._failures,
                self._cooldown_s,
            )

    def release(self) -> None:
        """The call ended without an answer either way (cancelled): free the probe slot."""
        self._probing = False

    def snapshot(self) -> CircuitState:
        return {"state": self._state, "failures": self._failures, "opened_at": self._opened_at}


class Circuits:
    """All breakers, created on first use."""

    def __init__(
        self,
        *,
        failure_threshold: int = DEFAULT_FAILURE_THRESHOLD,
        cooldown_s: float = DEFAULT_COOLDOWN_S,
        clock: Monotonic = time.monotonic,
    ) -> None:
        if failure_threshold < 1:
            raise ValueError("failure_threshold must be >= 1")
        self._threshold = failure_threshold
        self._cooldown_s = cooldown_s
        self._clock = clock
        self._breakers: dict[str, Breaker] = {}

    @staticmethod
    def key(provider: str, model: str) -> str:
        return f"{provider}/{model}"

    def breaker(self, provider: str, model: str) -> Breaker:
        key = self.key(provider, model)
        if key not in self._breakers:
            self._breakers[key] = Breaker(
                key,
                failure_threshold=self._threshold,
                cooldown_s=self._cooldown_s,
                clock=self._clock,
            )
        return self._breakers[key]

    def snapshot(self) -> dict[str, CircuitState]:
        """Every breaker used so far, keyed ``"provider/model"``."""
        return {key: breaker.snapshot() for key, breaker in sorted(self._breakers.items())}
