"""Hostile chat completions requests (POST /v1/chat/completions): each an error in OpenAI's
shape naming the field (``param``), nothing queued, nothing reaching a model.

The service has small caps (tests/service.py CAPS): 32 KiB bodies, 4000-character tasks,
2 KiB schemas.
"""

from __future__ import annotations

from typing import Any

import httpx
import pytest

from tests.service import CAPS

ROUTE = "/v1/chat/completions"
SCHEMA_PARAM = "response_format.json_schema.schema"
SCHEMA = {
    "type": "object",
    "properties": {"city": {"type": "string"}},
    "required": ["city"],
}


def chat(**extra: Any) -> dict[str, Any]:
    return {
        "model": "sim-model",
        "messages": [{"role": "user", "content": "Name a city."}],
        "response_format": {
            "type": "json_schema",
            "json_schema": {"name": "city", "schema": SCHEMA},
        },
        **extra,
    }


def refused(response: httpx.Response, status: int, param: str | None) -> dict[str, Any]:
    assert response.status_code == status, response.text
    error: dict[str, Any] = response.json()["error"]
    assert error["param"] == param, error
    assert error["message"]
    return error


def image(url: str) -> dict[str, Any]:
    return {"type": "image_url", "image_url": {"url": url}}


@pytest.mark.parametrize(
    "url",
    [
        "http://169.254.169.254/latest/meta-data/",  # the cloud's metadata service
        "http://127.0.0.1:6379/",
        "file:///etc/passwd",
        "data:image/png;base64," + "A" * 1000,
    ],
)
def test_image_parts_are_refused_and_never_fetched(alice: httpx.Client, url: str) -> None:
    body = chat(messages=[{"role": "user", "content": [{"type": "text", "text": "?"}, image(url)]}])
    error = refused(alice.post(ROUTE, json=body), 400, "messages[0].content[1]")
    assert "image_url parts are not supported" in error["message"]
    assert url not in error["message"]


def test_too_many_messages_or_parts(alice: httpx.Client) -> None:
    many = [{"role": "user", "content": "x"}] * 257
    refused(alice.post(ROUTE, json=chat(messages=many)), 400, "messages")
    parts = [{"type": "text", "text": "x"}] * 2
    body = chat(messages=[{"role": "user", "content": parts}] * 2, n=5)
    refused(alice.post(ROUTE, json=body), 400, "n")


def test_text_over_the_task_cap(alice: httpx.Client) -> None:
    long = "a" * (CAPS["max_task_chars"] + 1)
    body = chat(messages=[{"role": "user", "content": long}])
    refused(alice.post(ROUTE, json=body), 400, "messages")
    plain = {"model": "sim-model", "messages": [{"role": "user", "content": long}]}
    refused(alice.post(ROUTE, json=plain), 400, "messages")


def test_a_body_over_the_cap_is_413(alice: httpx.Client) -> None:
    body = chat(messages=[{"role": "user", "content": "a" * CAPS["max_body_bytes"]}])
    assert alice.post(ROUTE, json=body).status_code == 413


def test_a_schema_over_its_caps(alice: httpx.Client) -> None:
    wide = {"type": "object", "properties": {f"f{i}": {"type": "string"} for i in range(200)}}
    fmt = {"type": "json_schema", "json_schema": {"name": "x", "schema": wide}}
    refused(alice.post(ROUTE, json=chat(response_format=fmt)), 400, SCHEMA_PARAM)
    deep: dict[str, Any] = {"type": "string"}
    for _ in range(CAPS["max_schema_depth"] + 2):
        deep = {"type": "array", "items": deep}
    fmt = {"type": "json_schema", "json_schema": {"name": "x", "schema": deep}}
    refused(alice.post(ROUTE, json=chat(response_format=fmt)), 400, SCHEMA_PARAM)


def test_reprompt_options_are_checked(alice: httpx.Client) -> None:
    body = chat(reprompt={"maxTurns": 500})
    refused(alice.post(ROUTE, json=body), 400, "reprompt.maxTurns")
    plain = {"model": "sim-model", "messages": [{"role": "user", "content": "x"}]}
    body = {**plain, "reprompt": {"maxTurns": CAPS["max_turns"] + 1}}
    refused(alice.post(ROUTE, json=body), 400, "reprompt.maxTurns")
    body = chat(reprompt={"callback": {"url": "http://127.0.0.1/"}})
    refused(alice.post(ROUTE, json=body), 400, "reprompt.callback")
    body = chat(reprompt={"validators": [{"kind": "webhook", "url": "http://10.0.0.1/hook"}]})
    error = refused(alice.post(ROUTE, json=body), 400, "reprompt.validators[0].url")
    assert error["code"] == "invalid-input"


def test_bad_shapes_name_the_field(alice: httpx.Client) -> None:
    body = chat(messages=[{"role": "root", "content": "x"}])
    refused(alice.post(ROUTE, json=body), 400, "messages[0].role")
    body = chat(messages=[{"role": "user", "content": "x", "name": "n" * 65}])
    refused(alice.post(ROUTE, json=body), 400, "messages[0].name")
    body = chat(temperature=9)
    refused(alice.post(ROUTE, json=body), 400, "temperature")
    body = chat(logprobs=True)
    refused(alice.post(ROUTE, json=body), 400, "logprobs")
    tool = {"type": "function", "function": {"name": "bad name!"}}
    refused(alice.post(ROUTE, json=chat(tools=[tool])), 400, "tools[0].function.name")
    unknown = {"type": "function", "function": {"name": "nope"}}
    plain = {"model": "sim-model", "messages": [{"role": "user", "content": "x"}]}
    refused(alice.post(ROUTE, json={**plain, "tool_choice": unknown}), 400, "tool_choice")
    response = alice.post(ROUTE, content=b"{not json", headers={"content-type": "application/json"})
    assert refused(response, 400, None)["type"] == "invalid_request_error"
    response = alice.post(ROUTE, content=b"x", headers={"content-type": "text/plain"})
    assert response.status_code == 415
    assert response.json()["error"]["code"] == "unsupported-media-type"


def test_without_a_key_nothing_runs(api: str) -> None:
    response = httpx.post(f"{api}{ROUTE}", json=chat())
    refused(response, 401, None)
    assert response.json()["error"]["type"] == "authentication_error"


def test_tools_with_a_response_format_are_checked_as_a_jobs(alice: httpx.Client) -> None:
    deep: dict[str, Any] = {"type": "string"}
    for _ in range(CAPS["max_schema_depth"] + 2):
        deep = {"type": "object", "properties": {"x": deep}}
    tool = {"type": "function", "function": {"name": "lookup", "parameters": deep}}
    response = alice.post(ROUTE, json=chat(tools=[tool]))
    refused(response, 400, "tools[0].function.parameters")
    named = {"type": "function", "function": {"name": "elsewhere"}}
    ok_tool = {"type": "function", "function": {"name": "lookup"}}
    response = alice.post(ROUTE, json=chat(tools=[ok_tool], tool_choice=named))
    refused(response, 400, "tool_choice")
    response = alice.post(ROUTE, json=chat(tools=[ok_tool, ok_tool]))
    refused(response, 400, "tools")
    reserved = {"type": "function", "function": {"name": "final_answer"}}
    refused(alice.post(ROUTE, json=chat(tools=[reserved])), 400, "tools")
