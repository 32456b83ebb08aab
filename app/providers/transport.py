"""One HTTP exchange with a provider, every failure mapped into ``app.core.wire.errors``.

Adapters build the body and read the answer; this module posts it and classifies
whatever went wrong, most specific first (as httpx's ``map_httpcore_exceptions``)::

    a proxy that cannot be reached or refuses the tunnel   -> ProviderUnavailable naming it
                                    (407: ProviderConfigError, the proxy's credentials)
    httpx/aiohttp/asyncio timeouts                         -> ProviderTimeout
    httpx.UnsupportedProtocol, InvalidURL (aiohttp's too)  -> ProviderConfigError
    any other transport error (refused, reset, malformed)  -> ProviderUnavailable
    a request header the transport will not send (ValueError) -> ProviderConfigError
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
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, Final

import aiohttp
import httpx

from app.core.wire.errors import (
    ProviderConfigError,
    ProviderError,
    ProviderOversized,
    ProviderRateLimited,
    ProviderTimeout,
    ProviderTokenLimit,
    ProviderUnavailable,
)
from app.providers.http import proxy_label
from app.replies import read_capped, retry_after

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
    # The user and password of a URL (a proxy's): http://[redacted]@proxy:3128
    re.compile(r"(?<=://)[^/@\s]+(?=@)"),
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
    url: str | httpx.URL,
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
    content = json.dumps(body, ensure_ascii=False, separators=(",", ":"), allow_nan=False)
    with map_transport_errors(edge, timeout_s):
        # No per-operation limits (timeout=None): the asyncio.timeout around the whole
        # exchange bounds each operation first.
        request = http.build_request(
            "POST",
            url,
            content=content.encode(),
            headers={"content-type": "application/json", **headers},
            timeout=None,
        )
        async with asyncio.timeout(timeout_s):
            response = await http.send(request, stream=True)
            try:
                if response.status_code >= 400:
                    cut = await read_body(response, MAX_ERROR_BYTES, edge, cut=True)
                    raise classify_status(
                        response.status_code, response.headers, text_of(response, cut), edge
                    )
                reply = await read_body(response, max_bytes, edge)
            finally:
                await response.aclose()
    try:
        decoded = json.loads(reply)
    except ValueError:
        decoded = None
    if not isinstance(decoded, dict):
        raise ProviderUnavailable(
            f"{edge.provider} sent a malformed body ({response.status_code}) for model "
            f"{edge.model}: {edge.scrub(_excerpt(text_of(response, reply[:MAX_ERROR_BYTES])))}",
            provider=edge.provider,
            model=edge.model,
        )
    return decoded, response.headers


async def read_body(
    response: httpx.Response, limit: int, edge: Edge, *, cut: bool = False
) -> bytes:
    """The body, at most ``limit`` bytes of it (``ProviderOversized`` past it, unless
    ``cut``); nothing more is read."""
    # Decoded when the provider compressed it; else as it comes, past httpx's decoder.
    compressed = "content-encoding" in response.headers
    chunks = response.aiter_bytes() if compressed else response.aiter_raw()

    def too_large(seen: str) -> ProviderOversized:
        return oversized(edge, limit, seen)

    return await read_capped(chunks, response.headers, limit, too_large=too_large, cut=cut)


def oversized(edge: Edge, limit: int, seen: str) -> ProviderOversized:
    return ProviderOversized(
        f"{edge.provider} sent a reply over {limit} bytes ({seen}) for model {edge.model}: "
        "more than any answer within the request's output-token limit needs; it was "
        "dropped unread",
        provider=edge.provider,
        model=edge.model,
    )


def text_of(response: httpx.Response, content: bytes) -> str:
    try:
        return content.decode(response.charset_encoding or "utf-8", errors="replace")
    except LookupError:  # a charset Python does not know
        return content.decode("utf-8", errors="replace")


class map_transport_errors:  # noqa: N801 (used as a function: ``with map_transport_errors(...)``)
    """Turn httpx, aiohttp and asyncio failures raised inside the block into ``ProviderError``.

    The transport raises aiohttp's errors as httpx's with the original as ``__cause__``, or
    as they are when httpx has no counterpart; the original says most (a refused
    connection, a proxy that cannot be reached), so it is looked at first."""

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
        cause = exc if isinstance(exc, aiohttp.ClientError) else exc.__cause__
        if isinstance(cause, aiohttp.ClientError):
            raise _from_aiohttp(cause, self._edge, self._timeout_s) from None
        mapped = _from_httpx(exc, self._edge, self._timeout_s)
        if mapped is not None:
            raise mapped from None


def _from_aiohttp(exc: aiohttp.ClientError, edge: Edge, timeout_s: float) -> ProviderError:
    provider, model = edge.provider, edge.model
    said = f"{type(exc).__name__}: {edge.scrub(str(exc))}"
    if isinstance(exc, aiohttp.ClientProxyConnectionError):
        return ProviderUnavailable(
            f"{provider}: cannot reach the proxy at {exc.host}:{exc.port} for model {model}"
            f" ({said})",
            provider=provider,
            model=model,
        )
    if isinstance(exc, aiohttp.ClientHttpProxyError):
        proxy = proxy_label(str(exc.request_info.real_url))
        error = ProviderConfigError if exc.status == 407 else ProviderUnavailable
        return error(
            f"{provider}: the proxy {proxy} refused to connect to model {model}'s server "
            f"({exc.status} {edge.scrub(exc.message)})",
            provider=provider,
            model=model,
        )
    if isinstance(exc, TimeoutError):  # aiohttp's own timeouts are asyncio's too
        return _timeout(edge, timeout_s, exc)
    if isinstance(exc, aiohttp.InvalidURL | aiohttp.NonHttpUrlClientError):
        return ProviderConfigError(
            f"{provider}: cannot reach its base_url ({said})", provider=provider, model=model
        )
    return ProviderUnavailable(
        f"{provider} connection failed for model {model} ({said})", provider=provider, model=model
    )


def _from_httpx(exc: BaseException, edge: Edge, timeout_s: float) -> ProviderError | None:
    provider, model = edge.provider, edge.model
    if isinstance(exc, httpx.TimeoutException | TimeoutError):
        return _timeout(edge, timeout_s, exc)
    said = f"{type(exc).__name__}: {edge.scrub(str(exc))}"
    if isinstance(exc, httpx.ProxyError):
        return ProviderUnavailable(
            f"{provider}: the proxy failed for model {model} ({said})",
            provider=provider,
            model=model,
        )
    if isinstance(exc, httpx.UnsupportedProtocol | httpx.InvalidURL):
        return ProviderConfigError(
            f"{provider}: cannot reach its base_url ({said})", provider=provider, model=model
        )
    if isinstance(exc, httpx.TransportError | httpx.DecodingError):
        return ProviderUnavailable(
            f"{provider} connection failed for model {model} ({said})",
            provider=provider,
            model=model,
        )
    if isinstance(exc, ValueError):  # a header the transport refuses to send (a line break)
        return ProviderConfigError(
            f"{provider}: the request for model {model} cannot be sent ({said})",
            provider=provider,
            model=model,
        )
    return None


def _timeout(edge: Edge, timeout_s: float, exc: BaseException) -> ProviderTimeout:
    return ProviderTimeout(
        f"{edge.provider} did not answer within {round(timeout_s, 2):g}s"
        f" for model {edge.model} ({type(exc).__name__})",
        provider=edge.provider,
        model=edge.model,
    )


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
        seconds = retry_after(value, now)
        if seconds is not None:
            return seconds
    return _anthropic_reset(headers, now)


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
