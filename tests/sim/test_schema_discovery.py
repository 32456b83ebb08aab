"""Where the simulator finds the schema it answers: format, forced tool, or message text."""

from __future__ import annotations

import json
from typing import Any

import httpx
import jsonschema
import pytest

from tests.sim.bodies import ORDER_SCHEMA, anthropic, msg, openai, openai_text

POINT = {
    "type": "object",
    "properties": {"x": {"type": "integer"}, "y": {"type": "integer"}},
    "required": ["x", "y"],
    "additionalProperties": False,
}


def _answer(client: httpx.Client, body: dict[str, Any]) -> Any:
    return json.loads(openai_text(client.post("/v1/chat/completions", json=body).json()))


def test_response_format_json_schema(client: httpx.Client) -> None:
    jsonschema.validate(_answer(client, openai(msg("user", "go"), schema=POINT)), POINT)


def test_response_format_json_object_with_a_schema(client: httpx.Client) -> None:
    body = openai(msg("user", "go"), schema=None)
    body["response_format"] = {"type": "json_object", "schema": POINT}

    jsonschema.validate(_answer(client, body), POINT)


def test_the_output_tool_is_the_answer_channel_beside_client_tools(client: httpx.Client) -> None:
    tools = [
        {"type": "function", "function": {"name": "lookup", "parameters": ORDER_SCHEMA}},
        {"type": "function", "function": {"name": "final_answer", "parameters": POINT}},
    ]
    body = openai(msg("user", "go"), schema=None, tools=tools, tool_choice="required")

    r = client.post("/v1/chat/completions", json=body).json()

    (call,) = r["choices"][0]["message"]["tool_calls"]
    assert call["function"]["name"] == "final_answer"
    jsonschema.validate(json.loads(call["function"]["arguments"]), POINT)


@pytest.mark.parametrize("choice", [None, "auto", "required"])
def test_a_lone_client_tool_is_not_the_answer_channel(
    client: httpx.Client, choice: str | None
) -> None:
    tools = [{"type": "function", "function": {"name": "point", "parameters": POINT}}]
    prompt = f"Return a point. Schema: {json.dumps(POINT)}"
    body = openai(msg("user", prompt), schema=None, tools=tools)
    if choice is not None:
        body["tool_choice"] = choice

    r = client.post("/v1/chat/completions", json=body)

    message = r.json()["choices"][0]["message"]
    assert "tool_calls" not in message
    jsonschema.validate(json.loads(message["content"]), POINT)
    assert r.headers["x-sim-tools-offered"] == "1"


def test_tool_choice_picks_among_several_tools(client: httpx.Client) -> None:
    tools = [
        {"type": "function", "function": {"name": "order", "parameters": ORDER_SCHEMA}},
        {"type": "function", "function": {"name": "point", "parameters": POINT}},
    ]
    choice = {"type": "function", "function": {"name": "point"}}
    body = openai(msg("user", "go"), schema=None, tools=tools, tool_choice=choice)

    r = client.post("/v1/chat/completions", json=body).json()

    assert r["choices"][0]["message"]["tool_calls"][0]["function"]["name"] == "point"
    jsonschema.validate(json.loads(openai_text(r)), POINT)


def test_response_format_wins_over_a_tool(client: httpx.Client) -> None:
    tools = [{"type": "function", "function": {"name": "order", "parameters": ORDER_SCHEMA}}]
    body = openai(msg("user", "go"), schema=POINT, tools=tools, tool_choice="none")

    jsonschema.validate(_answer(client, body), POINT)


def test_schema_embedded_in_a_user_message(client: httpx.Client) -> None:
    prompt = f"Return a point.\nSchema:\n```json\n{json.dumps(POINT, indent=2)}\n```"

    jsonschema.validate(_answer(client, openai(msg("user", prompt), schema=None)), POINT)


def test_embedded_schema_recognised_by_dollar_schema(client: httpx.Client) -> None:
    schema = {"$schema": "https://json-schema.org/draft/2020-12/schema", "type": "array",
              "items": {"type": "string", "enum": ["red", "green"]}, "minItems": 2}  # fmt: skip
    prompt = f'Context {{"not": "a schema"}} then {json.dumps(schema)}'

    answer = _answer(client, openai(msg("system", prompt), msg("user", "go"), schema=None))

    jsonschema.validate(answer, schema)


def test_anthropic_schema_in_a_user_message(client: httpx.Client) -> None:
    body = anthropic(msg("user", f"Point please: {json.dumps(POINT)}"), tool_schema=None)

    r = client.post("/v1/messages", json=body).json()

    jsonschema.validate(json.loads(r["content"][0]["text"]), POINT)


def test_anthropic_any_answers_through_the_output_tool(client: httpx.Client) -> None:
    body = anthropic(msg("user", "go"), tool_schema=None)
    body["tools"] = [
        {"name": "lookup", "input_schema": ORDER_SCHEMA},
        {"name": "final_answer", "input_schema": POINT},
    ]
    body["tool_choice"] = {"type": "any"}

    r = client.post("/v1/messages", json=body).json()

    (block,) = r["content"]
    assert block["name"] == "final_answer"
    jsonschema.validate(block["input"], POINT)


def test_anthropic_any_with_only_a_client_tool_answers_in_text(client: httpx.Client) -> None:
    body = anthropic(msg("user", f"A point: {json.dumps(POINT)}"), tool_schema=None)
    body["tools"] = [{"name": "point", "input_schema": POINT}]
    body["tool_choice"] = {"type": "any"}

    r = client.post("/v1/messages", json=body).json()

    assert [b["type"] for b in r["content"]] == ["text"]
    jsonschema.validate(json.loads(r["content"][0]["text"]), POINT)


def test_json_mode_without_a_schema_still_answers_an_object(client: httpx.Client) -> None:
    body = openai(msg("user", "Describe the weather."), schema=None)
    body["response_format"] = {"type": "json_object"}

    assert isinstance(_answer(client, body), dict)


@pytest.mark.parametrize(
    "text",
    ["Just talk to me.", 'A JSON object {"type": "point"} is not a schema without properties.'],
)
def test_no_schema_means_plain_text(client: httpx.Client, text: str) -> None:
    r = client.post("/v1/chat/completions", json=openai(msg("user", text), schema=None)).json()

    content = r["choices"][0]["message"]["content"]
    with pytest.raises(json.JSONDecodeError):
        json.loads(content)
