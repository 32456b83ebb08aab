"""The store's errors (part of ``app.core.wire.errors``' tree) and the edge that maps redis-py's
transport failures to ``StoreUnavailable``::

    InvalidInput
    └── IdempotencyConflict   422 invalid-input   same Idempotency-Key, different body
    RepromptError
    ├── QueueFull             429 queue-full      the tenant's queue is full; Retry-After
    ├── TenantQuota           429 quota-exceeded  the tenant stored its bytes' worth; Retry-After
    ├── NotWaiting            409 conflict        tool outputs for a job not waiting for them
    ├── NoDelivery            409 conflict        redeliver a callback the job has not sent yet
    ├── StoreUnavailable      503 store-unavailable  Redis did not answer; retry after 5 s
    └── StoreFull             503 store-full      Redis is at its maxmemory; retry after 30 s
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Coroutine
from typing import Any, ParamSpec, TypeVar

from redis.exceptions import (
    ClusterDownError,
    OutOfMemoryError,
    RedisClusterException,
    ResponseError,
    TryAgainError,
)
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import TimeoutError as RedisTimeoutError

from app.core.wire.errors import InvalidInput, RepromptError

STORE_UNAVAILABLE = "store-unavailable"
STORE_FULL = "store-full"
QUEUE_FULL = "queue-full"
QUOTA_EXCEEDED = "quota-exceeded"
CONFLICT = "conflict"


class StoreUnavailable(RepromptError):
    """Redis did not answer (connection refused, reset or timed out). Retry later."""

    code = STORE_UNAVAILABLE
    status = 503
    retryable = True
    retry_after_s = 5.0


class StoreFull(RepromptError):
    """Redis refused a write: it holds its ``maxmemory`` (and evicts nothing, as it must).
    Finished jobs expiring make room; retry later."""

    code = STORE_FULL
    status = 503
    retryable = True
    retry_after_s = 30.0


class IdempotencyConflict(InvalidInput):
    """The ``Idempotency-Key`` was already used by this tenant with a different body."""

    def __init__(self, detail: str | None = None) -> None:
        super().__init__(
            detail
            or "this Idempotency-Key was already used with a different request body; "
            "use a new key for a new job",
            field="Idempotency-Key",
        )


class QueueFull(RepromptError):
    """The tenant has ``max_queued`` jobs waiting; retry after ``retry_after_s``."""

    code = QUEUE_FULL
    status = 429
    retryable = True

    def __init__(self, depth: int, *, retry_after_s: float = 5.0) -> None:
        super().__init__(
            f"you have {depth} jobs waiting, the most this service queues for one caller; "
            "retry when some have started"
        )
        self.depth = depth
        self.retry_after_s = retry_after_s


class TenantQuota(RepromptError):
    """The tenant submitted ``cap`` bytes of jobs within the retention window."""

    code = QUOTA_EXCEEDED
    status = 429
    retryable = True

    def __init__(self, used: int, cap: int, *, retry_after_s: float = 60.0) -> None:
        super().__init__(
            f"your jobs stored here add up to {used} bytes; this service keeps at most {cap} "
            "per caller within its retention window"
        )
        self.retry_after_s = retry_after_s


class NotWaiting(RepromptError):
    """Tool outputs for a job that is not waiting for them: already answered with other
    outputs, never paused, past the pause's ``expiresAt``, or over."""

    code = CONFLICT
    status = 409
    retryable = False

    def __init__(self, status: str, *, expired: bool = False) -> None:
        if expired:
            super().__init__(
                "the wait for these tool outputs ended at requiredAction.expiresAt; the job "
                "goes on without them (as its onToolTimeout says)"
            )
            self.job_status = status
            return
        super().__init__(
            f"the job is {status}, not waiting for tool outputs"
            + (
                " (these calls were answered already, with other outputs)"
                if status in ("queued", "in_progress", "requires_action")
                else ""
            )
        )
        self.job_status = status


class NoDelivery(RepromptError):
    """A redelivery asked of a job with no callback delivery yet: no callback, or none of
    its events has happened."""

    code = CONFLICT
    status = 409
    retryable = False

    def __init__(self, has_callback: bool) -> None:
        super().__init__(
            "the job has no callback delivery to send again yet: none of its callback's "
            "events has happened"
            if has_callback
            else "the job has no callback"
        )


# What redis-py raises when Redis does not answer. ``RedisClusterException`` (not a
# ``RedisError``) is what a cluster client raises when no node answers its discovery or no
# node serves a slot; a cross-slot command would raise it too, but every script of the
# store touches one shard's slot.
UNREACHABLE = (
    RedisConnectionError,
    RedisTimeoutError,
    ClusterDownError,
    TryAgainError,
    RedisClusterException,
)

_P = ParamSpec("_P")
_T = TypeVar("_T")


def edge(
    method: Callable[_P, Coroutine[Any, Any, _T]],
) -> Callable[_P, Coroutine[Any, Any, _T]]:
    """Map redis-py's transport failures to ``StoreUnavailable`` here, at the edge."""

    @functools.wraps(method)
    async def mapped(*args: _P.args, **kwargs: _P.kwargs) -> _T:
        try:
            return await method(*args, **kwargs)
        except UNREACHABLE as exc:
            raise StoreUnavailable(f"Redis is not reachable ({type(exc).__name__})") from exc
        except ResponseError as exc:
            # A script's write refused for memory arrives as "Error running script ...: OOM".
            if isinstance(exc, OutOfMemoryError) or "OOM command not allowed" in str(exc):
                raise StoreFull(
                    "the job store is full (Redis is at its maxmemory); retry later"
                ) from exc
            raise

    return mapped
