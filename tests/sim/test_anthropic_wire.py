"""The Anthropic messages endpoint, over HTTP on loopback."""

from __future__ import annotations

import json

import httpx
import jsonschema
import pytest

from tests.sim.bodies import ORDER_SCHEMA, anthropic, directive, msg


def test_forced_tool_answers_with_a_tool_use_block(client: httpx.Client) -> None:
    r = client.post("/v1/messages", json=anthropic(msg("user", "Record Ada's order.")))

    assert r.status_code == 200
    body = r.json()
    assert body["type"] == "message"
    assert body["role"] == "assistant"
    assert body["id"].startswith("msg_")
    assert body["model"] == "sim/claude-sonnet-4"
    assert body["stop_reason"] == "tool_use"
    (block,) = body["content"]
    assert block["type"] == "tool_use"
    assert block["name"] == "record"
    assert block["id"].startswith("toolu_")
    jsonschema.validate(block["input"], ORDER_SCHEMA)
    assert body["usage"]["cache_read_input_tokens"] == 0  # nothing marked for the cache
    assert body["usage"]["cache_creation_input_tokens"] == 0
    assert body["usage"]["output_tokens"] == -(-len(json.dumps(block["input"])) // 4)


def test_text_answer_uses_a_schema_from_the_system_prompt(client: httpx.Client) -> None:
    system = f"Answer with JSON matching this schema:\n{json.dumps(ORDER_SCHEMA)}"
    body = anthropic(msg("user", "Ada, 3 boxes."), tool_schema=None, system=system)

    r = client.post("/v1/messages", json=body).json()

    assert r["stop_reason"] == "end_turn"
    (block,) = r["content"]
    assert block["type"] == "text"
    jsonschema.validate(json.loads(block["text"]), ORDER_SCHEMA)


def test_system_as_content_blocks_is_read(client: httpx.Client) -> None:
    system = [{"type": "text", "text": f"Schema: {json.dumps(ORDER_SCHEMA)}"}]
    body = anthropic(
        msg("user", [{"type": "text", "text": "Ada"}]), tool_schema=None, system=system
    )

    r = client.post("/v1/messages", json=body)

    jsonschema.validate(json.loads(r.json()["content"][0]["text"]), ORDER_SCHEMA)


def test_refusal_has_stop_reason_refusal(client: httpx.Client) -> None:
    body = anthropic(msg("user", "Record. " + directive(script=["refusal"])))

    r = client.post("/v1/messages", json=body).json()

    assert r["stop_reason"] == "refusal"
    assert all(block["type"] == "text" for block in r["content"])


def test_broken_json_for_a_tool_travels_as_text(client: httpx.Client) -> None:
    body = anthropic(msg("user", "Record, broken. " + directive(script=["broken_json"])))

    r = client.post("/v1/messages", json=body).json()

    assert r["stop_reason"] == "end_turn"
    (block,) = r["content"]
    assert block["type"] == "text"
    with pytest.raises(json.JSONDecodeError):
        json.loads(block["text"])


def test_truncation_stops_at_max_tokens_and_a_larger_limit_succeeds(client: httpx.Client) -> None:
    task = msg("user", "Record, verbose. " + directive(script=["truncation"]))

    short = client.post("/v1/messages", json=anthropic(task, max_tokens=50)).json()
    roomy = client.post("/v1/messages", json=anthropic(task, max_tokens=4000)).json()

    assert short["stop_reason"] == "max_tokens"
    assert short["usage"]["output_tokens"] == 50
    assert [b["type"] for b in short["content"]] == ["text"]
    assert roomy["stop_reason"] == "tool_use"
    assert [b["type"] for b in roomy["content"]] == ["text", "tool_use"]
    jsonschema.validate(roomy["content"][1]["input"], ORDER_SCHEMA)


def test_rate_limit_is_a_429_with_anthropic_headers(client: httpx.Client) -> None:
    body = anthropic(
        msg("user", "Record, busy. " + directive(script=["rate_limit"], retry_after=1.5))
    )

    r = client.post("/v1/messages", json=body)

    assert r.status_code == 429
    assert r.headers["retry-after"] == "1.5"
    assert r.headers["anthropic-ratelimit-requests-remaining"] == "0"
    assert "anthropic-ratelimit-requests-reset" in r.headers
    assert r.json() == {
        "type": "error",
        "error": {"type": "rate_limit_error", "message": r.json()["error"]["message"]},
    }


@pytest.mark.parametrize(
    ("fault", "status", "kind"),
    [("server_error", 500, "api_error"), ("overloaded", 529, "overloaded_error")],
)
def test_server_faults_use_the_anthropic_error_shape(
    client: httpx.Client, fault: str, status: int, kind: str
) -> None:
    body = anthropic(msg("user", f"Record, {fault}. " + directive(script=[fault])))

    r = client.post("/v1/messages", json=body)

    assert r.status_code == status
    assert r.json()["type"] == "error"
    assert r.json()["error"]["type"] == kind


def test_missing_max_tokens_is_an_invalid_request_error(client: httpx.Client) -> None:
    body = anthropic(msg("user", "hi"))
    del body["max_tokens"]

    r = client.post("/v1/messages", json=body)

    assert r.status_code == 400
    assert r.json()["error"]["type"] == "invalid_request_error"
    assert "max_tokens" in r.json()["error"]["message"]


def test_models_list_in_anthropic_shape_when_asked_anthropically(client: httpx.Client) -> None:
    r = client.get("/v1/models", headers={"anthropic-version": "2023-06-01"}).json()

    assert r["data"][0]["type"] == "model"
    assert r["has_more"] is False
