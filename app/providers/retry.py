"""Transport retries inside one model call: tenacity, wrapped once, here and nowhere else.

Only transient provider errors are retried (``ProviderError.retryable``: timeout, rate
limit, unavailable). The wait before attempt ``n + 1`` is spec 001's schedule with
*equal jitter*::

    base = backoff_delay_ms(code, n - 1) / 1000       # 5 s rate limit, 1 s timeout,
                                                      # 10 s unavailable, 2 s other;
                                                      # doubled per attempt, capped at 30 s
    wait = base / 2 + uniform(0, base / 2)            # never shorter than half the schedule
    wait = min(max(wait, retry_after_s), max_wait_s)  # Retry-After honoured, still capped

and no wait may run past the call's deadline: when it would, we give up at once with the
last error. Attempts and total wait land in ``LLMResponse.transport_retries`` /
``transport_wait_ms`` on success and on the raised ``ProviderError`` on failure; they
are never turns. ``set_testing(True)`` keeps all of that but skips the sleeping (the
would-be waits are still recorded and still count against the deadline)::

    retrier = Retrier(on_retry=lambda code, attempt, wait_s: ...)
    deadline = Deadline(request.timeout_s)
    value, tally = await retrier.run(send, policy=RetryPolicy(max_attempts=3),
                                     deadline=deadline, timeout_s=60.0)
"""

from __future__ import annotations

import asyncio
import logging
import random
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Final, Generic, Literal, TypeVar

import tenacity

from app.core.turn.clock import Monotonic
from app.core.wire.codes import MAX_BACKOFF_MS, backoff_delay_ms
from app.core.wire.errors import ProviderError

T = TypeVar("T")
Sleep = Callable[[float], Awaitable[None]]
# (error code, 1-based number of the attempt that just failed, seconds until the next one)
OnRetry = Callable[[str, int, float], None]
Jitter = Literal["equal", "none"]

DEFAULT_MAX_ATTEMPTS: Final = 3
MAX_WAIT_S: Final = MAX_BACKOFF_MS / 1000

logger = logging.getLogger(__name__)

_testing = False


def set_testing(testing: bool) -> None:
    """Turn sleeping off (tests): retry decisions, waits and deadlines are computed as usual."""
    global _testing
    _testing = testing


def is_testing() -> bool:
    return _testing


class Deadline:
    """The time one ``complete`` may take, measured from its start; ``None`` is unbounded."""

    def __init__(self, budget_s: float | None, *, clock: Monotonic = time.monotonic) -> None:
        self._clock = clock
        self._start = clock()
        self._budget_s = budget_s
        self._skipped_s = 0.0

    def elapsed(self) -> float:
        return self._clock() - self._start + self._skipped_s

    def remaining(self) -> float | None:
        if self._budget_s is None:
            return None
        return self._budget_s - self.elapsed()

    def cap(self, timeout_s: float) -> float:
        """``timeout_s``, shortened to what is left of the deadline."""
        remaining = self.remaining()
        return timeout_s if remaining is None else min(timeout_s, remaining)

    def skip(self, seconds: float) -> None:
        """Account for a wait that was not slept (testing mode)."""
        self._skipped_s += seconds


@dataclass(frozen=True, slots=True)
class RetryPolicy:
    max_attempts: int = DEFAULT_MAX_ATTEMPTS
    max_wait_s: float = MAX_WAIT_S
    jitter: Jitter = "equal"

    def wait_s(
        self, code: str, failed_attempts: int, retry_after_s: float | None, rng: random.Random
    ) -> float:
        """Seconds to wait after ``failed_attempts`` (>= 1) attempts ended with ``code``."""
        base = backoff_delay_ms(code, failed_attempts - 1) / 1000
        wait = base / 2 + rng.uniform(0, base / 2) if self.jitter == "equal" else base
        if retry_after_s is not None:
            wait = max(wait, retry_after_s)
        return min(wait, self.max_wait_s)


@dataclass(slots=True)
class Tally:
    """What the transport retries of one call cost."""

    retries: int = 0
    wait_s: float = 0.0

    @property
    def wait_ms(self) -> int:
        return round(self.wait_s * 1000)


class Retrier:
    """Runs one provider call with transport retries. Build one per process."""

    def __init__(
        self,
        *,
        sleep: Sleep = asyncio.sleep,
        on_retry: OnRetry | None = None,
        rng: random.Random | None = None,
    ) -> None:
        self._sleep = sleep
        self._hooks: tuple[OnRetry, ...] = () if on_retry is None else (on_retry,)
        self._rng = rng or random.Random()

    async def run(
        self,
        call: Callable[[float], Awaitable[T]],
        *,
        policy: RetryPolicy,
        deadline: Deadline,
        timeout_s: float,
        on_retry: OnRetry | None = None,
    ) -> tuple[T, Tally]:
        """Await ``call(per_attempt_timeout_s)``, retrying transient failures.

        Stops when it succeeds, fails for good, runs out of attempts, or the next wait would
        pass ``deadline``. ``on_retry`` observes this call's retries after the process-wide hook
        (the router's trace span).
        """
        # The first attempt outside tenacity: most calls succeed at once, and building the
        # retry machinery for them cost more than the rest of this function. A transient
        # failure is handed to tenacity as its own first attempt, so waits, counts, hooks
        # and logs are what they would have been.
        try:
            return await call(deadline.cap(timeout_s)), Tally()
        except ProviderError as err:
            return await self.after(
                err, call, policy=policy, deadline=deadline, timeout_s=timeout_s, on_retry=on_retry
            )

    async def after(
        self,
        failed: ProviderError,
        call: Callable[[float], Awaitable[T]],
        *,
        policy: RetryPolicy,
        deadline: Deadline,
        timeout_s: float,
        on_retry: OnRetry | None = None,
    ) -> tuple[T, Tally]:
        """``run`` from a first attempt's failure on; raises ``failed`` when it is not transient.

        For a caller that made the first attempt itself (one coroutine less on the way to the
        model).
        """
        if not _is_transient(failed):
            failed.transport_retries = 0
            failed.transport_wait_ms = 0
            raise failed
        return await self._retry(failed, call, policy, deadline, timeout_s, on_retry)

    async def _retry(
        self,
        failed: ProviderError,
        call: Callable[[float], Awaitable[T]],
        policy: RetryPolicy,
        deadline: Deadline,
        timeout_s: float,
        on_retry: OnRetry | None,
    ) -> tuple[T, Tally]:
        """``run`` after a first attempt that ``failed`` for a transient reason."""
        hooks = self._hooks if on_retry is None else (*self._hooks, on_retry)
        retries = _Retries(
            failed,
            call,
            policy=policy,
            deadline=deadline,
            timeout_s=timeout_s,
            hooks=hooks,
            sleep=self._sleep,
            rng=self._rng,
        )
        return await retries.run()


class _Retries(Generic[T]):
    """One call's transport retries: tenacity's callbacks around one ``Tally``.

    The first attempt already failed (``failed``): tenacity gets it as its own first
    attempt, so waits, counts, hooks and logs are what they would have been.
    """

    def __init__(
        self,
        failed: ProviderError,
        call: Callable[[float], Awaitable[T]],
        *,
        policy: RetryPolicy,
        deadline: Deadline,
        timeout_s: float,
        hooks: tuple[OnRetry, ...],
        sleep: Sleep,
        rng: random.Random,
    ) -> None:
        self._first: ProviderError | None = failed
        self._call = call
        self._policy = policy
        self._deadline = deadline
        self._timeout_s = timeout_s
        self._hooks = hooks
        self._sleep_for = sleep
        self._rng = rng
        self.tally = Tally()

    async def run(self) -> tuple[T, Tally]:
        retrying = tenacity.AsyncRetrying(
            sleep=self._sleep,
            stop=self._stop,
            wait=self._wait,
            retry=tenacity.retry_if_exception(_is_transient),
            before_sleep=self._before_sleep,
            reraise=True,
        )
        try:
            value: T = await retrying(self._attempt)
        except ProviderError as err:
            err.transport_retries = self.tally.retries
            err.transport_wait_ms = self.tally.wait_ms
            raise
        return value, self.tally

    async def _attempt(self) -> T:
        if self._first is not None:
            error, self._first = self._first, None
            raise error
        return await self._call(self._deadline.cap(self._timeout_s))

    def _wait(self, state: tenacity.RetryCallState) -> float:
        err = _error_of(state)
        return self._policy.wait_s(err.code, state.attempt_number, err.retry_after_s, self._rng)

    def _stop(self, state: tenacity.RetryCallState) -> bool:
        if state.attempt_number >= self._policy.max_attempts:
            return True
        remaining = self._deadline.remaining()
        return remaining is not None and state.upcoming_sleep >= remaining

    def _before_sleep(self, state: tenacity.RetryCallState) -> None:
        err = _error_of(state)
        wait_s = state.upcoming_sleep
        self.tally.retries += 1
        self.tally.wait_s += wait_s
        logger.info(
            "transport retry %d for %s/%s after %s: waiting %.3fs",
            state.attempt_number,
            err.provider,
            err.model,
            err.code,
            wait_s,
        )
        for hook in self._hooks:
            try:
                hook(err.code, state.attempt_number, wait_s)
            except Exception:
                # An observer must never turn a recoverable call into a failure.
                logger.exception("on_retry hook failed")

    async def _sleep(self, seconds: float) -> None:
        if _testing:  # the wait still counts against the deadline
            self._deadline.skip(seconds)
        else:
            await self._sleep_for(seconds)


def _is_transient(exc: BaseException) -> bool:
    return isinstance(exc, ProviderError) and exc.retryable


def _error_of(state: tenacity.RetryCallState) -> ProviderError:
    assert state.outcome is not None
    err = state.outcome.exception()
    assert isinstance(err, ProviderError)
    return err
