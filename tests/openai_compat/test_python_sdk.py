"""The official ``openai`` Python package against ``POST /v1/chat/completions``: the
service on loopback (auth on, in-process worker), the simulator behind it.

Each structured request's first simulated answer is invalid; the SDK gets the validated
object, ``usage`` counts both calls, and the job record shows the re-ask.
"""

from __future__ import annotations

import asyncio
import json
import uuid
from collections.abc import Iterator
from typing import Any

import httpx
import openai
import pytest
from pydantic import BaseModel

from tests.service import KEYS, finished

MODEL = "sim-model"


class City(BaseModel):
    city: str
    population: int


def directive(script: list[Any]) -> str:
    """A unique prompt the simulator answers by ``script`` (counted per request text)."""
    rule = json.dumps({"script": script, "counter": "requests"})
    return f"Name a large city ({uuid.uuid4().hex[:8]}).\n[[sim {rule}]]"


@pytest.fixture
def client(api: str) -> Iterator[openai.OpenAI]:
    with openai.OpenAI(base_url=f"{api}/v1", api_key=KEYS["alice"], max_retries=0) as sdk:
        yield sdk


def job_of(api: str, job_id: str) -> dict[str, Any]:
    headers = {"Authorization": f"Bearer {KEYS['alice']}"}
    response = httpx.get(f"{api}/v1/jobs/{job_id}", headers=headers)
    assert response.status_code == 200
    body: dict[str, Any] = response.json()
    return body


def city_format() -> Any:
    return {
        "type": "json_schema",
        "json_schema": {"name": "city", "strict": True, "schema": City.model_json_schema()},
    }


def test_parse_gets_a_validated_object_after_an_invalid_first_answer(
    api: str, client: openai.OpenAI
) -> None:
    raw = client.chat.completions.with_raw_response.parse(
        model=MODEL,
        messages=[
            {"role": "system", "content": "Answer with a city."},
            {"role": "user", "content": directive(["missing_field", "ok"])},
        ],
        response_format=City,
    )
    completion = raw.parse()
    city = completion.choices[0].message.parsed
    assert isinstance(city, City)
    assert completion.choices[0].finish_reason == "stop"
    assert completion.object == "chat.completion"
    assert completion.model == MODEL
    job_id = raw.headers["x-reprompt-job-id"]
    assert completion.id == job_id
    assert raw.headers["x-reprompt-attempts"] == "2"
    assert float(raw.headers["x-reprompt-overhead-ms"]) >= 0
    job = job_of(api, job_id)
    turns = job["turns"]
    assert [t["outcome"] for t in turns] == ["invalid", "success"]
    usage = completion.usage
    assert usage is not None
    assert usage.prompt_tokens == sum(t["usage"]["inputTokens"] for t in turns)
    assert usage.completion_tokens == sum(t["usage"]["outputTokens"] for t in turns)
    assert usage.total_tokens == usage.prompt_tokens + usage.completion_tokens
    assert usage.prompt_tokens_details is not None
    assert (
        usage.prompt_tokens_details.cached_tokens == job["result"]["execution"]["cachedInputTokens"]
    )
    assert json.loads(completion.choices[0].message.content or "") == job["result"]["data"]


def test_async_client_and_json_object(api: str) -> None:
    """json_object: any JSON object is valid; the simulator, given no schema, answers prose,
    which is re-asked and never returned as an answer."""

    async def ask() -> tuple[Any, Exception]:
        async with openai.AsyncOpenAI(
            base_url=f"{api}/v1", api_key=KEYS["alice"], max_retries=0
        ) as client:
            strict = await client.chat.completions.create(
                model=MODEL,
                messages=[{"role": "user", "content": directive(["missing_field", "ok"])}],
                response_format=city_format(),
            )
            try:
                await client.chat.completions.create(
                    model=MODEL,
                    messages=[{"role": "user", "content": directive(["ok"])}],
                    response_format={"type": "json_object"},
                    extra_body={"reprompt": {"maxTurns": 2}},
                )
            except openai.UnprocessableEntityError as exc:
                return strict, exc
            raise AssertionError("prose came back as a JSON object")

    strict, refused = asyncio.run(ask())
    City.model_validate_json(strict.choices[0].message.content)
    assert strict.usage.prompt_tokens > 0
    assert isinstance(refused, openai.UnprocessableEntityError)
    assert refused.code == "budget-exhausted"
    assert "not valid JSON" in refused.message


def test_streaming_sends_the_valid_answer_and_usage(api: str, client: openai.OpenAI) -> None:
    stream = client.chat.completions.create(
        model=MODEL,
        messages=[{"role": "user", "content": directive(["missing_field", "ok"])}],
        response_format=city_format(),
        stream=True,
        stream_options={"include_usage": True},
    )
    text = ""
    finish = None
    usage = None
    ids = set()
    for chunk in stream:
        ids.add(chunk.id)
        assert chunk.object == "chat.completion.chunk"
        if chunk.usage is not None:
            usage = chunk.usage
        for choice in chunk.choices:
            text += choice.delta.content or ""
            finish = choice.finish_reason or finish
    City.model_validate_json(text)
    assert finish == "stop"
    assert usage is not None
    assert usage.total_tokens > 0
    (job_id,) = ids
    assert [t["outcome"] for t in job_of(api, job_id)["turns"]] == ["invalid", "success"]


def test_streaming_helper_of_the_sdk(api: str, client: openai.OpenAI) -> None:
    with client.chat.completions.stream(
        model=MODEL,
        messages=[{"role": "user", "content": directive(["missing_field", "ok"])}],
        response_format=City,
    ) as stream:
        final = stream.get_final_completion()
    assert isinstance(final.choices[0].message.parsed, City)


def test_a_spent_budget_is_an_error_never_an_invalid_answer(
    api: str, client: openai.OpenAI
) -> None:
    with pytest.raises(openai.UnprocessableEntityError) as caught:
        client.chat.completions.create(
            model=MODEL,
            messages=[{"role": "user", "content": directive(["missing_field"] * 4)}],
            response_format=city_format(),
            extra_body={"reprompt": {"maxTurns": 1, "returnRetries": 1, "retryMode": "whole"}},
        )
    error = caught.value
    assert error.code in ("budget-exhausted", "llm-invalid-output")
    assert "missing required field" in error.message  # the last diagnosis
    job_id = error.response.headers["x-reprompt-job-id"]
    assert len(job_of(api, job_id)["turns"]) == 2
    assert error.response.headers["x-reprompt-attempts"] == "2"
    assert error.response.headers["x-should-retry"] == "false"  # the SDKs' own retries: off


def test_bad_requests_raise_the_sdks_types(api: str, client: openai.OpenAI) -> None:
    with (
        openai.OpenAI(base_url=f"{api}/v1", api_key="not-a-key", max_retries=0) as stranger,
        pytest.raises(openai.AuthenticationError),
    ):
        stranger.chat.completions.create(model=MODEL, messages=[{"role": "user", "content": "hi"}])
    with pytest.raises(openai.BadRequestError) as caught:
        client.chat.completions.create(
            model=MODEL, messages=[{"role": "user", "content": "hi"}], n=2
        )
    assert caught.value.param == "n"
    with pytest.raises(openai.BadRequestError) as bad:
        client.chat.completions.create(
            model=MODEL,
            messages=[{"role": "user", "content": "hi"}],
            response_format=city_format(),
            extra_body={"reprompt": {"maxTurns": 0}},
        )
    assert bad.value.param == "reprompt.maxTurns"
    assert bad.value.code == "invalid-input"
    with pytest.raises(openai.NotFoundError):
        client.chat.completions.create(
            model="gpt-nothing", messages=[{"role": "user", "content": "hi"}]
        )


def test_plain_call_is_passed_through_and_ignored_fields_named(
    api: str, client: openai.OpenAI
) -> None:
    raw = client.chat.completions.with_raw_response.create(
        model=MODEL,
        messages=[{"role": "user", "content": "Say hello."}],
        top_p=0.5,
        user="someone",
    )
    completion = raw.parse()
    assert completion.choices[0].message.role == "assistant"
    assert completion.choices[0].message.content
    assert completion.usage is not None
    assert completion.usage.total_tokens > 0
    assert raw.headers["x-reprompt-attempts"] == "1"
    assert raw.headers["x-reprompt-warning"] == "ignored: top_p, user"


def test_tool_arguments_are_checked_and_re_asked(api: str, client: openai.OpenAI) -> None:
    tool: Any = {
        "type": "function",
        "function": {
            "name": "lookup",
            "description": "Find a city's population.",
            "parameters": {
                "type": "object",
                "properties": {"city": {"type": "string"}},
                "required": ["city"],
                "additionalProperties": False,
            },
        },
    }
    script = [
        {"call": [{"name": "lookup", "arguments": {"city": 7}}]},
        {"call": [{"name": "lookup", "arguments": {"city": "Lyon"}}]},
        "ok",
    ]
    rule = json.dumps({"script": script, "counter": "requests"})
    messages: list[Any] = [
        {
            "role": "user",
            "content": f"How many live in Lyon? ({uuid.uuid4().hex[:8]})\n[[sim {rule}]]",
        }
    ]
    raw = client.chat.completions.with_raw_response.create(
        model=MODEL,
        messages=messages,
        tools=[tool],
    )
    completion = raw.parse()
    choice = completion.choices[0]
    assert choice.finish_reason == "tool_calls"
    (call,) = choice.message.tool_calls or []
    assert call.type == "function"
    assert json.loads(call.function.arguments) == {"city": "Lyon"}
    assert raw.headers["x-reprompt-attempts"] == "2"
    assert completion.usage is not None
    assert completion.usage.prompt_tokens > 0
    # The caller runs the tool and sends its result back in the next request.
    messages += [
        choice.message.model_dump(exclude_none=True),
        {"role": "tool", "tool_call_id": call.id, "content": '{"population": 522250}'},
    ]
    answer = client.chat.completions.create(model=MODEL, messages=messages, tools=[tool])
    assert answer.choices[0].finish_reason == "stop"
    assert answer.choices[0].message.content
    assert not answer.choices[0].message.tool_calls


def test_models_list_parses_in_the_sdk(client: openai.OpenAI) -> None:
    listed = {model.id: model for model in client.models.list()}
    assert set(listed) == {MODEL, "fast"}
    model = listed[MODEL]
    assert model.object == "model"
    assert model.owned_by == "sim"
    assert model.created > 0
    assert model.model_extra is not None
    assert model.model_extra["circuit"] == {"state": "closed", "failures": 0}
    assert client.models.retrieve("fast") == listed["fast"]
    with pytest.raises(openai.NotFoundError):
        client.models.retrieve("gpt-nothing")
    assert listed["fast"].model_extra == {
        "provider": None,
        "circuit": None,
        "price": None,
        "route": [MODEL],
    }


def test_tools_with_a_json_response_format(api: str, client: openai.OpenAI) -> None:
    """The model may call a tool (arguments checked and re-asked by the job) or answer; the
    answer is validated against the response format and re-asked like any job's."""
    tool: Any = {
        "type": "function",
        "function": {
            "name": "lookup",
            "description": "Find a city's population.",
            "strict": True,  # the SDK's parse() takes strict tools only
            "parameters": {
                "type": "object",
                "properties": {"city": {"type": "string"}},
                "required": ["city"],
                "additionalProperties": False,
            },
        },
    }
    script = [
        {"call": [{"name": "lookup", "arguments": {"city": 7}}]},
        {"call": [{"name": "lookup", "arguments": {"city": "Lyon"}}]},
        "missing_field",
        "ok",
    ]
    rule = json.dumps({"script": script, "counter": "requests"})
    messages: list[Any] = [
        {"role": "user", "content": f"Population of Lyon? ({uuid.uuid4().hex[:8]})\n[[sim {rule}]]"}
    ]
    raw = client.chat.completions.with_raw_response.create(
        model=MODEL, messages=messages, tools=[tool], response_format=city_format()
    )
    asked = raw.parse()
    choice = asked.choices[0]
    assert choice.finish_reason == "tool_calls"
    (call,) = choice.message.tool_calls or []
    assert call.type == "function"
    assert json.loads(call.function.arguments) == {"city": "Lyon"}
    assert raw.headers["x-reprompt-attempts"] == "2"
    first = job_of(api, asked.id)
    assert [t["outcome"] for t in first["turns"]] == ["tool_calls", "tool_calls"]
    assert asked.usage is not None
    assert asked.usage.prompt_tokens == sum(t["usage"]["inputTokens"] for t in first["turns"])
    messages += [
        choice.message.model_dump(exclude_none=True),
        {"role": "tool", "tool_call_id": call.id, "content": '{"population": 522250}'},
    ]
    answer = client.chat.completions.parse(
        model=MODEL, messages=messages, tools=[tool], response_format=City
    )
    assert answer.choices[0].finish_reason == "stop"
    assert isinstance(answer.choices[0].message.parsed, City)
    assert [t["outcome"] for t in job_of(api, answer.id)["turns"]] == ["invalid", "success"]


def test_streaming_sends_validated_partials_then_the_valid_content(client: openai.OpenAI) -> None:
    """The rejected attempt shows only in reprompt's extension (its partials, then
    partial_discarded); the content comes once, from the answer that passed."""
    stream = client.chat.completions.create(
        model=MODEL,
        messages=[{"role": "user", "content": directive(["missing_field", "ok"])}],
        response_format=city_format(),
        stream=True,
    )
    seen: list[tuple[str, Any]] = []
    for chunk in stream:
        extension = (chunk.model_extra or {}).get("reprompt")
        if extension is not None:
            assert chunk.choices[0].delta.content is None
            seen.append((extension["event"], extension))
        for choice in chunk.choices:
            if choice.delta.content:
                seen.append(("content", choice.delta.content))
    names = [name for name, _ in seen]
    discarded = names.index("partial_discarded")
    assert "partial" in names[discarded + 1 :]  # the next attempt's partials
    first_content = names.index("content")
    assert discarded < first_content
    assert set(names[first_content:]) == {"content"}  # nothing after the content began
    text = "".join(value for name, value in seen if name == "content")
    last_partial = [value for name, value in seen if name == "partial"][-1]
    assert "$" in last_partial["complete"]
    assert json.loads(text) == last_partial["data"]
    City.model_validate_json(text)


def test_a_stream_whose_budget_is_spent_ends_in_an_error_event(
    api: str, client: openai.OpenAI
) -> None:
    stream = client.chat.completions.create(
        model=MODEL,
        messages=[{"role": "user", "content": directive(["missing_field"] * 3)}],
        response_format=city_format(),
        stream=True,
        extra_body={"reprompt": {"maxTurns": 1, "returnRetries": 1, "retryMode": "whole"}},
    )
    contents: list[str] = []

    def read() -> None:
        for chunk in stream:
            contents.extend(c.delta.content for c in chunk.choices if c.delta.content)

    with pytest.raises(openai.APIError) as caught:
        read()
    assert contents == []  # no content of an answer that did not pass
    assert "missing required field" in caught.value.message
    body: Any = caught.value.body
    assert body["code"] in ("budget-exhausted", "llm-invalid-output")
    assert len(job_of(api, body["job_id"])["turns"]) == 2


def test_leaving_a_stream_cancels_its_job(api: str, client: openai.OpenAI) -> None:
    stream = client.chat.completions.create(
        model=MODEL,
        messages=[{"role": "user", "content": directive(["slow", "ok"])}],
        response_format=city_format(),
        stream=True,
    )
    first = next(iter(stream))
    stream.close()
    with httpx.Client(base_url=api, headers={"authorization": f"Bearer {KEYS['alice']}"}) as http:
        assert finished(http, first.id)["status"] == "cancelled"


def test_a_streamed_json_job_that_calls_a_tool_streams_the_call(client: openai.OpenAI) -> None:
    tool: Any = {
        "type": "function",
        "function": {
            "name": "lookup",
            "parameters": {"type": "object", "properties": {"city": {"type": "string"}}},
        },
    }
    script = [{"call": [{"name": "lookup", "arguments": {"city": "Lyon"}}]}]
    rule = json.dumps({"script": script, "counter": "requests"})
    stream = client.chat.completions.create(
        model=MODEL,
        messages=[{"role": "user", "content": f"Lyon? ({uuid.uuid4().hex[:8]})\n[[sim {rule}]]"}],
        tools=[tool],
        response_format=city_format(),
        stream=True,
    )
    calls = []
    finish = None
    for chunk in stream:
        for choice in chunk.choices:
            assert not choice.delta.content
            calls += choice.delta.tool_calls or []
            finish = choice.finish_reason or finish
    assert finish == "tool_calls"
    (call,) = calls
    assert call.function is not None
    assert call.function.name == "lookup"
    assert json.loads(call.function.arguments or "") == {"city": "Lyon"}
