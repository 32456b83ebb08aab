"""Schemas that never end and data nested too deep: a 422 at submit, naming the field.

Before: ``{"$ref": "#"}`` and ``$defs`` cycles passed submit, made a paid call, then
failed ``internal-error`` (RecursionError); ``input`` nested 300 deep was an HTTP 500.
Exponential schemas are stopped by the work budget (``app.core.schema.steps``), which
these tests check; how long the hostile cases take is bench/hostile_inputs.py's to say.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from app.core.answer.check import check_answer
from app.core.schema.example import example_for
from app.core.schema.steps import steps_for
from app.core.schema.validation import check_schema
from tests.abuse.service import api, problem_field

MAX_INPUT_BYTES = 4096
MAX_INPUT_DEPTH = 16


@pytest.fixture(scope="module")
def http(tmp_path_factory: pytest.TempPathFactory) -> Iterator[httpx.Client]:
    settings = {"max_input_bytes": MAX_INPUT_BYTES, "max_input_depth": MAX_INPUT_DEPTH}
    with (
        api(tmp_path_factory.mktemp("schemas"), **settings) as url,
        httpx.Client(base_url=url, timeout=30) as client,
    ):
        yield client


def nested(depth: int) -> Any:
    value: Any = 1
    for _ in range(depth):
        value = [value]
    return value


CYCLES: list[dict[str, Any]] = [
    {"$ref": "#"},
    {"$defs": {"a": {"$ref": "#/$defs/b"}, "b": {"$ref": "#/$defs/a"}}, "$ref": "#/$defs/a"},
    {"$defs": {"a": {"allOf": [{"$ref": "#/$defs/a"}]}}, "$ref": "#/$defs/a"},
    {
        "$defs": {"a": {"anyOf": [{"type": "string"}, {"not": {"$ref": "#/$defs/a"}}]}},
        "properties": {"x": {"$ref": "#/$defs/a"}},
    },
    {"type": "object", "if": {"$ref": "#"}},
]


@pytest.mark.parametrize("schema", CYCLES, ids=["self", "pair", "allOf", "not", "if"])
def test_a_ref_cycle_is_a_422_naming_the_schema(http: httpx.Client, schema: dict[str, Any]) -> None:
    response = http.post("/v1/jobs", json={"task": "x", "schema": schema})
    assert problem_field(response) == "schema"
    assert "$ref cycle" in response.json()["detail"]


def test_recursion_through_the_value_is_still_fine(http: httpx.Client) -> None:
    tree = {
        "$defs": {
            "node": {
                "type": "object",
                "properties": {"children": {"type": "array", "items": {"$ref": "#/$defs/node"}}},
            }
        },
        "$ref": "#/$defs/node",
    }
    response = http.post("/v1/jobs", json={"task": "x", "schema": tree})
    assert response.status_code == 202, response.text


@pytest.mark.parametrize("field", ["input", "fallback.data"])
def test_data_nested_too_deep_is_a_422_naming_the_field(http: httpx.Client, field: str) -> None:
    spec: dict[str, Any] = {"task": "x", "signature": "{a :any}"}
    if field == "input":
        spec["input"] = nested(300)
    else:
        spec["fallback"] = {"data": {"a": nested(300)}}
    response = http.post("/v1/jobs", json=spec)
    assert problem_field(response) == field
    assert "depth is 30" in response.json()["detail"]
    assert f"at most {MAX_INPUT_DEPTH}" in response.json()["detail"]


def test_input_at_the_depth_cap_is_fine(http: httpx.Client) -> None:
    spec = {"task": "x", "signature": "{a :any}", "input": nested(MAX_INPUT_DEPTH)}
    response = http.post("/v1/jobs", json=spec)
    assert response.status_code == 202, response.text


def test_input_over_the_size_cap_is_a_422_naming_it(http: httpx.Client) -> None:
    spec = {"task": "x", "signature": "{a :any}", "input": {"text": "y" * MAX_INPUT_BYTES}}
    response = http.post("/v1/jobs", json=spec)
    assert problem_field(response) == "input"
    assert f"at most {MAX_INPUT_BYTES}" in response.json()["detail"]


# -- schemas whose checking grows exponentially ------------------------------------------------

# Two identical branches per level: a naive check of a deep value takes 2^depth steps.
UNION = {
    "$defs": {
        "n": {
            "anyOf": [
                {"type": "array", "items": {"$ref": "#/$defs/n"}},
                {"type": "array", "items": {"$ref": "#/$defs/n"}, "minItems": 0},
            ]
        }
    },
    "$ref": "#/$defs/n",
}
# A diamond of allOfs 20 deep: 2^20 paths to the same leaf.
DIAMOND = {
    "$defs": {
        **{
            f"a{i}": {"allOf": [{"$ref": f"#/$defs/a{i + 1}"}, {"$ref": f"#/$defs/a{i + 1}"}]}
            for i in range(20)
        },
        "a20": {"type": "string"},
    },
    "$ref": "#/$defs/a0",
}


def test_an_exponential_union_is_cut_off_by_the_work_budget() -> None:
    check_schema(UNION)
    answer = "[" * 40 + "true" + "]" * 40
    checked = check_answer(answer, UNION)
    assert checked.kind == "limit"
    assert f"more than {steps_for(len(answer))} steps" in checked.errors[0]


def test_an_allof_diamond_is_accepted_at_submit_and_checked_quickly(http: httpx.Client) -> None:
    response = http.post("/v1/jobs", json={"task": "x", "schema": DIAMOND})
    assert response.status_code == 202, response.text
    # Quickly: within the work budget of a 6-character answer, not along 2^20 paths.
    answer = '"text"'
    checked = check_answer(answer, DIAMOND)
    assert checked.ok or f"more than {steps_for(len(answer))} steps" in checked.errors[0]


def test_the_example_builder_gives_up_within_its_budget() -> None:
    # No valid example within the builder's steps: it says so (None), it does not search on.
    assert example_for(DIAMOND) is None
    assert example_for(UNION) is None


def test_fallback_data_that_takes_too_much_work_to_check_is_a_422(http: httpx.Client) -> None:
    spec = {
        "task": "x",
        "schema": UNION,
        "fallback": {"data": json.loads("[" * 12 + "1" + "]" * 12)},
    }
    response = http.post("/v1/jobs", json=spec)
    assert problem_field(response) == "fallback.data"
