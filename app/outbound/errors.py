"""The outbound guard's errors, part of ``app.core.wire.errors``' tree::

    RepromptError
    └── OutboundError                     a call a tenant aimed (tool, validator, callback)
        ├── OutboundRefused   422 invalid-input        the guard said no; nothing was sent
        └── OutboundFailed    502 event-*              sent (or tried), and it went wrong
              reason "timeout"      event-timeout           retryable
              reason "unavailable"  event-unavailable       connection, DNS, 5xx, 429
              reason "http_error"   event-rejected          any other non-2xx
              reason "redirect"     event-rejected          a 3xx: never followed
              reason "too_large"    event-invalid-response  past a byte cap

``detail`` is for operators and names the host, never a header value. Text a model or a
tenant may read is built by the caller from ``reason``, ``status`` and ``host``.
"""

from __future__ import annotations

from typing import Final, Literal

from app.core.wire import codes
from app.core.wire.errors import RepromptError

Reason = Literal["timeout", "unavailable", "http_error", "redirect", "too_large"]

_CODES: Final[dict[Reason, str]] = {
    "timeout": codes.EVENT_TIMEOUT,
    "unavailable": codes.EVENT_UNAVAILABLE,
    "http_error": codes.EVENT_REJECTED,
    "redirect": codes.EVENT_REJECTED,
    "too_large": codes.EVENT_INVALID_RESPONSE,
}
_STATUSES: Final[dict[Reason, int]] = {"timeout": 504, "unavailable": 503}


class OutboundError(RepromptError):
    """Base of the outbound guard's errors."""


class OutboundRefused(OutboundError):
    """The guard refused the URL or where it resolves: no connection was made."""

    code = codes.INVALID_INPUT
    status = 422


class OutboundFailed(OutboundError):
    """The call was made (or tried) and did not give a usable 2xx answer.

    ``retryable`` says whether trying again later may help (a callback outbox retries
    those); ``status`` is the receiver's HTTP status when it sent one; ``attempts`` and
    ``elapsed_ms`` are what the whole call cost, transport retries included; ``excerpt`` is
    the start of an error reply, scrubbed of header and secret values.
    """

    def __init__(
        self,
        detail: str,
        *,
        reason: Reason,
        retryable: bool,
        host: str = "",
        status: int | None = None,
        retry_after_s: float | None = None,
        excerpt: str = "",
    ) -> None:
        super().__init__(detail)
        self.reason: Reason = reason
        self.retryable = retryable
        self.host = host
        self.http_status = status
        self.retry_after_s = retry_after_s
        self.excerpt = excerpt
        self.code = _CODES[reason]
        self.status = _STATUSES.get(reason, 502)
        self.attempts = 1
        self.elapsed_ms = 0

    def __repr__(self) -> str:
        return (
            f"OutboundFailed(reason={self.reason!r}, retryable={self.retryable}, "
            f"host={self.host!r}, status={self.http_status!r})"
        )
