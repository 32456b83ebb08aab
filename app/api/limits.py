"""Limits at the API's door: a request body's size, a wait's length, a job's deadline.

    app.add_middleware(BodyLimit, max_bytes=settings.max_body_bytes)   # 413
    spec = with_default_deadline(spec, settings)                       # deadlineMs filled in

A job's own dimensions are capped at admission (``app.core.admission.caps``).
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any, Final

from starlette.types import ASGIApp, Message, Receive, Scope, Send

from app.api.chat.errors import ChatError
from app.api.problems import CONTENT_TOO_LARGE, problem
from app.core.wire import codes
from app.core.wire.spec import JobSpec
from app.settings import Settings

HTTP1: Final = ("1.1", "1.0")
# Paths that answer errors in OpenAI's shape (app/api/chat), as their document says.
OPENAI_PATHS: Final = ("/v1/chat/",)


class BodyLimit:
    """Refuse request bodies over ``max_bytes`` with 413, before any handler sees them.

    A declared ``Content-Length`` over the cap is refused without reading a byte; a body
    without one (chunked) is counted as it streams and refused as soon as it passes the
    cap. The body, once read in full, is replayed to the app. A JSON body must be UTF-8
    (RFC 8259): any other bytes are a 422 naming ``body`` (the JSON decoder would take
    encoded surrogates, or answer a bare 400); under ``OPENAI_PATHS``, OpenAI's 400.
    """

    def __init__(
        self, app: ASGIApp, *, max_bytes: int, own_cap: frozenset[str] = frozenset()
    ) -> None:
        self.app = app
        self.max_bytes = max_bytes
        # Paths whose handlers read their (large) body as a stream under a cap of their own
        # (``POST /v1/batches``: REPROMPT_BATCH_MAX_BYTES).
        self.own_cap = own_cap

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or scope.get("path") in self.own_cap:
            await self.app(scope, receive, send)
            return
        declared, content_type, encoding = first_headers(
            scope["headers"], b"content-length", b"content-type", b"transfer-encoding"
        )
        if declared is None and encoding is None and scope.get("http_version") in HTTP1:
            # No body (HTTP/1 sends one only with either header): nothing to count.
            await self.app(scope, receive, send)
            return
        if declared is not None and declared.strip().isdigit() and int(declared) > self.max_bytes:
            await self._refuse(scope, receive, send)
            return
        chunks: list[bytes] = []
        size = 0
        while True:
            message = await receive()
            if message["type"] != "http.request":
                # The client went away before the body was complete.
                replay: list[Message] = [message]
                break
            chunk = message.get("body", b"")
            size += len(chunk)
            if size > self.max_bytes:
                await self._refuse(scope, receive, send)
                return
            chunks.append(chunk)
            if not message.get("more_body", False):
                body = chunks[0] if len(chunks) == 1 else b"".join(chunks)
                if is_json(content_type or "") and not await _utf8(body, scope, receive, send):
                    return
                replay = [{"type": "http.request", "body": body, "more_body": False}]
                break
        await self.app(scope, _replaying(replay, receive), send)

    async def _refuse(self, scope: Scope, receive: Receive, send: Send) -> None:
        detail = f"the request body is larger than {self.max_bytes} bytes"
        path: str = scope.get("path", "")
        headers = {"Connection": "close"}
        response = (
            ChatError(413, CONTENT_TOO_LARGE, detail).response(headers)
            if path.startswith(OPENAI_PATHS)
            else problem(413, CONTENT_TOO_LARGE, detail, instance=path, headers=headers)
        )
        await response(scope, receive, send)


def _replaying(messages: list[Message], receive: Receive) -> Receive:
    """``receive`` with ``messages`` (read already, last first) given back first."""

    async def replayed() -> Message:
        return messages.pop() if messages else await receive()

    return replayed


def first_headers(headers: Iterable[tuple[bytes, bytes]], *names: bytes) -> list[str | None]:
    """The first value of each header of ``names`` (lower-case, as the ASGI scope has them),
    None for one absent, as Starlette's ``Headers.get`` reads each: in one pass."""
    found: dict[bytes, bytes] = {}
    for name, value in headers:
        if name in names and name not in found:
            found[name] = value
    return [found[name].decode("latin-1") if name in found else None for name in names]


def is_json(content_type: str) -> bool:
    """``application/json`` or ``application/*+json`` (parameters aside)."""
    if content_type == "application/json":  # what nearly every client sends
        return True
    media = content_type.split(";", 1)[0].strip().lower()
    return media == "application/json" or (
        media.startswith("application/") and media.endswith("+json")
    )


async def _utf8(body: bytes, scope: Scope, receive: Receive, send: Send) -> bool:
    """True if ``body`` is UTF-8; else answer 422 and return False."""
    try:
        body.decode("utf-8")
    except UnicodeDecodeError as exc:
        detail = f"body: not valid UTF-8 at byte {exc.start} (JSON must be UTF-8 text)"
        path: str = scope.get("path", "")
        response = (
            # OpenAI's dialect: a body that does not parse is a 400 naming no field.
            ChatError(400, codes.INVALID_INPUT, detail).response()
            if path.startswith(OPENAI_PATHS)
            else problem(
                422,
                codes.INVALID_INPUT,
                detail,
                instance=path,
                errors=[{"field": "body", "message": detail}],
            )
        )
        await response(scope, receive, send)
        return False
    return True


def with_default_deadline(spec: JobSpec, settings: Settings) -> JobSpec:
    """``spec`` with ``budget.deadlineMs`` set to the default deadline when it has none:
    no job runs unbounded (30 calls × 3 transport attempts × 60 s would be 90 minutes)."""
    if spec.budget.deadline_ms is not None:
        return spec
    budget = spec.budget.model_copy(update={"deadline_ms": settings.job_default_deadline_ms})
    return spec.model_copy(update={"budget": budget})


def stored_spec_json(spec: JobSpec, settings: Settings) -> dict[str, Any]:
    """``with_default_deadline(spec, settings).model_dump(mode="json", by_alias=True)``,
    what the store keeps, without copying the spec and its budget to fill the deadline in."""
    dumped = spec.model_dump(mode="json", by_alias=True)
    if spec.budget.deadline_ms is None:
        dumped["budget"]["deadlineMs"] = settings.job_default_deadline_ms
    return dumped


def clamp_wait(wait_ms: int, settings: Settings) -> int:
    """``waitMs`` above the cap waits only up to the cap (not an error: see docs/api.md)."""
    return max(0, min(wait_ms, settings.max_wait_ms))
