"""The simulator's correct answers are valid instances, deterministic per seed and task."""

from __future__ import annotations

import re
from typing import Any

import jsonschema
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from reprompt_sim.instance import valid_instance
from tests.sim.schemas import RICH_SCHEMA, json_schemas


def test_richjson_schemas_get_valid_instances() -> None:
    value = valid_instance(RICH_SCHEMA, seed=1, task="invoice")

    jsonschema.validate(value, RICH_SCHEMA, format_checker=jsonschema.FormatChecker())
    assert re.fullmatch(r"(AB|CD)-[0-9]{3}[a-z]?", value["code"])


def test_instances_depend_on_seed_and_task_only() -> None:
    same = valid_instance(RICH_SCHEMA, seed=1, task="invoice")

    assert same == valid_instance(RICH_SCHEMA, seed=1, task="invoice")
    assert same != valid_instance(RICH_SCHEMA, seed=2, task="invoice")
    assert same != valid_instance(RICH_SCHEMA, seed=1, task="receipt")


@pytest.mark.parametrize(
    "schema",
    [
        {"type": "integer", "exclusiveMaximum": 0},
        {"type": "number", "minimum": 1000.5},
        {"type": "string", "minLength": 30},
        {"type": ["null", "boolean"]},
        {"type": "array", "uniqueItems": True, "minItems": 3, "items": {"enum": [1, 2, 3]}},
        {"type": "object", "properties": {}, "required": ["free"]},
    ],
)
def test_edge_keywords(schema: dict[str, Any]) -> None:
    jsonschema.validate(valid_instance(schema, seed=0, task="edge"), schema)


@settings(max_examples=60, deadline=None)
@given(schema=json_schemas, seed=st.integers(0, 2**16))
def test_generatedjson_schemas_get_valid_instances(schema: dict[str, Any], seed: int) -> None:
    jsonschema.validate(valid_instance(schema, seed=seed, task="t"), schema)
