"""Request bodies for the simulator's two wire formats, and readers for its answers."""

from __future__ import annotations

import json
from typing import Any

ORDER_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "customer": {"type": "string", "minLength": 3},
        "quantity": {"type": "integer", "minimum": 1, "maximum": 50},
        "express": {"type": "boolean"},
        "items": {
            "type": "array",
            "minItems": 1,
            "items": {
                "type": "object",
                "properties": {
                    "sku": {"type": "string", "pattern": "^[A-Z]{3}-[0-9]{4}$"},
                    "price": {"type": "number", "minimum": 0},
                },
                "required": ["sku", "price"],
                "additionalProperties": False,
            },
        },
    },
    "required": ["customer", "quantity", "express", "items"],
    "additionalProperties": False,
}


def directive(**fields: Any) -> str:
    return f"[[sim {json.dumps(fields)}]]"


def openai(
    *messages: dict[str, Any],
    schema: dict[str, Any] | None = ORDER_SCHEMA,
    max_tokens: int | None = None,
    model: str | None = "gpt-4o",
    **extra: Any,
) -> dict[str, Any]:
    """A chat-completions body; ``schema`` goes into ``response_format`` (json_schema)."""
    body: dict[str, Any] = {"messages": list(messages), **extra}
    if model is not None:
        body["model"] = model
    if schema is not None:
        body["response_format"] = {
            "type": "json_schema",
            "json_schema": {"name": "order", "schema": schema, "strict": True},
        }
    if max_tokens is not None:
        body["max_completion_tokens"] = max_tokens
    return body


def anthropic(
    *messages: dict[str, Any],
    tool_schema: dict[str, Any] | None = ORDER_SCHEMA,
    max_tokens: int = 2048,
    **extra: Any,
) -> dict[str, Any]:
    """A messages body; ``tool_schema`` becomes one forced tool named ``record``."""
    body: dict[str, Any] = {
        "model": "claude-sonnet-4",
        "max_tokens": max_tokens,
        "messages": list(messages),
        **extra,
    }
    if tool_schema is not None:
        body["tools"] = [{"name": "record", "input_schema": tool_schema}]
        body["tool_choice"] = {"type": "tool", "name": "record"}
    return body


def msg(role: str, content: Any) -> dict[str, Any]:
    return {"role": role, "content": content}


def openai_text(response: dict[str, Any]) -> str:
    message = response["choices"][0]["message"]
    calls = message.get("tool_calls")
    if calls:
        return str(calls[0]["function"]["arguments"])
    return str(message["content"])


def openai_echo(response: dict[str, Any]) -> dict[str, Any]:
    """The assistant message as a client sends it back in the history."""
    message = dict(response["choices"][0]["message"])
    return {k: v for k, v in message.items() if v is not None}
