"""The answer in OpenAI's shapes: a ``chat.completion``, its ``usage``, and its
``chat.completion.chunk`` events.

    completion(id_, created, model, message, finish_reason, usage)   # a dict, as JSON
    usage_of(input_tokens, output_tokens, cached_tokens)
    role_chunk(...), chunks(...), extension_chunk(...)              # the streamed events

The fields are those openai-python's ``ChatCompletion`` / ``ChatCompletionChunk`` and
openai-node's types declare; optional ones the service has nothing for are null.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any, Final

from app.core.turn.model import ToolCall

# The streamed answer's text comes in pieces of this many characters.
CHUNK_CHARS: Final = 256


@dataclass(frozen=True, slots=True)
class Answer:
    """What the request is answered with, before it is written as a completion or chunks."""

    id: str
    created: int
    model: str
    message: dict[str, Any]
    finish_reason: str
    usage: dict[str, Any]
    attempts: int
    model_ms: int
    job_id: str | None = None
    headers: dict[str, str] = field(default_factory=dict)


def usage_of(input_tokens: int, output_tokens: int, cached_tokens: int) -> dict[str, Any]:
    """OpenAI's ``usage``: every attempt's tokens, the cached prompt tokens among them."""
    return {
        "prompt_tokens": input_tokens,
        "completion_tokens": output_tokens,
        "total_tokens": input_tokens + output_tokens,
        "prompt_tokens_details": {"cached_tokens": cached_tokens, "audio_tokens": 0},
        "completion_tokens_details": {
            "reasoning_tokens": 0,
            "audio_tokens": 0,
            "accepted_prediction_tokens": 0,
            "rejected_prediction_tokens": 0,
        },
    }


def tool_calls_of(calls: Sequence[ToolCall]) -> list[dict[str, Any]]:
    return [
        {
            "id": call.id,
            "type": "function",
            "function": {"name": call.name, "arguments": call.arguments},
        }
        for call in calls
    ]


def message_of(content: str | None, calls: Sequence[ToolCall] = ()) -> dict[str, Any]:
    return {
        "role": "assistant",
        "content": content,
        "refusal": None,
        "tool_calls": tool_calls_of(calls) or None,
        "annotations": [],
    }


def completion(
    id_: str,
    created: int,
    model: str,
    message: dict[str, Any],
    finish_reason: str,
    usage: dict[str, Any],
) -> dict[str, Any]:
    """A ``chat.completion`` with one choice."""
    return {
        "id": id_,
        "object": "chat.completion",
        "created": created,
        "model": model,
        "choices": [
            {"index": 0, "message": message, "finish_reason": finish_reason, "logprobs": None}
        ],
        "usage": usage,
        "service_tier": None,
        "system_fingerprint": None,
    }


def chunk(
    id_: str,
    created: int,
    model: str,
    delta: dict[str, Any],
    finish: str | None = None,
) -> dict[str, Any]:
    """One ``chat.completion.chunk`` of the one choice."""
    return {
        "id": id_,
        "object": "chat.completion.chunk",
        "created": created,
        "model": model,
        "choices": [{"index": 0, "delta": delta, "finish_reason": finish, "logprobs": None}],
        "usage": None,
    }


def role_chunk(id_: str, created: int, model: str) -> dict[str, Any]:
    """The first chunk, as OpenAI's: the role, no content yet."""
    return chunk(id_, created, model, {"role": "assistant", "content": "", "refusal": None})


def extension_chunk(id_: str, created: int, model: str, event: dict[str, Any]) -> dict[str, Any]:
    """A chunk with no delta carrying reprompt's ``event`` (a partial, a discarded one)
    under ``reprompt``: the SDKs keep it (openai-python: ``chunk.model_extra``)."""
    return {**chunk(id_, created, model, {}), "reprompt": event}


def chunks(
    id_: str,
    created: int,
    model: str,
    message: dict[str, Any],
    finish_reason: str,
    usage: dict[str, Any] | None,
) -> Iterator[dict[str, Any]]:
    """A finished answer's chunks after the role's: the content in pieces (or the tool
    calls, one each), the finish reason, then ``usage`` alone (with
    ``stream_options.include_usage``: ``usage`` given) with no choices, as OpenAI sends it.
    """
    content: str | None = message.get("content")
    if content:
        for start in range(0, len(content), CHUNK_CHARS):
            yield chunk(id_, created, model, {"content": content[start : start + CHUNK_CHARS]})
    for index, call in enumerate(message.get("tool_calls") or ()):
        yield chunk(id_, created, model, {"tool_calls": [{"index": index, **call}]})
    yield chunk(id_, created, model, {}, finish_reason)
    if usage is not None:
        yield {
            "id": id_,
            "object": "chat.completion.chunk",
            "created": created,
            "model": model,
            "choices": [],
            "usage": usage,
        }
