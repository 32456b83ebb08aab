"""The guarded HTTP client: the one way the service POSTs where a tenant told it to.

Build one per process, next to the providers' client, and close it on shutdown::

    async with OutboundClient(Guard(policy)) as outbound:
        response = await outbound.post_json(url, body, headers, timeout_s=5.0)
        response.status, response.body, response.attempts

Each call: the URL is checked (``Guard.target``), the host resolved once and every address
checked (``Guard.resolve``), and the connection made to a checked address, with the
``Host`` header, TLS SNI and certificate verification for the name the tenant wrote; the
name is never resolved again (no DNS rebinding). Connections are not kept alive: a pooled
connection belongs to an address, and reusing one for another host name would skip that
host's certificate check. Redirects are errors, never followed. The reply is read up to a
byte cap, the whole call (every attempt, every wait) within ``timeout_s``.

Transport retries (``retries``, default from the policy) on connection errors, timeouts,
408, 429 and 5xx, with exponential backoff, equal jitter and ``Retry-After`` when it fits
in the time left; any other 4xx is final. Every failure is ``OutboundRefused`` (nothing
sent) or ``OutboundFailed``. Header values are never logged nor put in an error: they may
hold secrets, and so may what a receiver echoes back, so they are scrubbed from its text.
"""

from __future__ import annotations

import asyncio
import logging
import random
import ssl
import time
from collections.abc import Awaitable, Callable, Iterable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import UTC, datetime
from http.cookiejar import CookieJar, DefaultCookiePolicy
from types import TracebackType
from typing import Final

import httpx

from app.outbound.errors import OutboundFailed
from app.outbound.guard import Guard, IPAddress, Target
from app.replies import read_capped, retry_after

logger = logging.getLogger(__name__)

Sleep = Callable[[float], Awaitable[None]]

USER_AGENT: Final = "reprompt-outbound"
# A dead address fails fast, so a retry can try the next address within the call's time.
CONNECT_TIMEOUT_S: Final = 3.0
# First wait 0.25 s (0.125-0.25 with jitter), doubled per retry, at most 2 s.
BACKOFF_S: Final = 0.25
MAX_BACKOFF_S: Final = 2.0
# Whatever a caller asks: a receiver that keeps failing gets this many more tries at most.
MAX_RETRIES: Final = 10
# Not worth an attempt: less time than this left after the wait.
MIN_ATTEMPT_S: Final = 0.05
# An error reply is read only for a short excerpt.
ERROR_EXCERPT_BYTES: Final = 1024
EXCERPT_CHARS: Final = 300
REDACTED: Final = "[redacted]"
RETRY_STATUSES: Final = frozenset({408, 429, 500, 502, 503, 504})


@dataclass(frozen=True, slots=True)
class OutboundResponse:
    """A 2xx answer: its status, body (at most the byte cap), and what the call cost."""

    status: int
    body: bytes = field(repr=False)
    elapsed_ms: int
    attempts: int
    content_type: str = ""


class OutboundClient:
    """One ``httpx.AsyncClient`` behind the guard.

    No proxies from the environment, no redirects, no cookies kept, no keep-alive.
    ``verify`` is for tests with their own CA; ``sleep`` and ``rng`` make the waits observable.
    """

    def __init__(
        self,
        guard: Guard,
        *,
        verify: ssl.SSLContext | bool = True,
        max_connections: int = 100,
        sleep: Sleep = asyncio.sleep,
        rng: random.Random | None = None,
    ) -> None:
        self.guard = guard
        self._sleep = sleep
        self._rng = rng or random.Random()
        self._http = httpx.AsyncClient(
            verify=verify,
            trust_env=False,  # a proxy would resolve the name itself, past the guard
            follow_redirects=False,
            # One tenant's receiver must not set a cookie another tenant's request carries.
            cookies=CookieJar(policy=DefaultCookiePolicy(allowed_domains=[])),
            limits=httpx.Limits(max_connections=max_connections, max_keepalive_connections=0),
            timeout=httpx.Timeout(guard.policy.timeout_s),
            headers={"user-agent": USER_AGENT, "accept-encoding": "identity"},
        )

    def __repr__(self) -> str:
        return f"OutboundClient(policy={self.guard.policy!r})"

    async def __aenter__(self) -> OutboundClient:
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.aclose()

    async def aclose(self) -> None:
        await self._http.aclose()

    async def post_json(
        self,
        url: str,
        body: bytes,
        headers: Mapping[str, str] | None = None,
        *,
        timeout_s: float | None = None,
        max_bytes: int | None = None,
        retries: int | None = None,
        redact: Iterable[str] = (),
    ) -> OutboundResponse:
        """POST ``body`` (JSON) to ``url`` through the guard; the 2xx answer, or raise.

        ``timeout_s`` bounds the whole call, retries and waits included, ``max_bytes`` the answer
        (each at most the policy's); ``retries`` the transport retries (at most ``MAX_RETRIES``).
        ``redact`` names more strings (secret values) to keep out of error text.
        """
        policy = self.guard.policy
        call = _Call(
            deadline=time.monotonic() + min(timeout_s or policy.timeout_s, policy.timeout_s),
            max_bytes=min(max_bytes or policy.max_response_bytes, policy.max_response_bytes),
            retries=min(max(0, policy.retries if retries is None else retries), MAX_RETRIES),
            scrub=_scrubber((headers or {}).values(), redact),
        )
        target = self.guard.target(url)
        try:
            response = await self._call(target, body, dict(headers or {}), call)
        except OutboundFailed as failed:
            failed.attempts, failed.elapsed_ms = call.attempts, call.elapsed_ms()
            logger.info(
                "outbound POST to %s failed after %d attempt(s), %d ms: %s",
                target.host,
                call.attempts,
                failed.elapsed_ms,
                failed.reason,
            )
            raise
        logger.debug(
            "outbound POST to %s: %d after %d attempt(s), %d ms",
            target.host,
            response.status,
            response.attempts,
            response.elapsed_ms,
        )
        return response

    async def get(self, url: str, *, timeout_s: float, max_bytes: int) -> OutboundResponse:
        """GET ``url`` through the guard (#34: a chat request's image URL); the 2xx answer
        of at most ``max_bytes`` (the caller's cap, not the policy's), or raise. No
        retries: the caller is waiting."""
        call = _Call(
            deadline=time.monotonic() + min(timeout_s, self.guard.policy.timeout_s),
            max_bytes=max_bytes,
            retries=0,
            scrub=_scrubber((), ()),
        )
        target = self.guard.target(url)
        return await self._call(target, b"", {}, call, method="GET")

    async def _call(
        self,
        target: Target,
        body: bytes,
        headers: dict[str, str],
        call: _Call,
        *,
        method: str = "POST",
    ) -> OutboundResponse:
        limit = self.guard.policy.max_request_bytes
        if len(body) > limit:
            raise OutboundFailed(
                f"the request to {target.host} is {len(body)} bytes, over the cap of {limit}",
                reason="too_large",
                retryable=False,
                host=target.host,
            )
        addresses = await self.guard.resolve(target.host, target.port, timeout_s=call.left())
        while True:
            call.attempts += 1
            # Each retry takes the next checked address: one dead address is not the end.
            address = addresses[(call.attempts - 1) % len(addresses)]
            try:
                status, content, content_type = await self._attempt(
                    target, address, body, headers, call, method
                )
            except OutboundFailed as failed:
                wait = self._wait(failed, call)
                if wait is None:
                    raise
                logger.debug(
                    "outbound retry %d to %s after %s: waiting %.3fs",
                    call.attempts,
                    target.host,
                    failed.reason,
                    wait,
                )
                await self._sleep(wait)
                continue
            return OutboundResponse(status, content, call.elapsed_ms(), call.attempts, content_type)

    async def _attempt(
        self,
        target: Target,
        address: IPAddress,
        body: bytes,
        headers: dict[str, str],
        call: _Call,
        method: str,
    ) -> tuple[int, bytes, str]:
        left = call.left()
        if left <= 0:
            raise _timed_out(target, call)
        request = self._http.build_request(
            method,
            target.url.copy_with(host=str(address)),
            content=body if method == "POST" else None,
            headers=_headers(headers, target),
            timeout=httpx.Timeout(left, connect=min(left, CONNECT_TIMEOUT_S)),
            # The certificate is checked against the name, on a connection to the address.
            extensions={"sni_hostname": target.host} if target.https else {},
        )
        with _mapped_errors(target, call):
            async with asyncio.timeout(left):
                response = await self._http.send(request, stream=True)
                try:
                    return await _answer(response, target, call)
                finally:
                    await response.aclose()

    def _wait(self, failed: OutboundFailed, call: _Call) -> float | None:
        """Seconds to wait before the next attempt, or ``None`` to give up now."""
        if not failed.retryable or call.attempts > call.retries:
            return None
        base: float = BACKOFF_S * 2.0 ** (call.attempts - 1)
        wait = min(base / 2 + self._rng.uniform(0, base / 2), MAX_BACKOFF_S)
        if failed.retry_after_s is not None:
            wait = max(wait, failed.retry_after_s)
        if wait + MIN_ATTEMPT_S >= call.left():
            return None  # Retry-After (or the backoff) does not fit in the time left
        return wait


@dataclass(slots=True)
class _Call:
    """One ``post_json``: its limits and what it has spent."""

    deadline: float
    max_bytes: int
    retries: int
    scrub: Callable[[str], str]
    started: float = field(default_factory=time.monotonic)
    attempts: int = 0

    def left(self) -> float:
        return self.deadline - time.monotonic()

    def elapsed_ms(self) -> int:
        return round((time.monotonic() - self.started) * 1000)


async def _answer(response: httpx.Response, target: Target, call: _Call) -> tuple[int, bytes, str]:
    status = response.status_code
    if 300 <= status < 400:
        raise _redirected(response, target)
    if not 200 <= status < 300:
        text = _text(await _read(response, ERROR_EXCERPT_BYTES, target, cut=True))
        said = call.scrub(_excerpt(text))
        retryable = status in RETRY_STATUSES
        raise OutboundFailed(
            f"{target.host} answered {status}: {said or 'no details'}",
            reason="unavailable" if retryable else "http_error",
            retryable=retryable,
            host=target.host,
            status=status,
            retry_after_s=retry_after_s(response.headers),
            excerpt=said,
        )
    # We asked for identity: a compressed body could be far larger than the bytes we count.
    encoding = response.headers.get("content-encoding", "identity").strip().lower()
    if encoding not in ("", "identity"):
        raise OutboundFailed(
            f"{target.host} answered with content-encoding {encoding!r}; only identity is read",
            reason="http_error",
            retryable=False,
            host=target.host,
            status=status,
        )
    content = await _read(response, call.max_bytes, target)
    return status, content, response.headers.get("content-type", "")


def _redirected(response: httpx.Response, target: Target) -> OutboundFailed:
    location = response.headers.get("location", "")
    try:
        where = response.url.join(location).host if location else ""
    except (httpx.InvalidURL, UnicodeError, ValueError):
        where = ""
    # The request went to an address: a relative Location means the tenant's own host.
    if where and where == response.url.host:
        where = target.host
    return OutboundFailed(
        f"{target.host} answered {response.status_code} with a redirect"
        + (f" to {where}" if where else "")
        + "; redirects are not followed",
        reason="redirect",
        retryable=False,
        host=target.host,
        status=response.status_code,
    )


async def _read(
    response: httpx.Response, limit: int, target: Target, *, cut: bool = False
) -> bytes:
    """At most ``limit`` bytes of the body, raw (never decompressed)."""

    def too_large(seen: str) -> OutboundFailed:
        return _too_large(target, limit, seen)

    return await read_capped(
        response.aiter_raw(), response.headers, limit, too_large=too_large, cut=cut
    )


def _too_large(target: Target, limit: int, seen: str) -> OutboundFailed:
    return OutboundFailed(
        f"{target.host} sent an answer over {limit} bytes ({seen}); it was dropped",
        reason="too_large",
        retryable=False,
        host=target.host,
    )


def _timed_out(target: Target, call: _Call) -> OutboundFailed:
    return OutboundFailed(
        f"{target.host} did not answer in time ({call.elapsed_ms()} ms)",
        reason="timeout",
        retryable=True,
        host=target.host,
    )


@contextmanager
def _mapped_errors(target: Target, call: _Call) -> Iterator[None]:
    """httpx and asyncio failures as ``OutboundFailed``, most specific first.

    The foreign message is not kept: it may name the address we connected to.
    """
    try:
        yield
    except (httpx.TimeoutException, TimeoutError):
        raise _timed_out(target, call) from None
    except httpx.ConnectError as exc:
        tls = _caused_by_tls(exc)
        raise OutboundFailed(
            f"{target.host}: "
            + ("the TLS handshake or certificate check failed" if tls else "could not connect"),
            reason="unavailable",
            retryable=not tls,  # a certificate does not get valid in a second
            host=target.host,
        ) from None
    except httpx.TransportError as exc:
        raise OutboundFailed(
            f"{target.host}: the connection failed ({type(exc).__name__})",
            reason="unavailable",
            retryable=True,
            host=target.host,
        ) from None


def _caused_by_tls(exc: BaseException) -> bool:
    seen: BaseException | None = exc
    for _ in range(8):  # httpx wraps httpcore, which wraps the ssl error
        if seen is None:
            return False
        if isinstance(seen, ssl.SSLError):
            return True
        seen = seen.__cause__ or seen.__context__
    return False


def _headers(headers: Mapping[str, str], target: Target) -> httpx.Headers:
    """The caller's headers with ours on top, case-insensitively.

    The body is JSON, its length is what httpx counts, and ``Host`` names the host the
    tenant wrote.
    """
    merged = httpx.Headers(headers)
    for name in ("content-length", "transfer-encoding", "connection"):
        merged.pop(name, None)
    merged["content-type"] = "application/json"
    merged["host"] = target.host_header
    return merged


def retry_after_s(headers: httpx.Headers, *, now: datetime | None = None) -> float | None:
    """``Retry-After`` in seconds (a number or an HTTP date), or ``None``."""
    return retry_after(headers.get("retry-after"), now or datetime.now(UTC))


def _scrubber(headers: Iterable[str], secrets: Iterable[str]) -> Callable[[str], str]:
    """A function that replaces each secret and header value with ``[redacted]``.

    Longest first. Header values under four characters are left: they would shred the text
    and hide nothing (a known secret is replaced whatever its length).
    """
    values = {v for v in headers if len(v) >= 4} | {v for v in secrets if v}
    ordered = sorted(values, key=len, reverse=True)

    def scrub(text: str) -> str:
        for value in ordered:
            text = text.replace(value, REDACTED)
        return text

    return scrub


def _text(content: bytes) -> str:
    return content.decode("utf-8", errors="replace")


def _excerpt(text: str) -> str:
    text = " ".join(text.split())
    return text if len(text) <= EXCERPT_CHARS else text[:EXCERPT_CHARS] + "…"
