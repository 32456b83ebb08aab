"""The OpenAI-compatible adapter over real loopback HTTP, against recorded response bodies."""

from __future__ import annotations

import json
import re
import socket
from typing import Any

import httpx
import pytest

from app.core.turn.model import LLMRequest, Message, ToolCall, ToolSpec, Usage
from app.core.wire.errors import (
    ProviderConfigError,
    ProviderRateLimited,
    ProviderTimeout,
    ProviderTokenLimit,
    ProviderUnavailable,
)
from app.providers.router import build_router
from tests.providers.upstream import TEST_KEY, Reply, Upstream, one_model, recorded

SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {"name": {"type": "string"}, "age": {"type": "integer"}},
    "required": ["name", "age"],
    "additionalProperties": False,
}
WEATHER = ToolSpec(
    "get_weather",
    "Current weather for a place",
    {"type": "object", "properties": {"location": {"type": "string"}}},
)


def ask(**fields: Any) -> LLMRequest:
    messages = (Message("system", "You extract people."), Message("user", "Ada, 36"))
    return LLMRequest(messages=messages, **fields)


async def test_success_translates_content_usage_and_who_answered(
    upstream: Upstream, http: httpx.AsyncClient
) -> None:
    upstream.script(recorded("openai_success"))
    router = build_router(one_model(upstream.url, model="gpt-4o-mini"), http)

    response = await router.complete(ask(output_schema=SCHEMA, temperature=0.2, seed=7))

    assert response.content == '{"name": "Ada", "age": 36}'
    assert response.finish_reason == "stop"
    assert response.usage == Usage(19, 10)
    assert (response.model, response.provider) == ("gpt-4o-mini", "p")
    assert response.structured_mode == "json_schema"
    assert response.refusal is None
    assert response.transport_retries == 0
    seen = upstream.seen[0]
    assert seen.path == "/v1/chat/completions"
    assert seen.headers["authorization"] == f"Bearer {TEST_KEY}"
    assert seen.body == {
        "model": "gpt-4o-mini",
        "messages": [
            {"role": "system", "content": "You extract people."},
            {"role": "user", "content": "Ada, 36"},
        ],
        "max_tokens": 1024,
        "temperature": 0.2,
        "seed": 7,
        "response_format": {
            "type": "json_schema",
            "json_schema": {"name": "output", "schema": SCHEMA, "strict": True},
        },
    }


async def test_max_completion_tokens_is_sent_when_configured_and_capped_by_the_model(
    upstream: Upstream, http: httpx.AsyncClient
) -> None:
    upstream.script(recorded("openai_success"))
    config = one_model(
        upstream.url, max_tokens_field="max_completion_tokens", max_output_tokens=256
    )
    await build_router(config, http).complete(ask(max_output_tokens=4096))

    body = upstream.seen[0].body
    assert body["max_completion_tokens"] == 256
    assert "max_tokens" not in body


@pytest.mark.parametrize(
    ("structured", "expected"),
    [
        ("json_object_schema", {"type": "json_object", "schema": SCHEMA}),
        ("json_object", {"type": "json_object"}),
        ("prompt", None),
    ],
)
async def test_response_format_follows_the_model_capability(
    upstream: Upstream, http: httpx.AsyncClient, structured: str, expected: object
) -> None:
    upstream.script(recorded("openai_success"))
    router = build_router(one_model(upstream.url, structured=structured), http)

    response = await router.complete(ask(output_schema=SCHEMA))

    assert upstream.seen[0].body.get("response_format") == expected
    assert response.structured_mode == {"prompt": "prompt"}.get(structured, "json_object")


@pytest.mark.parametrize(
    ("structured", "bounded"),
    [("json_object_schema", True), ("json_schema", False), ("json_object", False)],
)
async def test_max_items_bounds_the_lists_of_a_grammar_compiled_schema_only(
    upstream: Upstream, http: httpx.AsyncClient, structured: str, bounded: bool
) -> None:
    # After an answer ran away in a list, llama.cpp's grammar gets the lists bounded; a
    # provider that enforces the schema on its own terms gets the job's schema as it is.
    upstream.script(recorded("openai_success"))
    router = build_router(one_model(upstream.url, structured=structured), http)
    schema = {"type": "object", "properties": {"v": {"type": "array"}}, "required": ["v"]}

    await router.complete(ask(output_schema=schema, max_items=4))

    sent = json.dumps(upstream.seen[0].body.get("response_format"))
    assert ('"maxItems": 4' in sent) is bounded


async def test_structured_output_prompt_sends_no_response_format(
    upstream: Upstream, http: httpx.AsyncClient
) -> None:
    upstream.script(recorded("openai_success"))
    router = build_router(one_model(upstream.url), http)

    response = await router.complete(ask(output_schema=SCHEMA, structured_output="prompt"))

    assert "response_format" not in upstream.seen[0].body
    assert response.structured_mode == "prompt"


async def test_tools_on_the_turn_suppress_response_format_and_tool_calls_come_back(
    upstream: Upstream, http: httpx.AsyncClient
) -> None:
    upstream.script(recorded("openai_tool_calls"))
    router = build_router(one_model(upstream.url), http)

    response = await router.complete(ask(output_schema=SCHEMA, tools=(WEATHER,)))

    body = upstream.seen[0].body
    assert "response_format" not in body
    assert body["tools"] == [
        {
            "type": "function",
            "function": {
                "name": "get_weather",
                "description": "Current weather for a place",
                "parameters": {"type": "object", "properties": {"location": {"type": "string"}}},
            },
        }
    ]
    assert response.finish_reason == "tool_calls"
    assert response.content is None
    assert response.tool_calls == (
        ToolCall("call_abc123", "get_weather", '{"location": "Boston, MA"}'),
    )
    assert response.structured_mode == "prompt"


async def test_assistant_tool_calls_and_tool_results_are_sent_in_openai_form(
    upstream: Upstream, http: httpx.AsyncClient
) -> None:
    upstream.script(recorded("openai_success"))
    call = ToolCall("call_1", "get_weather", '{"location": "Paris"}')
    messages = (
        Message("user", "Weather in Paris?", name="alice"),
        Message("assistant", "", tool_calls=(call,)),
        Message("tool", "18C, sunny", tool_call_id="call_1", name="get_weather"),
    )
    await build_router(one_model(upstream.url), http).complete(LLMRequest(messages=messages))

    assert upstream.seen[0].body["messages"] == [
        {"role": "user", "content": "Weather in Paris?", "name": "alice"},
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [
                {
                    "id": "call_1",
                    "type": "function",
                    "function": {"name": "get_weather", "arguments": '{"location": "Paris"}'},
                }
            ],
        },
        {"role": "tool", "tool_call_id": "call_1", "content": "18C, sunny"},
    ]


async def test_tool_capability_forces_the_output_tool_and_returns_its_arguments_as_content(
    upstream: Upstream, http: httpx.AsyncClient
) -> None:
    upstream.script(recorded("openai_forced_tool"))
    router = build_router(one_model(upstream.url, structured="tool"), http)

    response = await router.complete(ask(output_schema=SCHEMA))

    body = upstream.seen[0].body
    assert body["tool_choice"] == {"type": "function", "function": {"name": "final_answer"}}
    assert body["tools"][0]["function"]["parameters"] == SCHEMA
    assert "response_format" not in body
    assert response.content == '{"name":"Ada","age":36}'
    assert response.tool_calls == ()
    assert response.finish_reason == "stop"
    assert response.structured_mode == "tool"


async def test_refusal_is_an_answer_not_an_exception(
    upstream: Upstream, http: httpx.AsyncClient
) -> None:
    upstream.script(recorded("openai_refusal"))
    response = await build_router(one_model(upstream.url), http).complete(ask(output_schema=SCHEMA))

    assert response.finish_reason == "refusal"
    assert response.refusal == "I'm sorry, I can't assist with that request."
    assert response.content is None


async def test_content_filter_is_an_answer_with_a_refusal_text(
    upstream: Upstream, http: httpx.AsyncClient
) -> None:
    upstream.script(recorded("openai_content_filter"))
    response = await build_router(one_model(upstream.url), http).complete(ask())

    assert response.finish_reason == "content_filter"
    assert response.refusal


async def test_length_is_an_answer_with_the_truncated_content(
    upstream: Upstream, http: httpx.AsyncClient
) -> None:
    upstream.script(recorded("openai_length"))
    response = await build_router(one_model(upstream.url), http).complete(ask())

    assert response.finish_reason == "length"
    assert response.content is not None
    assert response.content.startswith('{"name": "Ada"')


@pytest.mark.parametrize(
    ("name", "error", "says"),
    [
        ("openai_context_length_exceeded", ProviderTokenLimit, "context window of model m"),
        ("llamacpp_context_exceeded", ProviderTokenLimit, "available context size"),
        ("openai_bad_request", ProviderConfigError, "p rejected the request (400)"),
        ("openai_401", ProviderConfigError, "p rejected the credentials (401) for model m"),
        ("openai_404", ProviderConfigError, "p does not know model m"),
    ],
)
async def test_non_retryable_errors_are_classified_and_sent_once(
    upstream: Upstream,
    http: httpx.AsyncClient,
    name: str,
    error: type[Exception],
    says: str,
) -> None:
    upstream.script(recorded(name))
    router = build_router(one_model(upstream.url), http)

    with pytest.raises(error, match=re.escape(says)) as caught:
        await router.complete(ask())

    assert len(upstream.seen) == 1
    assert getattr(caught.value, "transport_retries", None) == 0


@pytest.mark.parametrize(
    ("name", "error"),
    [
        ("openai_429", ProviderRateLimited),
        ("openai_500", ProviderUnavailable),
        ("openai_503", ProviderUnavailable),
        ("malformed_body", ProviderUnavailable),
    ],
)
async def test_transient_errors_are_retried_up_to_max_attempts(
    upstream: Upstream, http: httpx.AsyncClient, name: str, error: type[Exception]
) -> None:
    upstream.script(recorded(name))
    router = build_router(one_model(upstream.url, max_attempts=3), http)

    with pytest.raises(error) as caught:
        await router.complete(ask())

    assert len(upstream.seen) == 3
    assert getattr(caught.value, "transport_retries", None) == 2
    assert getattr(caught.value, "transport_wait_ms", 0) > 0


async def test_rate_limit_carries_retry_after(upstream: Upstream, http: httpx.AsyncClient) -> None:
    upstream.script(recorded("openai_429"))
    router = build_router(one_model(upstream.url, max_attempts=1), http)

    with pytest.raises(ProviderRateLimited) as caught:
        await router.complete(ask())

    assert caught.value.retry_after_s == 7.0


async def test_a_slow_provider_times_out_per_attempt(
    upstream: Upstream, http: httpx.AsyncClient
) -> None:
    # Long enough that a busy machine still gets both requests to the upstream in time.
    upstream.script(recorded("openai_success", delay_s=1.5))
    router = build_router(one_model(upstream.url, max_attempts=2, timeout_s=0.5), http)

    with pytest.raises(ProviderTimeout, match=r"did not answer within 0\.5s"):
        await router.complete(ask())

    assert len(upstream.seen) == 2


async def test_a_refused_connection_is_unavailable(http: httpx.AsyncClient) -> None:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    router = build_router(one_model(f"http://127.0.0.1:{port}", max_attempts=2), http)

    with pytest.raises(ProviderUnavailable, match="connection failed") as caught:
        await router.complete(ask())

    assert caught.value.transport_retries == 1


async def test_ollama_style_object_arguments_become_json_text(
    upstream: Upstream, http: httpx.AsyncClient
) -> None:
    body = recorded("openai_tool_calls").body
    body["choices"][0]["message"]["tool_calls"][0]["function"]["arguments"] = {"location": "Rome"}
    body["choices"][0]["finish_reason"] = "stop"
    upstream.script(Reply(200, body))

    response = await build_router(one_model(upstream.url, key=None), http).complete(ask())

    assert "authorization" not in upstream.seen[0].headers
    assert response.tool_calls[0].arguments == '{"location": "Rome"}'
    assert response.finish_reason == "tool_calls"
