"""The checked-in OpenAPI document is the one the code generates, and it is complete."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from app.api.openapi import document, render

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
