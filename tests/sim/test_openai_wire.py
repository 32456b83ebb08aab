"""The OpenAI chat-completions endpoint, over HTTP on loopback."""

from __future__ import annotations

import json

import httpx
import jsonschema
import pytest

from tests.sim.bodies import ORDER_SCHEMA, directive, msg, openai


def test_success_has_openai_shape_and_a_schema_valid_answer(client: httpx.Client) -> None:
    r = client.post("/v1/chat/completions", json=openai(msg("user", "Order for Ada, 3 boxes.")))

    assert r.status_code == 200
    body = r.json()
    assert body["object"] == "chat.completion"
    assert body["id"].startswith("chatcmpl-")
    assert isinstance(body["created"], int)
    assert body["model"] == "sim/gpt-4o"
    choice = body["choices"][0]
    assert choice["index"] == 0
    assert choice["finish_reason"] == "stop"
    assert choice["message"]["role"] == "assistant"
    assert choice["message"]["refusal"] is None
    jsonschema.validate(json.loads(choice["message"]["content"]), ORDER_SCHEMA)
    usage = body["usage"]
    assert usage["total_tokens"] == usage["prompt_tokens"] + usage["completion_tokens"]
    assert usage["completion_tokens"] == -(-len(choice["message"]["content"]) // 4)
    assert r.headers["x-sim-outcome"] == "ok"


def test_model_is_named_reprompt_sim_when_none_was_requested(client: httpx.Client) -> None:
    r = client.post("/v1/chat/completions", json=openai(msg("user", "hi"), model=None))

    assert r.json()["model"] == "reprompt-sim"


def test_forced_tool_answers_with_a_tool_call(client: httpx.Client) -> None:
    tools = [{"type": "function", "function": {"name": "record", "parameters": ORDER_SCHEMA}}]
    body = openai(
        msg("user", "Record the order."),
        schema=None,
        tools=tools,
        tool_choice={"type": "function", "function": {"name": "record"}},
    )

    choice = client.post("/v1/chat/completions", json=body).json()["choices"][0]

    assert choice["finish_reason"] == "tool_calls"
    assert choice["message"]["content"] is None
    call = choice["message"]["tool_calls"][0]
    assert call["type"] == "function"
    assert call["id"].startswith("call_")
    assert call["function"]["name"] == "record"
    jsonschema.validate(json.loads(call["function"]["arguments"]), ORDER_SCHEMA)


def test_refusal_sets_refusal_and_leaves_content_null(client: httpx.Client) -> None:
    body = openai(msg("user", "Order. " + directive(script=["refusal"])))

    choice = client.post("/v1/chat/completions", json=body).json()["choices"][0]

    assert choice["message"]["content"] is None
    assert "can't help" in choice["message"]["refusal"]
    assert choice["finish_reason"] == "stop"


def test_truncation_cuts_at_max_tokens_and_a_larger_limit_succeeds(client: httpx.Client) -> None:
    task = msg("user", "Order, verbose. " + directive(script=["truncation"]))

    short = client.post("/v1/chat/completions", json=openai(task, max_tokens=60)).json()
    roomy = client.post("/v1/chat/completions", json=openai(task, max_tokens=4000)).json()

    assert short["choices"][0]["finish_reason"] == "length"
    assert short["usage"]["completion_tokens"] == 60
    assert len(short["choices"][0]["message"]["content"]) == 240
    assert roomy["choices"][0]["finish_reason"] == "stop"
    text = roomy["choices"][0]["message"]["content"]
    assert not text.startswith("{")  # the verbose preamble comes first
    jsonschema.validate(json.loads(text[text.index("{") :]), ORDER_SCHEMA)


def test_max_tokens_is_also_read_from_the_legacy_field(client: httpx.Client) -> None:
    body = openai(msg("user", "Order, legacy. " + directive(script=["truncation"])))
    body["max_tokens"] = 10

    choice = client.post("/v1/chat/completions", json=body).json()["choices"][0]

    assert choice["finish_reason"] == "length"


def test_rate_limit_is_a_429_with_fractional_retry_after(client: httpx.Client) -> None:
    body = openai(msg("user", "Order, busy. " + directive(script=["rate_limit"], retry_after=0.25)))

    limited = client.post("/v1/chat/completions", json=body)
    retried = client.post("/v1/chat/completions", json=body)

    assert limited.status_code == 429
    assert limited.headers["retry-after"] == "0.25"
    assert limited.headers["retry-after-ms"] == "250"
    assert limited.headers["x-ratelimit-remaining-requests"] == "0"
    error = limited.json()["error"]
    assert error["code"] == "rate_limit_exceeded"
    assert error["type"]
    assert error["message"]
    assert retried.status_code == 200


@pytest.mark.parametrize(("fault", "status"), [("server_error", 500), ("overloaded", 503)])
def test_server_faults_use_the_openai_error_shape(
    client: httpx.Client, fault: str, status: int
) -> None:
    body = openai(msg("user", f"Order, {fault}. " + directive(script=[fault])))

    r = client.post("/v1/chat/completions", json=body)

    assert r.status_code == status
    assert set(r.json()["error"]) >= {"message", "type", "code"}
    assert r.json()["error"]["type"] == "server_error"


@pytest.mark.parametrize(
    ("body", "mentions"),
    [
        ({"model": "x"}, "messages"),
        (openai(msg("user", "hi"), max_tokens=0), "max_completion_tokens"),
        (
            openai(
                msg("user", "hi"), tool_choice={"type": "function", "function": {"name": "nope"}}
            ),
            "unknown tool",
        ),
        (openai(msg("user", "hi"), schema={"type": "objekt"}), "schema"),
        (openai(msg("user", "hi"), stream="yes"), "stream"),
        (openai(msg("user", '[[sim {"script": ["explode"]}]]')), "explode"),
        (openai(msg("user", '[[sim {"fix": 2}]]')), "fix"),
    ],
)
def test_bad_requests_are_400_invalid_request_errors(
    client: httpx.Client, body: dict[str, object], mentions: str
) -> None:
    r = client.post("/v1/chat/completions", json=body)

    assert r.status_code == 400
    assert r.json()["error"]["type"] == "invalid_request_error"
    assert mentions in r.json()["error"]["message"]


def test_a_body_that_is_not_json_is_a_400(client: httpx.Client) -> None:
    r = client.post("/v1/chat/completions", content=b"{nope", headers={"content-type": "x"})

    assert r.status_code == 400
    assert r.json()["error"]["type"] == "invalid_request_error"


def test_unknown_route_is_a_404_in_openai_shape(client: httpx.Client) -> None:
    r = client.post("/v1/completions", json={})

    assert r.status_code == 404
    assert r.json()["error"]["type"] == "invalid_request_error"


def test_models_and_health(client: httpx.Client) -> None:
    models = client.get("/v1/models").json()
    health = client.get("/healthz")

    assert models["object"] == "list"
    assert models["data"][0]["id"] == "reprompt-sim"
    assert health.status_code == 200
    assert health.json()["status"] == "ok"


# -- several answers per request (n) -------------------------------------------------------------


def test_n_gives_that_many_choices_each_named_by_the_directive(client: httpx.Client) -> None:
    body = openai(msg("user", "Order, n. " + directive(choices=["wrong_type", "ok"])), n=3)
    r = client.post("/v1/chat/completions", json=body)

    assert r.status_code == 200
    choices = r.json()["choices"]
    assert [c["index"] for c in choices] == [0, 1, 2]
    assert r.headers["x-sim-outcome"] == "wrong_type,ok,ok"
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate(json.loads(choices[0]["message"]["content"]), ORDER_SCHEMA)
    jsonschema.validate(json.loads(choices[1]["message"]["content"]), ORDER_SCHEMA)
    usage = r.json()["usage"]
    written = sum(-(-len(c["message"]["content"]) // 4) for c in choices)
    assert usage["completion_tokens"] == written  # every choice's output, the prompt once


def test_unscripted_choices_roll_their_own_chances(client: httpx.Client) -> None:
    body = openai(msg("user", "Order, rolls. " + directive(fail={"wrong_type": 0.5})), n=8)
    outcomes = client.post("/v1/chat/completions", json=body).headers["x-sim-outcome"]

    assert set(outcomes.split(",")) == {"ok", "wrong_type"}


@pytest.mark.parametrize("n", [0, 17, "2", True])
def test_a_bad_n_is_a_400(client: httpx.Client, n: object) -> None:
    r = client.post("/v1/chat/completions", json=openai(msg("user", "hi"), n=n))

    assert r.status_code == 400
    assert "'n'" in r.json()["error"]["message"]


def test_a_schema_keyed_by_json_pointer_gets_those_parts_of_the_expected_answer(
    client: httpx.Client,
) -> None:
    expect = {"name": "Ada", "lines": [{"qty": 2}, {"qty": 5}]}
    schema = {
        "type": "object",
        "properties": {"/lines/1/qty": {"type": "integer"}, "/name": {"type": "string"}},
        "required": ["/lines/1/qty", "/name"],
        "additionalProperties": False,
    }
    body = openai(msg("user", "Patch. " + directive(expect=expect)), schema=schema)
    content = client.post("/v1/chat/completions", json=body).json()["choices"][0]["message"]

    assert json.loads(content["content"]) == {"/lines/1/qty": 5, "/name": "Ada"}
