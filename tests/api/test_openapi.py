"""The checked-in OpenAPI document is the one the code generates, and it is complete."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import httpx
import jsonschema

from app.api.openapi import document, render
from app.client import ApiClient
from tests.service import KEYS, assert_problem, scripted

CHECKED_IN = Path(__file__).resolve().parents[2] / "openapi" / "openapi.json"
REGENERATE = "make openapi  (or: python -m app.api.openapi > openapi/openapi.json)"


def test_the_checked_in_openapi_document_is_up_to_date() -> None:
    assert CHECKED_IN.is_file(), f"openapi/openapi.json is missing; run: {REGENERATE}"
    assert CHECKED_IN.read_text(encoding="utf-8") == render(), (
        f"openapi/openapi.json is stale; run: {REGENERATE}"
    )


def test_generation_is_deterministic() -> None:
    assert render() == render()


def operations(spec: dict[str, Any]) -> list[tuple[str, str, dict[str, Any]]]:
    return [
        (path, method, operation)
        for path, item in spec["paths"].items()
        for method, operation in item.items()
    ]


def test_every_error_response_is_documented_as_problem_json() -> None:
    spec = document()
    for path, method, operation in operations(spec):
        errors = {s: r for s, r in operation["responses"].items() if int(s) >= 400}
        if path == "/v1/chat/completions":  # OpenAI's dialect: its errors in OpenAI's shape
            for response in errors.values():
                schema = response["content"]["application/json"]["schema"]
                assert schema["required"] == ["error"]
            continue
        for status, response in errors.items():
            assert list(response["content"]) == ["application/problem+json"], (path, status)
            schema = response["content"]["application/problem+json"]["schema"]
            assert schema == {"$ref": "#/components/schemas/Problem"}, (path, method, status)
    assert "HTTPValidationError" not in spec["components"]["schemas"]


def test_every_v1_endpoint_documents_auth_and_its_errors() -> None:
    spec = document()
    assert spec["components"]["securitySchemes"]["bearer"]["scheme"] == "bearer"
    for path, method, operation in operations(spec):
        if path.startswith("/v1/"):
            assert {"bearer": []} in operation["security"], (path, method)
            assert "401" in operation["responses"], (path, method)
        assert "200" in operation["responses"] or "202" in operation["responses"]


def test_the_job_endpoints_carry_examples() -> None:
    spec = document()
    submit = spec["paths"]["/v1/jobs"]["post"]
    examples = submit["requestBody"]["content"]["application/json"]["examples"]
    assert {"signature", "schema"} <= set(examples)
    assert set(submit["responses"]) >= {"200", "202", "401", "413", "415", "422", "503"}
    assert "Location" in submit["responses"]["202"]["headers"]
    job = spec["components"]["schemas"]["Job"]
    assert job["examples"][0]["result"]["status"] == "success"
    json.dumps(spec)  # serialisable as is


# -- the contract states what the service does (#29, item 10) -----------------------------


def test_the_event_stream_schema_types_each_event_as_sent(api: str) -> None:
    """Each event of a real stream is one of the stream schema's events: its id matches the
    stated pattern and its data validates against its name's schema."""
    spec = document()
    ok = spec["paths"]["/v1/jobs/{job_id}/events"]["get"]["responses"]["200"]
    stream = ok["content"]["text/event-stream"]["schema"]
    by_name = {event["title"]: event for event in stream["oneOf"]}
    assert set(by_name) == set(ok["x-sse-events"])  # every event typed, none made up
    with ApiClient(api, key=KEYS["alice"]) as client:
        job = client.submit(scripted("Capital of Niger", ["broken_json", "ok"]))
        events = list(client.events(job["id"]))
    assert len(events) >= 5
    for event in events:
        shape = by_name[event.name]["properties"]
        assert shape["event"] == {"const": event.name}
        assert re.fullmatch(shape["id"]["pattern"].strip("^$"), str(event.id))
        data_schema = {**shape["data"]["contentSchema"], "components": spec["components"]}
        jsonschema.validate(event.data, data_schema)


def test_parameter_formats_are_stated_and_never_null() -> None:
    spec = document()
    header = _parameter(spec, "/v1/jobs/{job_id}/events", "Last-Event-ID")
    assert header["schema"]["pattern"] == "^[0-9]{1,9}$"
    cursor = _parameter(spec, "/v1/jobs", "cursor")
    assert cursor["schema"]["pattern"] == "^[A-Za-z0-9_-]{40}$"
    for _path, _method, operation in operations(spec):
        for parameter in operation.get("parameters", []):
            assert {"type": "null"} not in parameter["schema"].get("anyOf", []), parameter


def test_authorization_is_optional_where_the_server_runs_without_keys() -> None:
    spec = document()
    scheme = spec["components"]["securitySchemes"]["bearer"]
    assert "Needed when the service has keys configured" in scheme["description"]
    secured = [op for _p, _m, op in operations(spec) if "security" in op]
    assert secured
    for operation in secured:
        assert operation["security"] == [{"bearer": []}, {}]


def test_a_cursor_of_the_stated_format_is_what_the_list_returns(alice: httpx.Client) -> None:
    for i in range(3):
        alice.post("/v1/jobs", json=scripted(f"cursor format {i}", ["ok"]))
    page = alice.get("/v1/jobs", params={"limit": 1}).json()
    assert re.fullmatch(r"[A-Za-z0-9_-]{40}", page["next"])
    # Well-shaped but not returned by the API: a 422 naming it; badly shaped: the same.
    assert_problem(alice.get("/v1/jobs", params={"cursor": "A" * 40}), 422, "invalid-input")
    assert_problem(alice.get("/v1/jobs", params={"cursor": "!"}), 422, "invalid-input", "cursor")


def _parameter(spec: dict[str, Any], path: str, name: str) -> dict[str, Any]:
    found: list[dict[str, Any]] = [
        p for p in spec["paths"][path]["get"]["parameters"] if p["name"] == name
    ]
    (one,) = found
    return one
