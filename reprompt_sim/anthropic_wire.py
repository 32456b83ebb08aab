"""Anthropic's messages wire format: request → ``Scenario``, ``Reply`` → response body.

::

    scenario = parse_request(body)              # raises InvalidRequest (rendered as 400)
    render_reply(reply, scenario)               # {"type": "message", "content": [...], ...}
    render_error(529, "overloaded")             # {"type": "error", "error": {"type", "message"}}
    cached_usage(cache, body, usage)            # input_tokens split by the prompt cache

A ``tool_use`` block's ``input`` must be an object, so an answer whose JSON is broken
(or wrapped in prose) travels as a text block instead, as from a model that ignored the tool.
Scripted client tool calls are the exception: their ``input`` is sent as the script gave it.
"""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from typing import Any, Final

from reprompt_sim import chance
from reprompt_sim.behaviour import Reply
from reprompt_sim.cache import ANTHROPIC_MAX_MARKS, PromptCache, Unit
from reprompt_sim.config import DEFAULT_MODEL
from reprompt_sim.conversation import Conversation, Turn
from reprompt_sim.errors import InvalidRequest
from reprompt_sim.openai_wire import model_name
from reprompt_sim.scenario import Scenario, ToolChoice

_STOP: Final = {"stop": "end_turn", "length": "max_tokens", "tool_use": "tool_use"}
_ERRORS: Final = {
    400: "invalid_request_error",
    404: "not_found_error",
    429: "rate_limit_error",
    500: "api_error",
    529: "overloaded_error",
}
OVERLOADED_STATUS: Final = 529


def parse_request(body: object) -> Scenario:
    if not isinstance(body, dict):
        raise InvalidRequest("the request body must be a JSON object")
    messages = body.get("messages")
    if not isinstance(messages, list) or not messages:
        raise InvalidRequest("messages: must be a non-empty array")
    if not isinstance(body.get("stream", False), bool):
        raise InvalidRequest("stream: must be a boolean")
    max_tokens = body.get("max_tokens")
    if isinstance(max_tokens, bool) or not isinstance(max_tokens, int) or max_tokens < 1:
        raise InvalidRequest("max_tokens: Field required (a positive integer)")
    tools = _tools(body.get("tools"))
    choice = _tool_choice(tools, body.get("tool_choice"))
    output_tool = choice.output_tool(tools)
    cache_units(body)  # the cache_control marks are checked up front, as upstream
    turns: list[Turn] = []
    system = _text("system", body.get("system"))
    if system:
        turns.append(Turn("system", system))
    turns.extend(_turn(i, m, output_tool) for i, m in enumerate(messages))
    output_format = body.get("output_format")
    format_schema = output_format.get("schema") if isinstance(output_format, dict) else None
    model = body.get("model")
    return Scenario.build(
        Conversation(tuple(turns)),
        model=model if isinstance(model, str) and model else None,
        max_tokens=max_tokens,
        format_schema=format_schema,
        tools=tools,
        tool_choice=choice,
        json_mode=format_schema is not None,
        extra_prompt_chars=len(json.dumps(body.get("tools") or [])),
    )


def render_reply(reply: Reply, scenario: Scenario) -> dict[str, Any]:
    content: list[dict[str, Any]] = []
    stop = "refusal" if reply.finish == "refusal" else _STOP[reply.finish]
    text = reply.refusal if reply.refusal is not None else reply.text
    call = reply.tool_use
    if call is not None and call.input is None:
        text = f"{text}\n\n{call.arguments}" if text else call.arguments
        stop, call = "end_turn", None
    if text:
        content.append({"type": "text", "text": text})
    for work in reply.calls:
        content.append(
            {"type": "tool_use", "id": f"toolu_{work.id}", "name": work.name, "input": work.input}
        )
    if call is not None:
        content.append(
            {"type": "tool_use", "id": f"toolu_{call.id}", "name": call.name, "input": call.input}
        )
    key = chance.digest(scenario.conversation.digest, reply.attempt, reply.outcome)[:24]
    return {
        "id": f"msg_sim{key}",
        "type": "message",
        "role": "assistant",
        "model": model_name(scenario.model),
        "content": content,
        "stop_reason": stop,
        "stop_sequence": None,
        "usage": {"input_tokens": reply.prompt_tokens, "output_tokens": reply.output_tokens},
    }


def cached_usage(cache: PromptCache, body: dict[str, Any], usage: dict[str, Any]) -> dict[str, Any]:
    """``usage`` as Anthropic reports it with its prompt cache.

    ``input_tokens`` leaves out the tokens read from the cache (``cache_read_input_tokens``)
    and written to it (``cache_creation_input_tokens``).
    """
    total = int(usage["input_tokens"])
    read, written = cache.anthropic(cache_units(body), total)
    return {
        **usage,
        "input_tokens": total - read - written,
        "cache_creation_input_tokens": written,
        "cache_read_input_tokens": read,
    }


def cache_units(body: dict[str, Any]) -> list[Unit]:
    """The prompt's blocks in cache order: tools, system, messages.

    More than ``ANTHROPIC_MAX_MARKS`` blocks with ``cache_control``, or a mark that is not
    ``{"type": "ephemeral"}``, is a 400.
    """
    units = [
        _unit("tool", f"tools.{i}", tool, len(json.dumps(tool)))
        for i, tool in enumerate(_list(body.get("tools")))
    ]
    system = body.get("system")
    if isinstance(system, str):
        units.append(Unit(json.dumps(["system", system]), len(system)))
    else:
        units.extend(
            _unit("system", f"system.{i}", block, _chars(block))
            for i, block in enumerate(_list(system))
        )
    for n, message in enumerate(body["messages"]):
        role, content = str(message.get("role")), message.get("content")
        if isinstance(content, str):
            units.append(Unit(json.dumps([role, content]), len(content)))
            continue
        units.extend(
            _unit(role, f"messages.{n}.content.{i}", block, _chars(block))
            for i, block in enumerate(_list(content))
        )
    marks = sum(unit.marked for unit in units)
    if marks > ANTHROPIC_MAX_MARKS:
        raise InvalidRequest(
            f"A maximum of {ANTHROPIC_MAX_MARKS} blocks with cache_control may be provided. "
            f"Found {marks}."
        )
    return units


def _list(value: object) -> list[Any]:
    return value if isinstance(value, list) else []


def _chars(block: object) -> int:
    """A block's length as the prompt's token count has it."""
    if not isinstance(block, dict):
        return 0
    kind = block.get("type")
    if kind == "text":
        return len(str(block.get("text", "")))
    if kind == "tool_result":
        return len(_text("tool_result", block.get("content")))
    return len(json.dumps(block.get("input")))


def _unit(label: str, where: str, block: object, chars: int) -> Unit:
    """One block: what must repeat for a cache hit is ``label`` (role) and the block."""
    if not isinstance(block, dict):
        return Unit(json.dumps([label, block]), chars)
    mark = block.get("cache_control")
    if mark is not None and (not isinstance(mark, dict) or mark.get("type") != "ephemeral"):
        raise InvalidRequest(f"{where}.cache_control: expected {{'type': 'ephemeral'}}")
    rest = {k: v for k, v in block.items() if k != "cache_control"}
    return Unit(json.dumps([label, rest], sort_keys=True), chars, marked=mark is not None)


def render_error(status: int, message: str) -> dict[str, Any]:
    return {
        "type": "error",
        "error": {"type": _ERRORS.get(status, "api_error"), "message": message},
    }


def rate_limit_headers(retry_after_s: float, now: datetime) -> dict[str, str]:
    reset = (now + timedelta(seconds=retry_after_s)).astimezone(UTC)
    return {
        "retry-after": f"{retry_after_s:g}",
        "anthropic-ratelimit-requests-limit": "60",
        "anthropic-ratelimit-requests-remaining": "0",
        "anthropic-ratelimit-requests-reset": reset.strftime("%Y-%m-%dT%H:%M:%SZ"),
    }


def models_body() -> dict[str, Any]:
    entry = {
        "type": "model",
        "id": DEFAULT_MODEL,
        "display_name": "reprompt simulator",
        "created_at": "2025-01-01T00:00:00Z",
    }
    return {"data": [entry], "has_more": False, "first_id": DEFAULT_MODEL, "last_id": DEFAULT_MODEL}


def _turn(index: int, raw: object, output_tool: str | None) -> Turn:
    if not isinstance(raw, dict) or raw.get("role") not in ("user", "assistant"):
        raise InvalidRequest(f"messages.{index}: role must be 'user' or 'assistant'")
    content = raw.get("content")
    text = _text(f"messages.{index}.content", content)
    if raw["role"] == "user":
        return Turn("user", text)
    uses = [
        (str(block.get("name")), json.dumps(block.get("input")))
        for block in (content if isinstance(content, list) else [])
        if isinstance(block, dict) and block.get("type") == "tool_use"
    ]
    # A call of the output tool is the answer; calls of other tools are work.
    answer = next((arguments for name, arguments in uses if name == output_tool), None)
    work = tuple((name, arguments) for name, arguments in uses if name != output_tool)
    return Turn("assistant", text, tool_arguments=answer, work=work)


def _text(where: str, content: object) -> str:
    """The readable text of a string or a list of blocks (text and tool results)."""
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    if not isinstance(content, list):
        raise InvalidRequest(f"{where}: must be a string or an array of content blocks")
    parts: list[str] = []
    for block in content:
        if not isinstance(block, dict):
            raise InvalidRequest(f"{where}: content blocks must be objects")
        if block.get("type") == "text":
            parts.append(str(block.get("text", "")))
        elif block.get("type") == "tool_result":
            parts.append(_text(where, block.get("content")))
        elif block.get("type") == "image":
            _check_image(where, block.get("source"))
    return "\n".join(parts)


_IMAGE_TYPES = ("image/png", "image/jpeg", "image/gif", "image/webp")


def _check_image(where: str, source: object) -> None:
    """An ``image`` block's source as Anthropic takes it: base64 of a known type, or a URL."""
    if not isinstance(source, dict):
        raise InvalidRequest(f"{where}: an image block needs a source")
    if source.get("type") == "base64":
        if source.get("media_type") not in _IMAGE_TYPES or not isinstance(source.get("data"), str):
            raise InvalidRequest(f"{where}: image.source: media_type and data are required")
    elif source.get("type") != "url" or not isinstance(source.get("url"), str):
        raise InvalidRequest(f"{where}: image.source.type must be base64 or url")


def _tools(raw: object) -> dict[str, object]:
    if raw is None:
        return {}
    if not isinstance(raw, list):
        raise InvalidRequest("tools: must be an array")
    tools: dict[str, object] = {}
    for i, tool in enumerate(raw):
        if not isinstance(tool, dict) or not isinstance(tool.get("name"), str):
            raise InvalidRequest(f"tools.{i}: must have a name and an input_schema")
        if "input_schema" in tool:  # server tools (web search...) have none and are ignored
            tools[tool["name"]] = tool["input_schema"]
    return tools


def _tool_choice(tools: dict[str, object], choice: object) -> ToolChoice:
    kind = choice.get("type") if isinstance(choice, dict) else None
    if kind == "tool":
        assert isinstance(choice, dict)
        name = choice.get("name")
        if not isinstance(name, str) or name not in tools:
            raise InvalidRequest(f"tool_choice.name: unknown tool {name!r}")
        return ToolChoice("named", name)
    if kind == "none":
        return ToolChoice("none")
    if kind == "any":
        return ToolChoice("required")
    return ToolChoice("auto")
