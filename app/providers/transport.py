"""One HTTP exchange with a provider, every failure mapped into ``app.core.errors`` at the edge.

Adapters build the body and read the answer; this module posts it and classifies
whatever went wrong, most specific first (as httpx's ``map_httpcore_exceptions``)::

    httpx connect/read/write/pool timeout, asyncio timeout -> ProviderTimeout
    httpx.UnsupportedProtocol, ProxyError, InvalidURL      -> ProviderConfigError
    any other httpx.TransportError, DecodingError          -> ProviderUnavailable
    408                                                    -> ProviderTimeout
    429                                                    -> ProviderRateLimited + retry_after_s
    5xx, 529 (Anthropic overloaded), 409                   -> ProviderUnavailable + retry_after_s
    400/413/422 saying the context window was exceeded     -> ProviderTokenLimit
    401/403                                                -> ProviderConfigError (credentials)
    404                                                    -> ProviderConfigError (unknown model)
    any other 4xx: our request's fault, retrying won't help -> ProviderConfigError
    2xx whose body is not a JSON object                    -> ProviderUnavailable
    2xx whose body passes ``max_bytes``                    -> ProviderOversized (not retried)

Replies are streamed and read only up to a cap: ``reply_cap(max_output_tokens)`` for an
answer, ``MAX_ERROR_BYTES`` (cut, not refused) for an error's text. Provider text goes into
``detail`` for operators, scrubbed of anything shaped like a key::

    body, headers = await post_json(http, url, headers=h, body=b, timeout_s=5.0, edge=edge,
                                    max_bytes=reply_cap(request.max_output_tokens))
"""

from __future__ import annotations

import asyncio
import json
import logging
import re
import weakref
from collections.abc import AsyncIterable, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from email.utils import parsedate_to_datetime
from typing import Any, Final

import httpx

from app.core.errors import (
    ProviderConfigError,
    ProviderError,
    ProviderOversized,
    ProviderRateLimited,
    ProviderTimeout,
    ProviderTokenLimit,
    ProviderUnavailable,
)
from app.providers.h1 import H1Body, H1Transport
from app.providers.http import _NoCookies

logger = logging.getLogger(__name__)

# Provider messages are for operators; long bodies (HTML error pages) are cut.
MAX_DETAIL_CHARS: Final = 500

# The most a reply may hold: what max_output_tokens tokens can take as JSON text, plus the
# envelope around them, never more than the ceiling. A token is a few bytes of text; JSON
# escapes (\uXXXX for a control or non-ASCII character when the server escapes it) and a
# tool call's arguments encoded twice make it longer, so 64 bytes a token is generous. The
# envelope (ids, usage, finish reasons, a server's extras) fits many times in 256 KiB. At
# the default cap of 32,768 output tokens a reply may be 2.25 MiB.
BYTES_PER_TOKEN: Final = 64
ENVELOPE_BYTES: Final = 256 * 1024
CEILING_BYTES: Final = 16 * 1024 * 1024
# An error reply is read only for its message (cut to MAX_DETAIL_CHARS in the end).
MAX_ERROR_BYTES: Final = 64 * 1024
REDACTED: Final = "[redacted]"

# Shapes of API keys and bearer tokens that providers sometimes echo back in errors
# ("Incorrect API key provided: sk-abc***xyz"). Model ids never match these.
_KEY_PATTERNS: Final = (
    re.compile(r"\b(?:sk|gsk|xai|pk|rk)[-_][A-Za-z0-9_\-*.]{6,}"),
    re.compile(r"(?i)\bbearer\s+\S+"),
    re.compile(r"(?i)(api[-_ ]?key[\"':=\s]+)[^\s\"',}]{6,}"),
    re.compile(r"\b[A-Za-z0-9]{32,}\b"),
)

# How providers say "the prompt does not fit": OpenAI and Groq (code), vLLM and
# OpenAI (message), llama.cpp server (type and message), Anthropic (message).
_TOKEN_LIMIT_CODES: Final = frozenset(
    {"context_length_exceeded", "exceed_context_size_error", "string_above_max_length"}
)
_TOKEN_LIMIT_TEXT: Final = re.compile(
    r"maximum context length|context[_ ]length[_ ]exceeded|context window"
    r"|exceeds? the (?:available )?context size|prompt is too long|too many input tokens"
    r"|input is too long|reduce the length of the messages",
    re.IGNORECASE,
)
_OVERLOADED: Final = 529


@dataclass(frozen=True, slots=True)
class Edge:
    """Who a request is for, so errors can name it; ``secrets`` are scrubbed from them."""

    provider: str
    model: str
    secrets: tuple[str, ...] = ()

    def scrub(self, text: str) -> str:
        return redact(text, self.secrets)


def redact(text: str, secrets: tuple[str, ...] = ()) -> str:
    """``text`` with the configured keys and anything key-shaped replaced by ``[redacted]``."""
    for secret in secrets:
        if secret:
            text = text.replace(secret, REDACTED)
    for pattern in _KEY_PATTERNS:
        if pattern.groups:
            text = pattern.sub(lambda m: m.group(1) + REDACTED, text)
        else:
            text = pattern.sub(REDACTED, text)
    return text


def reply_cap(max_output_tokens: int) -> int:
    """The largest reply, in bytes, an answer of ``max_output_tokens`` tokens can need."""
    return min(CEILING_BYTES, ENVELOPE_BYTES + BYTES_PER_TOKEN * max(max_output_tokens, 0))


async def post_json(
    http: httpx.AsyncClient,
    url: str,
    *,
    headers: Mapping[str, str],
    body: Mapping[str, Any],
    timeout_s: float,
    edge: Edge,
    max_bytes: int = CEILING_BYTES,
) -> tuple[dict[str, Any], httpx.Headers]:
    """POST ``body`` and return the decoded JSON object and the response headers, or raise.

    A reply over ``max_bytes`` (declared or counted as it streams) is not read further:
    ``ProviderOversized``, and the connection is dropped.
    """
    if timeout_s <= 0:
        raise ProviderTimeout(
            f"{edge.provider}: no time left to call model {edge.model}",
            provider=edge.provider,
            model=edge.model,
        )
    logger.debug("POST %s (provider=%s model=%s)", url, edge.provider, edge.model)
    with map_transport_errors(edge, timeout_s):
        request = _request(http, url, headers, body)
        # httpx's timeouts are per operation; asyncio.timeout bounds the whole exchange.
        async with asyncio.timeout(timeout_s):
            # ``http.send(request, stream=True)``, straight to the client's transport when
            # httpx's layers have nothing to do (``_direct``).
            direct = _direct(http)
            if direct is not None:
                response = await direct.handle_async_request(request)
                response.request = request
            else:
                response = await http.send(request, stream=True)
            try:
                if response.status_code >= 400:
                    cut = await _read(response, MAX_ERROR_BYTES, edge, cut=True)
                    raise classify_status(
                        response.status_code, response.headers, _text(response, cut), edge
                    )
                content = await _read(response, max_bytes, edge)
            finally:
                await response.aclose()
    try:
        decoded = json.loads(content)
    except ValueError:
        decoded = None
    if not isinstance(decoded, dict):
        raise ProviderUnavailable(
            f"{edge.provider} sent a malformed body ({response.status_code}) for model "
            f"{edge.model}: {edge.scrub(_excerpt(_text(response, content[:MAX_ERROR_BYTES])))}",
            provider=edge.provider,
            model=edge.model,
        )
    return decoded, response.headers


def _direct(http: httpx.AsyncClient) -> H1Transport | None:
    """The client's own ``H1Transport`` when ``http.send(request, stream=True)`` may go
    straight to it, httpx's layers around it having nothing to do: no proxy or other
    mount, no event hook, no auth, no redirect followed, no cookies (``make_client``'s).
    Its info line per request is turned off (``app.cli``), and nothing reads
    ``response.elapsed``. None: through ``http.send``."""
    transport = http._transport
    if (
        type(transport) is H1Transport
        and not http._mounts
        and http._auth is None
        and not http.follow_redirects
        and not http.is_closed
        and not http._event_hooks["request"]
        and not http._event_hooks["response"]
        and type(http._cookies) is _NoCookies
    ):
        return transport
    return None


# Per client, the parsed URL and merged headers of each (URL, call headers) it was given:
# what ``AsyncClient.build_request`` would work out again for every call. Bounded: a
# client's are dropped when it has ``_PREPARED_MAX`` (keys rotate, local servers move).
_PREPARED_MAX: Final = 256
_Prepared = dict[tuple[str, tuple[tuple[str, str], ...]], tuple[httpx.URL, httpx.Headers]]
_prepared: weakref.WeakKeyDictionary[httpx.AsyncClient, _Prepared] = weakref.WeakKeyDictionary()


def _request(
    http: httpx.AsyncClient,
    url: str,
    headers: Mapping[str, str],
    body: Mapping[str, Any],
) -> httpx.Request:
    """The request ``http.build_request("POST", url, json=body, headers=headers,
    timeout=None)`` builds, from the URL and headers prepared once (no cookies: the
    provider client keeps none)."""
    prepared = _prepared.get(http)
    if prepared is None:
        prepared = _prepared[http] = {}
    key = (url, tuple(headers.items()))
    found = prepared.get(key)
    if found is None:
        if len(prepared) >= _PREPARED_MAX:
            prepared.clear()
        parsed = httpx.URL(url)
        merged = http.headers.copy()
        merged["host"] = parsed.netloc.decode("ascii")
        merged["content-type"] = "application/json"
        merged.update(headers)
        found = prepared[key] = (parsed, merged)
    parsed, merged = found
    content = json.dumps(body, ensure_ascii=False, separators=(",", ":"), allow_nan=False).encode()
    # No per-operation limits: ``post_json``'s ``asyncio.timeout(timeout_s)`` around the
    # whole exchange bounds each operation first (a per-operation timer of the same
    # length would start later, so it never fires first), and each would cost a timer.
    timeout = {"connect": None, "read": None, "write": None, "pool": None}
    # A stream rather than content: httpx then leaves the headers as they are (with
    # content it would add the length and normalise every header again).
    request = httpx.Request(
        "POST",
        parsed,
        headers=merged,
        stream=httpx.ByteStream(content),
        extensions={"timeout": timeout},
    )
    request.headers["content-length"] = str(len(content))
    request.read()  # the content known, so a stale kept-alive connection can send it again
    return request


async def _read(response: httpx.Response, limit: int, edge: Edge, *, cut: bool = False) -> bytes:
    """The body, at most ``limit`` bytes of it: past that ``ProviderOversized``, or with
    ``cut`` the first ``limit`` bytes. Either way nothing more is read."""
    declared = response.headers.get("content-length", "").strip()
    if not cut and declared.isdigit() and int(declared) > limit:
        raise _oversized(edge, limit, f"declared {int(declared)} bytes")
    content = bytearray()
    # Decoded when the provider compressed it; else as it comes, past httpx's decoder (a
    # reply already read, as a mock transport's, is only there for aiter_bytes).
    raw = not response.is_stream_consumed and "content-encoding" not in response.headers
    stream = response.stream
    if raw and type(stream) is H1Body:
        # Our transport's own body, straight (``aiter_raw`` would wrap it in a generator
        # and a chunker); ``post_json`` closes the response after.
        response.is_stream_consumed = True
        chunks: AsyncIterable[bytes] = stream
    else:
        chunks = response.aiter_raw() if raw else response.aiter_bytes()
    async for chunk in chunks:
        content += chunk
        if len(content) > limit:
            if cut:
                return bytes(content[:limit])
            raise _oversized(edge, limit, "still sending")
    return bytes(content)


def _oversized(edge: Edge, limit: int, seen: str) -> ProviderOversized:
    return ProviderOversized(
        f"{edge.provider} sent a reply over {limit} bytes ({seen}) for model {edge.model}: "
        "more than any answer within the request's output-token limit needs; it was "
        "dropped unread",
        provider=edge.provider,
        model=edge.model,
    )


def _text(response: httpx.Response, content: bytes) -> str:
    try:
        return content.decode(response.charset_encoding or "utf-8", errors="replace")
    except LookupError:  # a charset Python does not know
        return content.decode("utf-8", errors="replace")


class map_transport_errors:  # noqa: N801 (used as a function: ``with map_transport_errors(...)``)
    """Turn httpx and asyncio failures raised inside the block into ``ProviderError``.

    A class rather than a ``@contextmanager`` generator: it is entered once per model call,
    and a generator's context manager costs a few objects and calls more."""

    __slots__ = ("_edge", "_timeout_s")

    def __init__(self, edge: Edge, timeout_s: float) -> None:
        self._edge = edge
        self._timeout_s = timeout_s

    def __enter__(self) -> None:
        return None

    def __exit__(
        self, kind: type[BaseException] | None, exc: BaseException | None, tb: object
    ) -> None:
        if exc is None:
            return
        edge = self._edge
        if isinstance(exc, httpx.TimeoutException | TimeoutError):
            raise ProviderTimeout(
                f"{edge.provider} did not answer within {round(self._timeout_s, 2):g}s"
                f" for model {edge.model} ({type(exc).__name__})",
                provider=edge.provider,
                model=edge.model,
            ) from None
        if isinstance(exc, httpx.UnsupportedProtocol | httpx.ProxyError | httpx.InvalidURL):
            raise ProviderConfigError(
                f"{edge.provider}: cannot reach its base_url ({type(exc).__name__}: "
                f"{edge.scrub(str(exc))})",
                provider=edge.provider,
                model=edge.model,
            ) from None
        if isinstance(exc, httpx.TransportError | httpx.DecodingError):
            raise ProviderUnavailable(
                f"{edge.provider} connection failed for model {edge.model} "
                f"({type(exc).__name__}: {edge.scrub(str(exc))})",
                provider=edge.provider,
                model=edge.model,
            ) from None


def classify_status(
    status: int, headers: httpx.Headers, text: str, edge: Edge, *, now: datetime | None = None
) -> ProviderError:
    """The error an HTTP error status becomes. Pure: tests call it directly."""
    message, codes = error_message(text)
    said = edge.scrub(_excerpt(message)) if message else "no details"
    provider, model = edge.provider, edge.model
    if status == 429:
        return ProviderRateLimited(
            f"{edge.provider} rate-limited model {edge.model} (429): {said}",
            retry_after_s=retry_after_seconds(headers, now=now),
            provider=provider,
            model=model,
        )
    if status >= 500 or status == 409:
        what = "is overloaded" if status == _OVERLOADED else "is unavailable"
        return ProviderUnavailable(
            f"{edge.provider} {what} ({status}) for model {edge.model}: {said}",
            retry_after_s=retry_after_seconds(headers, now=now),
            provider=provider,
            model=model,
        )
    if status == 408:
        return ProviderTimeout(
            f"{edge.provider} timed out the request (408) for model {edge.model}: {said}",
            provider=provider,
            model=model,
        )
    if status in (400, 413, 422) and _is_token_limit(message, codes):
        return ProviderTokenLimit(
            f"{edge.provider}: the prompt does not fit the context window of model "
            f"{edge.model} ({status}): {said}",
            provider=provider,
            model=model,
        )
    if status in (401, 403):
        return ProviderConfigError(
            f"{edge.provider} rejected the credentials ({status}) for model {edge.model}: {said}",
            provider=provider,
            model=model,
        )
    if status == 404:
        return ProviderConfigError(
            f"{edge.provider} does not know model {edge.model} or the endpoint (404): {said}",
            provider=provider,
            model=model,
        )
    return ProviderConfigError(
        f"{edge.provider} rejected the request ({status}) for model {edge.model}: {said}",
        provider=provider,
        model=model,
    )


def error_message(text: str) -> tuple[str, frozenset[str]]:
    """``(message, codes)`` from the error bodies of OpenAI, Anthropic, vLLM, llama.cpp, Ollama.

    ``codes`` holds the body's ``code`` and ``type`` strings, whichever are present.
    """
    try:
        body = json.loads(text)
    except ValueError:
        return text.strip(), frozenset()
    if not isinstance(body, dict):
        return text.strip(), frozenset()
    err = body.get("error", body)
    if isinstance(err, str):
        return err, frozenset()
    if not isinstance(err, dict):
        return text.strip(), frozenset()
    message = err.get("message") or body.get("message") or body.get("detail") or ""
    codes = frozenset(str(err[key]) for key in ("code", "type") if err.get(key))
    return str(message), codes


def retry_after_seconds(headers: httpx.Headers, *, now: datetime | None = None) -> float | None:
    """How long the provider asked us to wait, from the first header that says so.

    ``retry-after-ms`` (OpenAI), ``retry-after`` (seconds or an HTTP date), then the
    latest ``anthropic-ratelimit-*-reset`` (RFC 3339) among the limits that are exhausted.
    """
    now = now or datetime.now(UTC)
    if (ms := headers.get("retry-after-ms")) is not None:
        try:
            return max(float(ms) / 1000, 0.0)
        except ValueError:
            pass
    if (value := headers.get("retry-after")) is not None:
        seconds = _parse_retry_after(value, now)
        if seconds is not None:
            return seconds
    return _anthropic_reset(headers, now)


def _parse_retry_after(value: str, now: datetime) -> float | None:
    try:
        return max(float(value), 0.0)
    except ValueError:
        pass
    try:
        when = parsedate_to_datetime(value)
    except (TypeError, ValueError, IndexError):
        return None
    if when.tzinfo is None:
        when = when.replace(tzinfo=UTC)
    return max((when - now).total_seconds(), 0.0)


def _anthropic_reset(headers: httpx.Headers, now: datetime) -> float | None:
    prefix = "anthropic-ratelimit-"
    resets: dict[str, float] = {}
    exhausted: set[str] = set()
    for name, value in headers.items():
        if not name.startswith(prefix):
            continue
        limit = name[len(prefix) :]
        if limit.endswith("-reset"):
            try:
                when = datetime.fromisoformat(value.strip())
            except ValueError:
                continue
            if when.tzinfo is None:
                when = when.replace(tzinfo=UTC)
            resets[limit.removesuffix("-reset")] = max((when - now).total_seconds(), 0.0)
        elif limit.endswith("-remaining") and value.strip() == "0":
            exhausted.add(limit.removesuffix("-remaining"))
    if not resets:
        return None
    # Wait for the limits that ran out; when none says so, the soonest reset is a fair guess.
    hit = [seconds for limit, seconds in resets.items() if limit in exhausted]
    return max(hit) if hit else min(resets.values())


def _is_token_limit(message: str, codes: frozenset[str]) -> bool:
    return bool(codes & _TOKEN_LIMIT_CODES) or bool(_TOKEN_LIMIT_TEXT.search(message))


def _excerpt(text: str) -> str:
    text = " ".join(text.split())
    if len(text) > MAX_DETAIL_CHARS:
        return text[:MAX_DETAIL_CHARS] + "…"
    return text
