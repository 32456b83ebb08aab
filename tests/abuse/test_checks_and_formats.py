"""Hostile ``checks`` and ``format`` values: a 422 at submit naming the field, never a job
that runs with a check silently off or a format silently unchecked."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from tests.abuse.service import api, problem_field


@pytest.fixture(scope="module")
def http(tmp_path_factory: pytest.TempPathFactory) -> Iterator[httpx.Client]:
    with (
        api(tmp_path_factory.mktemp("checks")) as url,
        httpx.Client(base_url=url, timeout=30) as client,
    ):
        yield client


def job(**extra: Any) -> dict[str, Any]:
    return {"task": "Extract the city.", "input": "Alice lives in Lyon.", **extra}


@pytest.mark.parametrize(
    "checks",
    [
        {"plausibility": "no"},
        {"plausibility": 0},
        {"plausibility": None},
        {"plausibility": False, "runaway": False},
        {"Plausibility": False},
        [False],
        "off",
        False,
    ],
)
def test_a_malformed_checks_is_a_422_naming_it(http: httpx.Client, checks: Any) -> None:
    response = http.post("/v1/jobs", json=job(signature="{city :string}", checks=checks))
    assert problem_field(response).startswith("checks")


@pytest.mark.parametrize("name", ["currency", "date-time ", "DATE", "x" * 5000])
def test_a_format_the_service_cannot_check_is_a_422_naming_it(
    http: httpx.Client, name: str
) -> None:
    schema = {"type": "object", "properties": {"city": {"type": "string", "format": name}}}
    response = http.post("/v1/jobs", json=job(schema=schema))
    assert problem_field(response) == "schema"
    detail = response.json()["detail"]
    assert "cannot check" in detail
    assert len(detail) < 1000


def test_a_unicode_property_escape_is_refused_naming_the_escape(http: httpx.Client) -> None:
    schema = {
        "type": "object",
        "properties": {"city": {"type": "string", "pattern": r"\p{Letter}+"}},
    }
    response = http.post("/v1/jobs", json=job(schema=schema))
    assert problem_field(response) == "schema"
    detail = response.json()["detail"]
    assert r"\p{Letter}" in detail
    assert "meta-schema" not in detail
    assert "(format" not in detail


def test_every_standard_format_is_taken(http: httpx.Client) -> None:
    names = ["date-time", "date", "time", "duration", "email", "idn-email", "hostname",
             "idn-hostname", "ipv4", "ipv6", "uri", "uri-reference", "iri", "iri-reference",
             "uuid", "uri-template", "json-pointer", "relative-json-pointer", "regex"]  # fmt: skip
    properties = {f"f{i}": {"type": "string", "format": n} for i, n in enumerate(names)}
    schema = {"type": "object", "properties": properties}
    response = http.post("/v1/jobs", json={**job(schema=schema), "checks": {"plausibility": True}})
    assert response.status_code == 202, response.text
