"""Hostile tool declarations and tool outputs: each a 4xx naming the field."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from app.providers.config import ModelConfig, ProviderConfig, ProvidersConfig
from tests.service import KEYS, StartApi, api_keys, assert_problem, client

PARAMS: dict[str, Any] = {"type": "object", "properties": {"sku": {"type": "string"}}}


def job(**extra: Any) -> dict[str, Any]:
    return {
        "task": "Price?",
        "signature": "{price :float}",
        "tools": [{"name": "lookup", "parameters": PARAMS}],
        "budget": {"maxTurns": 3},
        **extra,
    }


@pytest.fixture
def alice(start_api: StartApi) -> Iterator[httpx.Client]:
    """An API with small caps (tests/service.py CAPS) and no worker: jobs stay queued."""
    with client(start_api(api_keys=api_keys()), KEYS["alice"]) as http:
        yield http


def post(http: httpx.Client, body: dict[str, Any]) -> httpx.Response:
    return http.post("/v1/jobs", json=body)


def test_a_tool_with_a_catastrophic_pattern_is_refused_at_submit(alice: httpx.Client) -> None:
    params = {"type": "object", "properties": {"a": {"type": "string", "pattern": "(?=a)a"}}}
    response = post(alice, job(tools=[{"name": "t", "parameters": params}]))
    assert_problem(response, 422, "invalid-input", "tools[0].parameters")


def test_tool_parameters_are_held_to_the_schema_caps(alice: httpx.Client) -> None:
    big = {"type": "object", "description": "x" * 5000}
    assert_problem(post(alice, job(tools=[{"name": "t", "parameters": big}])), 422, "invalid-input")
    deep: dict[str, Any] = {"type": "object"}
    for _ in range(12):
        deep = {"type": "object", "properties": {"a": deep}}
    assert_problem(
        post(alice, job(tools=[{"name": "t", "parameters": deep}])),
        422,
        "invalid-input",
        "tools[0].parameters",
    )


def test_parameters_that_are_not_an_object_schema_are_refused(alice: httpx.Client) -> None:
    for params in ({"type": "string"}, {"type": "object", "properties": 3}, {"$ref": "#/nope"}):
        response = post(alice, job(tools=[{"name": "t", "parameters": params}]))
        assert_problem(response, 422, "invalid-input", "tools[0].parameters")


def test_tool_names_and_counts_are_bounded(alice: httpx.Client) -> None:
    for name in ("", "a" * 65, "bad name", "naïve", "final_answer"):
        response = post(alice, job(tools=[{"name": name, "parameters": PARAMS}]))
        assert response.status_code == 422, (name, response.text)
    many = [{"name": f"t{i}", "parameters": PARAMS} for i in range(33)]
    assert_problem(post(alice, job(tools=many)), 422, "invalid-input", "tools")
    twice = [{"name": "t", "parameters": PARAMS}] * 2
    assert_problem(post(alice, job(tools=twice)), 422, "invalid-input", "tools")


def test_tool_timeout_is_capped_by_the_deadline_cap(alice: httpx.Client) -> None:
    response = post(alice, job(toolTimeoutMs=10_000_000))
    assert_problem(response, 422, "invalid-input", "toolTimeoutMs")


def test_a_model_without_tool_calling_is_refused_at_submit(
    start_api: StartApi, sim_url: str
) -> None:
    no_tools = ProvidersConfig(
        default="plain",
        providers={"sim": ProviderConfig(kind="openai", base_url=f"{sim_url}/v1")},
        models={"plain": ModelConfig(provider="sim", structured="prompt", tools=False)},
    )
    url = start_api(providers_config=no_tools, api_keys=api_keys())
    with client(url, KEYS["alice"]) as http:
        body = assert_problem(post(http, job()), 422, "invalid-input", "tools")
        assert "cannot call tools" in body["detail"]
        # one work turn never offers tools: that job is fine
        assert post(http, job(budget={"maxTurns": 1})).status_code == 202


def test_tool_outputs_are_bounded_and_checked(alice: httpx.Client) -> None:
    created = post(alice, job())
    assert created.status_code == 202
    url = f"/v1/jobs/{created.json()['id']}/tool-outputs"
    cases: list[tuple[Any, str]] = [
        ({"outputs": []}, "outputs"),
        ({"outputs": [{"toolCallId": "c1", "output": 1}] * 33}, "outputs"),
        ({"outputs": [{"toolCallId": "", "output": 1}]}, "outputs.0.toolCallId"),
        ({"outputs": [{"toolCallId": "c1", "output": 1, "error": "x"}]}, "outputs.0"),
        ({"outputs": [{"toolCallId": "c1", "error": "x" * 2001}]}, "outputs.0.error"),
        ({"outputs": [{"toolCallId": "c1", "oops": 1}]}, "outputs.0.oops"),
    ]
    for body, field in cases:
        response = alice.post(url, json=body)
        assert response.status_code == 422, (body, response.text)
        fields = [e["field"] for e in response.json().get("errors", [])]
        assert any(f.startswith(field) for f in fields), (field, fields)
    raw = '{"outputs": [{"toolCallId": "c1", "output": {"a": ["\\ud800"]}}]}'
    response = alice.post(url, content=raw, headers={"content-type": "application/json"})
    body = assert_problem(response, 422, "invalid-input", "outputs.0.output")
    assert "surrogate" in body["detail"]
    raw = '{"outputs": [{"toolCallId": "\\udfff", "output": 1}]}'
    response = alice.post(url, content=raw, headers={"content-type": "application/json"})
    assert_problem(response, 422, "invalid-input", "outputs.0.toolCallId")
    deep: Any = 1
    for _ in range(100):
        deep = [deep]
    response = alice.post(url, json={"outputs": [{"toolCallId": "c1", "output": deep}]})
    assert_problem(response, 422, "invalid-input", "outputs[0].output")
