"""The Anthropic Messages adapter over real loopback HTTP, against recorded response bodies."""

from __future__ import annotations

import json
from typing import Any

import httpx
import pytest

from app.core.turn.model import LLMRequest, Message, ToolCall, ToolSpec, Usage
from app.core.wire.errors import (
    ProviderConfigError,
    ProviderRateLimited,
    ProviderTokenLimit,
    ProviderUnavailable,
)
from app.providers.anthropic import parse_response, request_body
from app.providers.config import ModelConfig
from app.providers.router import build_router
from tests.providers.upstream import TEST_KEY, Reply, Upstream, one_model, recorded

SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {"name": {"type": "string"}, "age": {"type": "integer"}},
    "required": ["name", "age"],
}
WEATHER = ToolSpec(
    "get_weather", "Current weather", {"type": "object", "properties": {"location": {}}}
)


def ask(**fields: Any) -> LLMRequest:
    messages = (
        Message("system", "You extract people."),
        Message("system", "Answer in JSON."),
        Message("user", "Ada, 36"),
    )
    return LLMRequest(messages=messages, **fields)


def anthropic(upstream: Upstream, **fields: Any) -> Any:
    return one_model(upstream.url, kind="anthropic", model="claude-haiku", **fields)


async def test_success_splits_system_and_sends_anthropic_headers(
    upstream: Upstream, http: httpx.AsyncClient
) -> None:
    upstream.script(recorded("anthropic_success"))
    router = build_router(anthropic(upstream, name="claude-haiku-4-5"), http)

    response = await router.complete(ask(temperature=0.3, seed=11, max_output_tokens=300))

    assert response.content == "Hello! How can I help you today?"
    assert response.finish_reason == "stop"
    assert response.usage == Usage(25, 15)
    assert (response.model, response.provider) == ("claude-haiku", "p")
    seen = upstream.seen[0]
    assert seen.path == "/v1/messages"
    assert seen.headers["x-api-key"] == TEST_KEY
    assert seen.headers["anthropic-version"] == "2023-06-01"
    assert "authorization" not in seen.headers
    assert seen.body == {
        "model": "claude-haiku-4-5",
        "max_tokens": 300,
        "system": "You extract people.\n\nAnswer in JSON.",
        "messages": [{"role": "user", "content": [{"type": "text", "text": "Ada, 36"}]}],
        "temperature": 0.3,
    }


async def test_structured_output_is_a_forced_tool_whose_input_becomes_the_content(
    upstream: Upstream, http: httpx.AsyncClient
) -> None:
    upstream.script(recorded("anthropic_forced_tool"))
    router = build_router(anthropic(upstream), http)

    response = await router.complete(ask(output_schema=SCHEMA))

    body = upstream.seen[0].body
    assert body["tool_choice"] == {"type": "tool", "name": "final_answer"}
    assert body["tools"][0]["name"] == "final_answer"
    assert body["tools"][0]["input_schema"] == SCHEMA
    assert json.loads(response.content or "") == {"name": "Ada", "age": 36}
    assert response.finish_reason == "stop"
    assert response.tool_calls == ()
    assert response.structured_mode == "tool"
    # Cached input tokens are input tokens (Anthropic's input_tokens leaves them out).
    assert response.usage == Usage(510, 40, cached_input_tokens=100)


async def test_work_tools_are_offered_unforced_and_tool_use_comes_back_as_tool_calls(
    upstream: Upstream, http: httpx.AsyncClient
) -> None:
    upstream.script(recorded("anthropic_tool_use"))
    router = build_router(anthropic(upstream), http)

    response = await router.complete(ask(output_schema=SCHEMA, tools=(WEATHER,)))

    body = upstream.seen[0].body
    assert body["tools"] == [
        {
            "name": "get_weather",
            "description": "Current weather",
            "input_schema": {"type": "object", "properties": {"location": {}}},
        }
    ]
    assert "tool_choice" not in body
    assert response.finish_reason == "tool_calls"
    assert response.content == "I'll check the current weather in Boston for you."
    assert response.tool_calls == (
        ToolCall("toolu_01A09q90qw90lq917835lq9", "get_weather", '{"location": "Boston, MA"}'),
    )
    assert response.structured_mode == "prompt"


async def test_tool_calls_and_results_become_blocks_with_results_first(
    upstream: Upstream, http: httpx.AsyncClient
) -> None:
    upstream.script(recorded("anthropic_success"))
    calls = (
        ToolCall("toolu_1", "get_weather", '{"location": "Paris"}'),
        ToolCall("toolu_2", "get_weather", "not json"),
    )
    messages = (
        Message("user", "Weather in Paris and Rome?"),
        Message("assistant", "Checking.", tool_calls=calls),
        Message("tool", "18C", tool_call_id="toolu_1"),
        Message("tool", "21C", tool_call_id="toolu_2"),
        Message("user", "Now answer."),
    )
    await build_router(anthropic(upstream), http).complete(LLMRequest(messages=messages))

    assert upstream.seen[0].body["messages"] == [
        {"role": "user", "content": [{"type": "text", "text": "Weather in Paris and Rome?"}]},
        {
            "role": "assistant",
            "content": [
                {"type": "text", "text": "Checking."},
                {
                    "type": "tool_use",
                    "id": "toolu_1",
                    "name": "get_weather",
                    "input": {"location": "Paris"},
                },
                {
                    "type": "tool_use",
                    "id": "toolu_2",
                    "name": "get_weather",
                    "input": {"raw_arguments": "not json"},
                },
            ],
        },
        {
            "role": "user",
            "content": [
                {"type": "tool_result", "tool_use_id": "toolu_1", "content": "18C"},
                {"type": "tool_result", "tool_use_id": "toolu_2", "content": "21C"},
                {"type": "text", "text": "Now answer."},
            ],
        },
    ]


async def test_max_tokens_is_length(upstream: Upstream, http: httpx.AsyncClient) -> None:
    upstream.script(recorded("anthropic_max_tokens"))
    response = await build_router(anthropic(upstream), http).complete(ask())

    assert response.finish_reason == "length"
    assert response.content == "Ada Lovelace (1815–1852) was an English mathematician and"


async def test_refusal_is_an_answer_with_a_refusal_text(
    upstream: Upstream, http: httpx.AsyncClient
) -> None:
    upstream.script(recorded("anthropic_refusal"))
    response = await build_router(anthropic(upstream), http).complete(ask(output_schema=SCHEMA))

    assert response.finish_reason == "refusal"
    assert response.refusal
    assert response.content is None


async def test_overloaded_529_is_unavailable_and_retried(
    upstream: Upstream, http: httpx.AsyncClient
) -> None:
    upstream.script(recorded("anthropic_overloaded_529"), recorded("anthropic_success"))
    response = await build_router(anthropic(upstream), http).complete(ask())

    assert response.transport_retries == 1
    assert response.content == "Hello! How can I help you today?"


async def test_overloaded_529_after_every_attempt_raises_unavailable(
    upstream: Upstream, http: httpx.AsyncClient
) -> None:
    upstream.script(recorded("anthropic_overloaded_529"))
    with pytest.raises(ProviderUnavailable, match=r"p is overloaded \(529\)"):
        await build_router(anthropic(upstream, max_attempts=2), http).complete(ask())


async def test_rate_limit_waits_for_retry_after(
    upstream: Upstream, http: httpx.AsyncClient
) -> None:
    upstream.script(recorded("anthropic_429"), recorded("anthropic_success"))
    response = await build_router(anthropic(upstream), http).complete(ask())

    assert response.transport_retries == 1
    assert response.transport_wait_ms == 12_000


async def test_rate_limit_without_retry_after_reads_the_ratelimit_reset_headers(
    upstream: Upstream, http: httpx.AsyncClient
) -> None:
    reply = recorded("anthropic_429")
    headers = {k: v for k, v in reply.headers.items() if k != "retry-after"}
    upstream.script(Reply(429, reply.body, headers))

    with pytest.raises(ProviderRateLimited) as caught:
        await build_router(anthropic(upstream, max_attempts=1), http).complete(ask())

    # The recorded reset lies in the past: wait nothing extra, but the header was read.
    assert caught.value.retry_after_s == 0.0


@pytest.mark.parametrize(
    ("name", "error", "says"),
    [
        ("anthropic_prompt_too_long", ProviderTokenLimit, "prompt is too long"),
        ("anthropic_401", ProviderConfigError, r"p rejected the credentials \(401\)"),
    ],
)
async def test_non_retryable_errors_are_sent_once(
    upstream: Upstream, http: httpx.AsyncClient, name: str, error: type[Exception], says: str
) -> None:
    upstream.script(recorded(name))
    with pytest.raises(error, match=says):
        await build_router(anthropic(upstream), http).complete(ask())
    assert len(upstream.seen) == 1


def test_a_non_object_schema_is_wrapped_for_the_tool_and_unwrapped_from_its_input() -> None:
    schema = {"type": "array", "items": {"type": "integer"}}
    spec = ModelConfig(provider="p", name="claude")
    body, wrapped = request_body(ask(output_schema=schema), spec=spec, mechanism="tool")

    assert wrapped
    assert body["tools"][0]["input_schema"] == {
        "type": "object",
        "properties": {"value": schema},
        "required": ["value"],
    }
    answer = recorded("anthropic_forced_tool").body
    answer["content"][0]["input"] = {"value": [1, 2, 3]}
    response = parse_response(answer, model="c", provider="p", mechanism="tool", wrapped=True)
    assert response.content == "[1, 2, 3]"
