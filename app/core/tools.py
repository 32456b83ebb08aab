"""Tools a job offers on work turns (spec 000), run in-process by the loop.

    tool = Tool(ToolSpec("lookup", "Find a SKU", {...}), handler=lambda args: {...})
    results = await run_calls({tool.spec.name: tool}, response.tool_calls)

A tool's failure, an unknown tool or bad arguments become a tool result the model reads
(``prompts/tool_result.mustache``), never an exception.
"""

from __future__ import annotations

import inspect
import json
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from typing import Any, Final

from app.core.model import Message, ToolCall, ToolSpec
from app.core.prompts import render

RESULT_CHARS: Final = 4000


@dataclass(frozen=True, slots=True)
class Tool:
    """A tool the model may call on work turns; ``handler`` gets the parsed arguments."""

    spec: ToolSpec
    handler: Callable[[dict[str, Any]], Awaitable[Any] | Any]


async def run_calls(tools: Mapping[str, Tool], calls: tuple[ToolCall, ...]) -> list[Message]:
    """The assistant's tool-call message followed by one result message per call."""
    results = [Message("assistant", "", tool_calls=calls)]
    for call in calls:
        text = await _run(tools.get(call.name), call)
        results.append(Message("tool", text, tool_call_id=call.id, name=call.name))
    return results


async def _run(tool: Tool | None, call: ToolCall) -> str:
    context: dict[str, Any] = {
        "unknown": False,
        "name": call.name,
        "bad_arguments": False,
        "message": "",
        "error": None,
        "ok": False,
        "result": "",
        "truncated": False,
        "omitted": 0,
    }
    if tool is None:
        context["unknown"] = True
        return render("tool_result", context)
    try:
        arguments = json.loads(call.arguments or "{}")
        if not isinstance(arguments, dict):
            raise ValueError("expected a JSON object")
    except ValueError as exc:
        context.update(bad_arguments=True, message=str(exc)[:200])
        return render("tool_result", context)
    try:
        result = tool.handler(arguments)
        if inspect.isawaitable(result):
            result = await result
    except Exception as exc:  # a tool's failure is information for the model, not a crash
        context["error"] = f"{type(exc).__name__}: {str(exc)[:300]}"
        return render("tool_result", context)
    text = (
        result if isinstance(result, str) else json.dumps(result, ensure_ascii=False, default=str)
    )
    if len(text) > RESULT_CHARS:
        context.update(truncated=True, omitted=len(text) - RESULT_CHARS)
        text = text[:RESULT_CHARS]
    context.update(ok=True, result=text)
    return render("tool_result", context)
