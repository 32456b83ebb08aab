"""The pure parts of the front door: a request read as a job, the chunks of an answer,
the error's ``param``, and the tool-argument checks (a scripted model client)."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import pytest
from pydantic import ValidationError

from app.api.chat.call import checked_call
from app.api.chat.completion import CHUNK_CHARS, chunks, message_of, role_chunk, usage_of
from app.api.chat.errors import ChatError
from app.api.chat.job import job_spec
from app.api.chat.request import ChatRequest
from app.core.turn.model import (
    LLMRequest,
    LLMResponse,
    Message,
    StructuredMode,
    StructuredOutput,
    ToolCall,
    ToolSpec,
    Usage,
)
from app.core.turn.tools import Tool, Toolbox

FORMAT = {"type": "json_schema", "json_schema": {"name": "x", "schema": {"type": "object"}}}


def request(**fields: Any) -> ChatRequest:
    body = {"model": "m", "messages": [{"role": "user", "content": "hi"}], **fields}
    return ChatRequest.model_validate_json(json.dumps(body))


def test_the_conversation_is_the_task_and_input() -> None:
    chat = request(
        messages=[
            {"role": "system", "content": "Be brief."},
            {"role": "user", "content": "first"},
            {"role": "assistant", "content": "an answer"},
            {"role": "developer", "content": [{"type": "text", "text": "Use JSON."}]},
            {"role": "user", "content": "second"},
        ],
        response_format=FORMAT,
        max_tokens=64,
        seed=3,
        reprompt={"returnRetries": 2, "retryMode": "whole", "candidates": 2},
    )
    spec = job_spec(chat)
    assert spec.task == "Be brief.\n\nUse JSON.\n\nsecond"
    assert spec.input == [
        {"role": "user", "content": "first"},
        {"role": "assistant", "content": "an answer"},
    ]
    assert spec.budget.return_retries == 2
    assert spec.retry_mode == "whole"
    assert spec.candidates is not None
    assert spec.candidates.n == 2
    assert spec.max_output_tokens == 64
    assert spec.seed == 3


def test_a_job_field_error_names_the_request_field() -> None:
    with pytest.raises(ChatError) as caught:
        job_spec(request(response_format=FORMAT, max_completion_tokens=2))
    assert caught.value.param == "max_completion_tokens"
    with pytest.raises(ValidationError):
        request(reprompt={"nope": 1})
    assert request(top_p=1, stop="x").ignored == ["stop", "top_p"]


def test_an_answer_streams_in_pieces_then_usage() -> None:
    text = "x" * (CHUNK_CHARS * 2 + 1)
    usage = usage_of(10, 5, 4)
    events = [
        role_chunk("job_1", 7, "m"),
        *chunks("job_1", 7, "m", message_of(text), "stop", usage),
    ]
    assert events[0]["choices"][0]["delta"]["role"] == "assistant"
    pieces = [e["choices"][0]["delta"].get("content") for e in events[1:-2]]
    assert "".join(pieces) == text
    assert len(pieces) == 3
    assert events[-2]["choices"][0]["finish_reason"] == "stop"
    assert events[-1]["choices"] == []
    assert events[-1]["usage"]["prompt_tokens_details"]["cached_tokens"] == 4
    assert all(e["usage"] is None for e in events[:-1])
    calls = (ToolCall("c1", "f", "{}"),)
    events = list(chunks("i", 7, "m", message_of(None, calls), "tool_calls", None))
    assert events[0]["choices"][0]["delta"]["tool_calls"][0]["index"] == 0
    assert events[-1]["choices"][0]["finish_reason"] == "tool_calls"


class Scripted:
    """A model client that answers with the given tool calls, one set per call."""

    def __init__(self, *answers: tuple[ToolCall, ...]) -> None:
        self.answers = list(answers)
        self.requests: list[LLMRequest] = []

    async def complete(self, request: LLMRequest) -> LLMResponse:
        self.requests.append(request)
        calls = self.answers.pop(0)
        usage = Usage(input_tokens=10, output_tokens=2, cached_input_tokens=1)
        return LLMResponse(
            None, "tool_calls", "m", "p", usage=usage, tool_calls=calls, latency_ms=3
        )

    def structured_mode(self, model: str | None, requested: StructuredOutput) -> StructuredMode:
        return "prompt"

    def estimate_cost(
        self, model: str | None, input_tokens: int, output_tokens: int
    ) -> float | None:
        return None


def toolbox() -> Toolbox:
    params = {"type": "object", "properties": {"sku": {"type": "string"}}, "required": ["sku"]}
    return Toolbox([Tool(ToolSpec("lookup", "", params))])


def test_bad_tool_arguments_are_re_asked_with_the_reason() -> None:
    client = Scripted(
        (ToolCall("a", "lookup", '{"sku": 5}'), ToolCall("b", "nope", "{}")),
        (ToolCall("c", "lookup", "{not json"),),
        (ToolCall("d", "lookup", '{"sku": "A1"}'),),
    )
    first = LLMRequest(messages=(Message("user", "price?"),))
    called = asyncio.run(checked_call(client, first, toolbox(), attempts=3))
    assert called.response.tool_calls[0].id == "d"
    assert (called.calls, called.input_tokens, called.output_tokens) == (3, 30, 6)
    assert called.cached_tokens == 3
    assert called.model_ms == 9
    second = client.requests[1].messages
    assert [m.role for m in second] == ["user", "assistant", "tool", "tool"]
    assert "sku" in second[2].content
    assert "no tool 'nope'" in second[3].content
    assert "not valid JSON" in client.requests[2].messages[-1].content


def test_tool_arguments_that_never_match_are_a_422() -> None:
    client = Scripted((ToolCall("a", "lookup", "{}"),), (ToolCall("b", "lookup", "[]"),))
    first = LLMRequest(messages=(Message("user", "price?"),))
    with pytest.raises(ChatError) as caught:
        asyncio.run(checked_call(client, first, toolbox(), attempts=2))
    assert caught.value.status == 422
    assert caught.value.code == "llm-invalid-output"
    assert "must be a JSON object" in caught.value.message
