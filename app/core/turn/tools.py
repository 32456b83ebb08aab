"""Tools a job offers on work turns (spec 000): checked, then run here or by the client.

    tool = Tool(ToolSpec("lookup", "Find a SKU", {...}), handler=lambda args: {...})
    handled = await handle_calls({tool.spec.name: tool}, response.tool_calls)
    if any(h.waiting for h in handled): ...     # a client tool: the job pauses
    conversation.add_work(*work_messages(handled))

A tool without a handler is the client's: its call waits for ``requires_action`` outputs.
A tool's failure, an unknown tool or bad arguments become a tool result the model reads
(``prompts/tool_result.mustache``), never an exception. Arguments are checked against the
tool's ``parameters`` schema before anything runs.
"""

from __future__ import annotations

import inspect
import json
import time
from collections.abc import Awaitable, Callable, Iterable, Mapping
from dataclasses import dataclass, replace
from typing import Any, Final

from app.core.schema.steps import TooMuchWork
from app.core.schema.validation import Schema, cap_errors
from app.core.turn.model import Message, ToolCall, ToolSpec
from app.core.turn.templates import render
from app.core.wire.record import ToolCallRecord, ToolMode, ToolOutcome

RESULT_CHARS: Final = 4000
_ARGUMENT_ERRORS: Final = 6


@dataclass(frozen=True, slots=True)
class ToolAnswer:
    """What a handler returns to say more than a result: whether it failed, and how."""

    text: str
    ok: bool = True
    outcome: ToolOutcome = "ok"


Handler = Callable[[dict[str, Any]], Awaitable[Any] | Any]
# A handler that needs the call itself (its id names the request it makes: HTTP tools).
CallHandler = Callable[[ToolCall, dict[str, Any]], Awaitable[Any]]


@dataclass(frozen=True, slots=True)
class Tool:
    """A tool the model may call on work turns; ``handler`` gets the parsed arguments.

    No handler: the client runs it (the job pauses for its output). ``mode`` is what the
    records and metrics call it.
    """

    spec: ToolSpec
    handler: Handler | None = None
    mode: ToolMode = "local"
    call_handler: CallHandler | None = None  # instead of ``handler``

    @property
    def client_side(self) -> bool:
        return self.handler is None and self.call_handler is None


@dataclass(frozen=True, slots=True)
class Handled:
    """One call after ``handle_calls``: its record and the text the model will read
    (``None`` while a client tool has not answered)."""

    call: ToolCall
    record: ToolCallRecord
    text: str | None
    arguments: Any = None  # parsed, for the client

    @property
    def waiting(self) -> bool:
        return self.text is None


class Toolbox:
    """The job's tools by name, with each ``parameters`` schema compiled once."""

    def __init__(self, tools: Iterable[Tool]) -> None:
        self.tools = {tool.spec.name: tool for tool in tools}
        self._schemas: dict[str, Schema] = {}

    def __bool__(self) -> bool:
        return bool(self.tools)

    @property
    def specs(self) -> tuple[ToolSpec, ...]:
        return tuple(tool.spec for tool in self.tools.values())

    def argument_errors(self, name: str, arguments: dict[str, Any]) -> list[str]:
        schema = self._schemas.get(name)
        if schema is None:
            schema = self._schemas[name] = Schema(dict(self.tools[name].spec.parameters))
        try:
            lines, complete = schema.error_lines(arguments)
        except TooMuchWork:
            return ["the arguments are too complex to check; send simpler ones"]
        return cap_errors(lines, _ARGUMENT_ERRORS, complete=complete) if lines else []


async def handle_calls(
    tools: Toolbox | Mapping[str, Tool], calls: tuple[ToolCall, ...]
) -> list[Handled]:
    """Check every call; run the ones a handler runs; leave the client's waiting."""
    box = tools if isinstance(tools, Toolbox) else Toolbox(tools.values())
    return [await _handle(box, call) for call in calls]


async def run_calls(tools: Mapping[str, Tool], calls: tuple[ToolCall, ...]) -> list[Message]:
    """The assistant's tool-call message followed by one result message per call (every
    tool must have a handler)."""
    return work_messages(await handle_calls(tools, calls))


def work_messages(handled: Iterable[Handled]) -> list[Message]:
    """The assistant's tool-call message followed by one result per call, in order."""
    handled = list(handled)
    if any(h.waiting for h in handled):
        raise ValueError("a client tool has not answered yet")
    out = [Message("assistant", "", tool_calls=tuple(h.call for h in handled))]
    out.extend(
        Message("tool", h.text or "", tool_call_id=h.call.id, name=h.call.name) for h in handled
    )
    return out


def answered(
    handled: Handled, *, output: Any = None, error: str | None = None, duration_ms: int | None
) -> Handled:
    """A client tool's call with the client's output (or its error) filled in."""
    if error is not None:
        text = _render(handled.call.name, error=error[:300])
        outcome: ToolOutcome = "timeout" if duration_ms is None else "error"
    else:
        text = _result_text(handled.call.name, output)
        outcome = "ok"
    record = handled.record.model_copy(
        update={"outcome": outcome, "duration_ms": duration_ms, "bytes": len(text.encode())}
    )
    return replace(handled, record=record, text=text)


async def _handle(box: Toolbox, call: ToolCall) -> Handled:
    tool = box.tools.get(call.name)
    if tool is None:
        return _done(call, "local", "unknown_tool", _render(call.name, unknown=True), 0)
    try:
        arguments = json.loads(call.arguments or "{}")
        if not isinstance(arguments, dict):
            raise ValueError("expected a JSON object")
    except ValueError as exc:
        text = _render(call.name, bad_arguments=True, message=str(exc)[:200])
        return _done(call, tool.mode, "invalid_arguments", text, 0)
    errors = box.argument_errors(call.name, arguments)
    if errors:
        text = _render(call.name, invalid=True, message="\n".join(errors))
        return _done(call, tool.mode, "invalid_arguments", text, 0)
    if tool.client_side:
        record = ToolCallRecord(
            id=call.id,
            name=call.name,
            mode=tool.mode,
            outcome="requires_action",
            bytes=len(call.arguments.encode()),
        )
        return Handled(call, record, None, arguments)
    began = time.monotonic()
    text, outcome = await _run(tool, call, arguments)
    return _done(call, tool.mode, outcome, text, int((time.monotonic() - began) * 1000))


async def _run(tool: Tool, call: ToolCall, arguments: dict[str, Any]) -> tuple[str, ToolOutcome]:
    name = call.name
    try:
        if tool.call_handler is not None:
            result = await tool.call_handler(call, arguments)
        else:
            assert tool.handler is not None
            result = tool.handler(arguments)
        if inspect.isawaitable(result):
            result = await result
    except Exception as exc:  # a tool's failure is information for the model, not a crash
        return _render(name, error=f"{type(exc).__name__}: {str(exc)[:300]}"), "error"
    if isinstance(result, ToolAnswer):
        if not result.ok:
            return _render(name, error=result.text[:300]), result.outcome
        return _result_text(name, result.text), result.outcome
    return _result_text(name, result), "ok"


def _done(
    call: ToolCall, mode: ToolMode, outcome: ToolOutcome, text: str, duration_ms: int
) -> Handled:
    record = ToolCallRecord(
        id=call.id,
        name=call.name,
        mode=mode,
        outcome=outcome,
        duration_ms=duration_ms,
        bytes=len(text.encode()),
    )
    return Handled(call, record, text)


def _result_text(name: str, result: Any) -> str:
    text = (
        result if isinstance(result, str) else json.dumps(result, ensure_ascii=False, default=str)
    )
    omitted = len(text) - RESULT_CHARS
    if omitted > 0:
        return _render(name, ok=True, result=text[:RESULT_CHARS], truncated=True, omitted=omitted)
    return _render(name, ok=True, result=text)


def _render(name: str, **flags: Any) -> str:
    context: dict[str, Any] = {
        "unknown": False,
        "name": name,
        "bad_arguments": False,
        "invalid": False,
        "message": "",
        "error": None,
        "ok": False,
        "result": "",
        "truncated": False,
        "omitted": 0,
    }
    context.update(flags)
    return render("tool_result", context)
