"""Every refusal is RFC 9457 problem+json with the right status, naming the field."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from tests.service import CAPS, assert_problem, scripted


def job(**changes: Any) -> dict[str, Any]:
    body = scripted("Capital of Chile", ["ok"])
    budget = changes.pop("budget", None)
    if budget is not None:
        body["budget"] = budget
    return {k: v for k, v in (body | changes).items() if v is not None}


def nested_schema(levels: int) -> dict[str, Any]:
    schema: dict[str, Any] = {"type": "string"}
    for _ in range(levels):
        schema = {"type": "object", "properties": {"x": schema}, "required": ["x"]}
    return schema


WIDE_SCHEMA = {
    "type": "object",
    "properties": {f"field_{i}": {"type": "string", "description": "x" * 40} for i in range(40)},
}


@pytest.mark.parametrize(
    ("body", "field"),
    [
        pytest.param(job(task="x" * (CAPS["max_task_chars"] + 1)), "task", id="task-too-long"),
        pytest.param(job(signature=None, schema=WIDE_SCHEMA), "schema", id="schema-too-big"),
        pytest.param(job(signature=None, schema=nested_schema(5)), "schema", id="schema-too-deep"),
        pytest.param(
            job(budget={"maxTurns": CAPS["max_turns"] + 1}), "budget.maxTurns", id="max-turns"
        ),
        pytest.param(job(budget={"maxTurns": 0}), "budget.maxTurns", id="max-turns-zero"),
        pytest.param(
            job(budget={"returnRetries": CAPS["max_return_retries"] + 1}),
            "budget.returnRetries",
            id="return-retries",
        ),
        pytest.param(
            job(budget={"deadlineMs": CAPS["max_deadline_ms"] + 1}),
            "budget.deadlineMs",
            id="deadline",
        ),
        pytest.param(
            job(maxOutputTokens=CAPS["max_output_tokens"] + 1), "maxOutputTokens", id="max-output"
        ),
        pytest.param(
            job(maxOutputTokensCap=CAPS["max_output_tokens"] + 1),
            "maxOutputTokensCap",
            id="max-output-cap",
        ),
        pytest.param(job(budget={"maxCostUsd": "a lot"}), "budget.maxCostUsd", id="union-type"),
        pytest.param(job(signature="{name :strin"), "signature", id="bad-signature"),
        pytest.param(job(model="gpt-99"), "model", id="unknown-model"),
        pytest.param(job(escalateModel="gpt-99"), "escalateModel", id="unknown-escalate-model"),
        pytest.param(job(validators=[{"kind": "nope"}]), "validators.0.kind", id="validator"),
        pytest.param(job(bogus=1), "bogus", id="unknown-field"),
        pytest.param(job(task=None), "task", id="missing-task"),
        pytest.param(job(schema={"type": "object"}), "body", id="signature-and-schema"),
        pytest.param(
            job(signature=None, schema={"type": "nonsense"}), "schema", id="invalid-schema"
        ),
    ],
)
def test_an_invalid_job_is_a_422_naming_the_field(
    alice: httpx.Client, body: dict[str, Any], field: str
) -> None:
    response = alice.post("/v1/jobs", json=body)
    assert_problem(response, 422, "invalid-input", field=field)
    assert "a lot" not in response.text  # submitted values are not echoed back


def test_the_signature_error_says_where_it_broke(alice: httpx.Client) -> None:
    response = alice.post("/v1/jobs", json=job(signature="{name :strin}"))
    (error,) = assert_problem(response, 422, "invalid-input", field="signature")["errors"]
    assert isinstance(error["position"], int)
    assert error["expected"]


def test_generate_checks_the_same_caps(alice: httpx.Client) -> None:
    response = alice.post("/v1/generate", json=job(budget={"maxTurns": 99}))
    assert_problem(response, 422, "invalid-input", field="budget.maxTurns")


def test_several_bad_fields_are_all_named(alice: httpx.Client) -> None:
    response = alice.post("/v1/jobs", json=job(temperature=9, purify="yes"))
    problem = assert_problem(response, 422, "invalid-input")
    assert {e["field"] for e in problem["errors"]} == {"temperature", "purify"}


@pytest.mark.parametrize("path", ["/v1/jobs", "/v1/generate"])
def test_bad_fields_of_every_admission_check_are_named_together(
    alice: httpx.Client, path: str
) -> None:
    # A cap, the model lookup and the outbound guard: each check's field, in one answer.
    body = job(
        task="x" * (CAPS["max_task_chars"] + 1),
        model="gpt-99",
        callback={"url": "https://169.254.169.254/latest/meta-data"},
    )
    problem = assert_problem(alice.post(path, json=body), 422, "invalid-input")
    found = {e["field"]: e["message"] for e in problem["errors"]}
    assert set(found) == {"task", "model", "callback.url"}
    assert problem["detail"] == "3 fields are invalid: task, callback.url, model"
    assert f"at most {CAPS['max_task_chars']}" in found["task"]
    assert "gpt-99" in found["model"]


def test_invalid_json_is_a_422_on_the_body(alice: httpx.Client) -> None:
    response = alice.post(
        "/v1/jobs", content=b'{"task": "x",', headers={"content-type": "application/json"}
    )
    assert_problem(response, 422, "invalid-input", field="body")


@pytest.mark.parametrize("content_type", ["text/plain", "application/x-www-form-urlencoded", None])
def test_a_body_that_is_not_json_is_a_415(alice: httpx.Client, content_type: str | None) -> None:
    request = alice.build_request("POST", "/v1/jobs", content=json.dumps(job()).encode())
    request.headers.pop("content-type", None)
    if content_type is not None:
        request.headers["content-type"] = content_type
    assert_problem(alice.send(request), 415, "unsupported-media-type")


def test_a_body_over_the_cap_is_a_413_by_its_content_length(alice: httpx.Client) -> None:
    body = job(input="x" * CAPS["max_body_bytes"])
    response = alice.post("/v1/jobs", json=body)
    assert_problem(response, 413, "content-too-large")


def test_a_streamed_body_over_the_cap_is_a_413_as_it_is_counted(alice: httpx.Client) -> None:
    def chunks() -> Iterator[bytes]:
        yield b'{"task": "x", "signature": "{a :int}", "input": "'
        for _ in range(CAPS["max_body_bytes"] // 1024 + 1):
            yield b"x" * 1024
        yield b'"}'

    response = alice.post(
        "/v1/jobs", content=chunks(), headers={"content-type": "application/json"}
    )
    assert "content-length" not in response.request.headers
    assert_problem(response, 413, "content-too-large")


@pytest.mark.parametrize(
    ("path", "params", "headers", "field"),
    [
        ("/v1/jobs/job_00000000000000000000000000", {"waitMs": -1}, {}, "waitMs"),
        ("/v1/jobs", {"limit": 0}, {}, "limit"),
        ("/v1/jobs", {"status": "done"}, {}, "status"),
        ("/v1/jobs", {"cursor": "not-a-cursor"}, {}, "cursor"),
    ],
)
def test_a_bad_parameter_is_a_422_naming_it(
    alice: httpx.Client,
    path: str,
    params: dict[str, Any],
    headers: dict[str, str],
    field: str,
) -> None:
    response = alice.get(path, params=params, headers=headers)
    assert_problem(response, 422, "invalid-input", field=field)


def test_an_overlong_idempotency_key_is_a_422_naming_the_header(alice: httpx.Client) -> None:
    response = alice.post("/v1/jobs", json=job(), headers={"idempotency-key": "k" * 300})
    assert_problem(response, 422, "invalid-input", field="Idempotency-Key")


def test_an_unknown_route_is_a_404_problem(alice: httpx.Client) -> None:
    assert_problem(alice.get("/v2/nothing"), 404, "not-found")


def test_an_unknown_job_is_a_404_problem(alice: httpx.Client) -> None:
    assert_problem(alice.get("/v1/jobs/job_00000000000000000000000000"), 404, "not-found")
    assert_problem(alice.get("/v1/jobs/not-even-an-id"), 404, "not-found")
    assert_problem(alice.post("/v1/jobs/not-even-an-id/cancel"), 404, "not-found")


def test_a_wrong_method_is_a_405_problem(alice: httpx.Client) -> None:
    response = alice.delete("/v1/jobs")
    assert_problem(response, 405, "method-not-allowed")
    # Every method of the path, not only the first route's (Starlette's "POST").
    assert response.headers["allow"] == "GET, POST"
    assert alice.put("/v1/jobs/job_x").headers["allow"] == "GET"


@pytest.mark.parametrize(
    ("authorization", "invalid_token"),
    [(None, False), ("Bearer not-a-key", True), ("Basic YWxpY2U6c2VjcmV0", False)],
)
def test_without_a_valid_key_it_is_a_401_with_a_bearer_challenge(
    api: str, authorization: str | None, invalid_token: bool
) -> None:
    headers = {"authorization": authorization} if authorization else {}
    with httpx.Client(base_url=api, headers=headers) as http:
        for response in (
            http.post("/v1/jobs", json=job()),
            http.get("/v1/jobs"),
            http.get("/v1/models"),
        ):
            assert_problem(response, 401, "unauthorized")
            challenge = response.headers["www-authenticate"]
            assert challenge.startswith("Bearer")
            assert ('error="invalid_token"' in challenge) == invalid_token
            assert "not-a-key" not in response.text
