"""OpenAI's chat-completions wire format: request → ``Scenario``, ``Reply`` → response body.

::

    scenario = parse_request(body)              # raises InvalidRequest (rendered as 400)
    render_reply(reply, scenario, created=...)  # {"object": "chat.completion", ...}
    render_error(429, "slow down")              # {"error": {"message", "type", "code"}}
    cached_usage(cache, body, usage)            # usage + prompt_tokens_details.cached_tokens
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import replace
from typing import Any, Final

from reprompt_sim import chance
from reprompt_sim.behaviour import Reply
from reprompt_sim.cache import PromptCache, Segment
from reprompt_sim.config import DEFAULT_MODEL
from reprompt_sim.conversation import Conversation, Role, Turn
from reprompt_sim.errors import InvalidRequest
from reprompt_sim.logprobs import token_logprobs
from reprompt_sim.scenario import Scenario, ToolChoice

_ROLES: Final[dict[str, Role]] = {
    "system": "system",
    "developer": "system",
    "user": "user",
    "assistant": "assistant",
    "tool": "tool",
    "function": "tool",
}
MAX_CHOICES: Final = 16
_FINISH: Final = {"stop": "stop", "length": "length", "tool_use": "tool_calls", "refusal": "stop"}
_ERRORS: Final = {
    400: ("invalid_request_error", "invalid_request"),
    404: ("invalid_request_error", "unknown_url"),
    429: ("requests", "rate_limit_exceeded"),
    500: ("server_error", "server_error"),
    503: ("server_error", "overloaded"),
}


def parse_request(body: object) -> Scenario:
    if not isinstance(body, dict):
        raise InvalidRequest("the request body must be a JSON object")
    messages = body.get("messages")
    if not isinstance(messages, list) or not messages:
        raise InvalidRequest("'messages' must be a non-empty array")
    if not isinstance(body.get("stream", False), bool):
        raise InvalidRequest("stream: must be a boolean")
    tools = _tools(body.get("tools"))
    choice = _tool_choice(tools, body.get("tool_choice"))
    output_tool = choice.output_tool(tools)
    key = body.get("prompt_cache_key")
    if key is not None and not isinstance(key, str):
        raise InvalidRequest("'prompt_cache_key' must be a string")
    turns = tuple(_turn(i, m, output_tool) for i, m in enumerate(messages))
    format_schema, json_mode = _response_format(body.get("response_format"))
    extra = len(json.dumps(body.get("tools") or [])) + len(json.dumps(format_schema or {}))
    model = body.get("model")
    n = body.get("n", 1)
    if isinstance(n, bool) or not isinstance(n, int) or not 1 <= n <= MAX_CHOICES:
        raise InvalidRequest(f"'n' must be an integer from 1 to {MAX_CHOICES}")
    scenario = Scenario.build(
        Conversation(turns),
        model=model if isinstance(model, str) and model else None,
        max_tokens=_max_tokens(body),
        format_schema=format_schema,
        tools=tools,
        tool_choice=choice,
        json_mode=json_mode or format_schema is not None,
        extra_prompt_chars=extra,
    )
    logprobs = body.get("logprobs", False)
    if not isinstance(logprobs, bool):
        raise InvalidRequest("'logprobs' must be a boolean")
    return replace(scenario, n=n, logprobs=logprobs)


def render_reply(
    reply: Reply, scenario: Scenario, *, created: int, more: Sequence[Reply] = ()
) -> dict[str, Any]:
    """The completion; ``more`` are the further choices of a request with ``n`` (the prompt
    is counted once, every choice's output)."""
    replies = (reply, *more)
    key = chance.digest(scenario.conversation.digest, reply.attempt, reply.outcome)[:24]
    output = sum(r.output_tokens for r in replies)
    return {
        "id": f"chatcmpl-sim{key}",
        "object": "chat.completion",
        "created": created,
        "model": model_name(scenario.model),
        "choices": [
            {
                "index": index,
                "message": _message(r),
                "logprobs": (
                    token_logprobs(r.text, outcome=r.outcome, key=f"{key}:{index}")
                    if scenario.logprobs and r.text
                    else None
                ),
                "finish_reason": _FINISH[r.finish],
            }
            for index, r in enumerate(replies)
        ],
        "usage": {
            "prompt_tokens": reply.prompt_tokens,
            "completion_tokens": output,
            "total_tokens": reply.prompt_tokens + output,
        },
        "system_fingerprint": "reprompt-sim",
    }


def _message(reply: Reply) -> dict[str, Any]:
    message: dict[str, Any] = {"role": "assistant", "content": reply.text, "refusal": reply.refusal}
    calls = [*reply.calls, *([reply.tool_use] if reply.tool_use is not None else [])]
    if calls:
        message["tool_calls"] = [
            {
                "id": f"call_{call.id}",
                "type": "function",
                "function": {"name": call.name, "arguments": call.arguments},
            }
            for call in calls
        ]
    return message


def cached_usage(cache: PromptCache, body: dict[str, Any], usage: dict[str, Any]) -> dict[str, Any]:
    """``usage`` as OpenAI reports it with its prompt cache.

    ``prompt_tokens`` still counts every prompt token; ``prompt_tokens_details.cached_tokens``
    those read from the cache.
    """
    key = body.get("prompt_cache_key")
    cached = cache.openai(key, _segments(body), int(usage["prompt_tokens"]))
    return {**usage, "prompt_tokens_details": {"cached_tokens": cached}}


def _segments(body: dict[str, Any]) -> list[Segment]:
    """The prompt in the order it is cached: tools and the response format, then the
    messages (a checked body: parse_request accepted it)."""
    head = json.dumps(body.get("tools") or []) + json.dumps(body.get("response_format") or {})
    out: list[Segment] = [("tools", head)]
    for i, message in enumerate(body["messages"]):
        text = _text(i, message.get("content"))
        if message.get("tool_calls"):
            text += json.dumps(message["tool_calls"], sort_keys=True)
        out.append((str(message.get("role")), text))
    return out


def render_error(status: int, message: str) -> dict[str, Any]:
    kind, code = _ERRORS.get(status, ("server_error", "server_error"))
    return {"error": {"message": message, "type": kind, "param": None, "code": code}}


def rate_limit_headers(retry_after_s: float) -> dict[str, str]:
    return {
        "retry-after": f"{retry_after_s:g}",
        "retry-after-ms": str(round(retry_after_s * 1000)),
        "x-ratelimit-limit-requests": "60",
        "x-ratelimit-remaining-requests": "0",
        "x-ratelimit-reset-requests": f"{retry_after_s:g}s",
    }


def models_body() -> dict[str, Any]:
    return {
        "object": "list",
        "data": [{"id": DEFAULT_MODEL, "object": "model", "created": 0, "owned_by": "reprompt"}],
    }


def model_name(requested: str | None) -> str:
    """Responses name the simulator honestly: ``sim/<requested>``."""
    return f"sim/{requested}" if requested else DEFAULT_MODEL


def _turn(index: int, raw: object, output_tool: str | None) -> Turn:
    if not isinstance(raw, dict):
        raise InvalidRequest(f"messages[{index}] must be an object")
    role = _ROLES.get(str(raw.get("role")))
    if role is None:
        raise InvalidRequest(f"messages[{index}].role: unsupported role {raw.get('role')!r}")
    text = _text(index, raw.get("content"))
    refusal = raw.get("refusal")
    if role != "assistant":
        return Turn(role, text)
    if isinstance(refusal, str) and refusal and not text:
        return Turn(role, refusal, refused=True)
    calls: list[tuple[str, str]] = []
    for call in raw.get("tool_calls") or []:
        function = call.get("function") if isinstance(call, dict) else None
        if isinstance(function, dict) and isinstance(function.get("arguments"), str):
            calls.append((str(function.get("name")), function["arguments"]))
    # A call of the output tool is the answer; calls of other tools are work.
    answer = next((arguments for name, arguments in calls if name == output_tool), None)
    work = tuple((name, arguments) for name, arguments in calls if name != output_tool)
    return Turn(role, text, tool_arguments=answer, work=work)


def _text(index: int, content: object) -> str:
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        for part in content:
            if isinstance(part, dict) and part.get("type") == "image_url":
                _check_image(index, part.get("image_url"))
        return "\n".join(
            str(part.get("text", ""))
            for part in content
            if isinstance(part, dict) and part.get("type") in ("text", "input_text")
        )
    raise InvalidRequest(f"messages[{index}].content must be a string or an array of parts")


def _check_image(index: int, image_url: object) -> None:
    """An ``image_url`` part as OpenAI takes it: an http(s) URL or a base64 image data URL."""
    url = image_url.get("url") if isinstance(image_url, dict) else None
    if not isinstance(url, str):
        raise InvalidRequest(f"messages[{index}].content: image_url.url must be a string")
    if url.startswith("data:"):
        head, comma, _ = url.partition(",")
        if not comma or not head.startswith("data:image/") or not head.endswith(";base64"):
            raise InvalidRequest(f"messages[{index}].content: invalid image data URL")
    elif not url.startswith(("https://", "http://")):
        raise InvalidRequest(f"messages[{index}].content: invalid image_url.url")


def _tools(raw: object) -> dict[str, object]:
    if raw is None:
        return {}
    if not isinstance(raw, list):
        raise InvalidRequest("'tools' must be an array")
    tools: dict[str, object] = {}
    for i, tool in enumerate(raw):
        function = tool.get("function") if isinstance(tool, dict) else None
        if not isinstance(function, dict) or not isinstance(function.get("name"), str):
            raise InvalidRequest(f"tools[{i}] must be {{'type': 'function', 'function': {{name}}}}")
        tools[function["name"]] = function.get("parameters", {"type": "object", "properties": {}})
    return tools


def _tool_choice(tools: dict[str, object], choice: object) -> ToolChoice:
    if isinstance(choice, dict):
        function = choice.get("function")
        name = function.get("name") if isinstance(function, dict) else None
        if not isinstance(name, str) or name not in tools:
            raise InvalidRequest(f"tool_choice names an unknown tool: {name!r}")
        return ToolChoice("named", name)
    if choice == "none":
        return ToolChoice("none")
    if choice == "required":
        return ToolChoice("required")
    return ToolChoice("auto")


def _response_format(raw: object) -> tuple[object, bool]:
    """(schema or None, JSON mode) from ``response_format``."""
    if raw is None:
        return None, False
    if not isinstance(raw, dict):
        raise InvalidRequest("'response_format' must be an object")
    kind = raw.get("type")
    if kind == "json_schema":
        spec = raw.get("json_schema")
        if not isinstance(spec, dict) or "schema" not in spec:
            raise InvalidRequest("response_format.json_schema.schema is required")
        return spec["schema"], True
    if kind == "json_object":
        return raw.get("schema"), True
    if kind in ("text", None):
        return None, False
    raise InvalidRequest(f"response_format.type: unsupported {kind!r}")


def _max_tokens(body: dict[str, Any]) -> int | None:
    for key in ("max_completion_tokens", "max_tokens"):
        value = body.get(key)
        if value is None:
            continue
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise InvalidRequest(f"'{key}' must be a positive integer")
        return value
    return None
