"""Caps on what a client may ask for: the request body's size, and the job's dimensions.

    app.add_middleware(BodyLimit, max_bytes=settings.max_body_bytes)   # 413
    check_job(spec, settings)                                          # 422 naming the field
    spec = with_default_deadline(spec, settings)                       # deadlineMs filled in
    check_output_schema(tool.parameters, settings, field="tools[0].parameters")
    check_signature_schema(spec.signature, contract.output_schema, settings)  # kept per text

The caps are ``Settings.max_*`` (``REPROMPT_MAX_*``); JobSpec's own bounds still apply
underneath them.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any, Final

from starlette.types import ASGIApp, Message, Receive, Scope, Send

from app.api.problems import CONTENT_TOO_LARGE, problem
from app.core.schema.validation import check_schema
from app.core.wire import codes
from app.core.wire.base import compact_json
from app.core.wire.errors import InvalidInput
from app.core.wire.spec import JobSpec
from app.settings import Settings

HTTP1: Final = ("1.1", "1.0")


class BodyLimit:
    """Refuse request bodies over ``max_bytes`` with 413, before any handler sees them.

    A declared ``Content-Length`` over the cap is refused without reading a byte; a body
    without one (chunked) is counted as it streams and refused as soon as it passes the
    cap. The body, once read in full, is replayed to the app. A JSON body must be UTF-8
    (RFC 8259): any other bytes are a 422 naming ``body`` (the JSON decoder would take
    encoded surrogates, or answer a bare 400).
    """

    def __init__(self, app: ASGIApp, *, max_bytes: int) -> None:
        self.app = app
        self.max_bytes = max_bytes

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
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
        response = problem(
            413,
            CONTENT_TOO_LARGE,
            f"the request body is larger than {self.max_bytes} bytes",
            instance=scope.get("path", ""),
            headers={"Connection": "close"},
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
        response = problem(
            422,
            codes.INVALID_INPUT,
            detail,
            instance=scope.get("path", ""),
            errors=[{"field": "body", "message": detail}],
        )
        await response(scope, receive, send)
        return False
    return True


def check_job(spec: JobSpec, settings: Settings) -> None:
    """The caps that do not need the compiled contract; ``InvalidInput`` names the field."""
    budget = spec.budget
    _at_most("task", len(spec.task), settings.max_task_chars, "characters")
    _at_most("budget.maxTurns", budget.max_turns, settings.max_turns)
    _at_most("budget.returnRetries", budget.return_retries, settings.max_return_retries)
    if spec.candidates is not None:
        _at_most("candidates.n", spec.candidates.n, settings.max_candidates)
    if budget.deadline_ms is not None:
        _at_most("budget.deadlineMs", budget.deadline_ms, settings.max_deadline_ms)
    _at_most("maxOutputTokens", spec.max_output_tokens, settings.max_output_tokens)
    if spec.max_output_tokens_cap is not None:
        _at_most("maxOutputTokensCap", spec.max_output_tokens_cap, settings.max_output_tokens)
    if spec.input is not None:
        check_data(spec.input, settings, field="input")
    if spec.fallback is not None:
        check_data(spec.fallback.data, settings, field="fallback.data")
    if spec.schema_ is not None:
        check_output_schema(spec.schema_, settings, field="schema")


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


def check_data(value: Any, settings: Settings, *, field: str, cap: str = "input") -> None:
    """Nesting depth (first: the size is measured with a recursive encoder) and compact
    JSON bytes of data the client sends along (``input``, ``fallback.data``, a tool's
    output: ``cap="tool"``)."""
    _at_most(field, depth(value), settings.max_input_depth, "levels", what=f"{field} depth")
    size = len(compact_json(value).encode())
    limit = settings.max_tool_output_bytes if cap == "tool" else settings.max_input_bytes
    _at_most(field, size, limit, "bytes of JSON", what=f"{field} size")


def check_tools(spec: JobSpec, settings: Settings) -> None:
    """Each tool's ``parameters``: an object schema, held to the answer schema's limits;
    the wait for client outputs within the deadline cap."""
    for i, tool in enumerate(spec.tools):
        field = f"tools[{i}].parameters"
        check_output_schema(tool.parameters, settings, field=field)
        try:
            check_schema(tool.parameters, max_depth=settings.max_schema_depth)
        except InvalidInput as exc:
            raise InvalidInput(exc.detail.replace("schema", "parameters", 1), field=field) from None
        if tool.parameters.get("type") != "object":
            raise InvalidInput('parameters must be {"type": "object", ...}', field=field)
    if spec.tool_timeout_ms is not None:
        _at_most("toolTimeoutMs", spec.tool_timeout_ms, settings.max_deadline_ms, "ms")


def check_output_schema(schema: Any, settings: Settings, *, field: str) -> None:
    """Size (compact JSON bytes) and nesting depth of a schema, given or compiled."""
    _check_schema_measures(field, _measure(schema), settings)


def check_signature_schema(signature: str, schema: Any, settings: Settings) -> None:
    """``check_output_schema`` of the schema compiled from ``signature`` (names the field
    ``signature``). The schema is the signature's alone, so its measures are kept by the
    signature's text: jobs mostly repeat a few signatures."""
    measures = _SIGNATURE_MEASURES.get(signature)
    if measures is None:
        measures = _measure(schema)
        if len(signature) <= _SIGNATURE_TEXT_KEPT:
            if len(_SIGNATURE_MEASURES) >= _SIGNATURES_KEPT:
                del _SIGNATURE_MEASURES[next(iter(_SIGNATURE_MEASURES))]
            _SIGNATURE_MEASURES[signature] = measures
    _check_schema_measures("signature", measures, settings)


# Signature text → (bytes, depth) of its compiled schema, oldest first (what
# app.core.answer.contract keeps compiled, kept as long: 256 texts up to 64 KiB).
_SIGNATURE_MEASURES: dict[str, tuple[int, int]] = {}
_SIGNATURES_KEPT: Final = 256
_SIGNATURE_TEXT_KEPT: Final = 64 * 1024


def _measure(schema: Any) -> tuple[int, int]:
    size = len(compact_json(schema).encode())
    return size, depth(schema)


def _check_schema_measures(field: str, measures: tuple[int, int], settings: Settings) -> None:
    size, levels = measures
    _at_most(field, size, settings.max_schema_bytes, "bytes of JSON", what="schema size")
    _at_most(field, levels, settings.max_schema_depth, "levels", what="schema depth")


def clamp_wait(wait_ms: int, settings: Settings) -> int:
    """``waitMs`` above the cap waits only up to the cap (not an error: see docs/api.md)."""
    return max(0, min(wait_ms, settings.max_wait_ms))


def depth(value: Any) -> int:
    """Nesting depth of a JSON value: a scalar is 0, ``{}`` and ``[]`` are 1."""
    # Level by level (no recursion, however deep): the containers of one level hold the
    # next level's values.
    deepest = 0
    level: list[Any] = [value]
    while level:
        below: list[Any] = []
        containers = False
        for node in level:
            if isinstance(node, dict):
                containers = True
                below.extend(node.values())
            elif isinstance(node, list):
                containers = True
                below.extend(node)
        if not containers:
            break
        deepest += 1
        level = below
    return deepest


def _at_most(field: str, value: int, cap: int, unit: str = "", *, what: str = "") -> None:
    if value > cap:
        label = what or field
        unit = f" {unit}" if unit else ""
        raise InvalidInput(
            f"{label} is {value}{unit}; this service allows at most {cap}", field=field
        )
