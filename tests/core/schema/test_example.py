"""The example generator: small, plain, and always valid (or None)."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from jsonschema import Draft202012Validator

from app.core.schema.example import example_for
from app.core.schema.signature import compile_signature
from app.core.schema.validation import FORMATS

LINE = {
    "type": "object",
    "properties": {
        "sku": {"type": "string", "minLength": 6},
        "qty": {"type": "integer", "exclusiveMinimum": 0, "multipleOf": 5},
        "note": {"type": "string"},
    },
    "required": ["sku", "qty"],
    "additionalProperties": False,
}

SCHEMAS: list[tuple[str, dict[str, Any], Any]] = [
    (
        "required fields only",
        {
            "type": "object",
            "properties": {"qty": {"type": "integer", "minimum": 1}, "note": {"type": "string"}},
            "required": ["qty"],
        },
        {"qty": 1},
    ),
    ("date", {"type": "string", "format": "date"}, "2024-01-31"),
    ("date-time", {"type": "string", "format": "date-time"}, "2024-01-31T12:00:00Z"),
    ("email", {"type": "string", "format": "email"}, "user@example.com"),
    ("uri", {"type": "string", "format": "uri"}, "https://example.com"),
    ("nullable type list", {"type": ["string", "null"]}, "text"),
    ("enum", {"enum": ["low", "mid", "high"]}, "low"),
    ("const", {"const": {"v": 1}}, {"v": 1}),
    (
        "anyOf takes the first branch that fits",
        {"anyOf": [{"type": "integer", "minimum": 10}, {"type": "null"}]},
        10,
    ),
    (
        "allOf merges",
        {
            "allOf": [
                {"type": "object", "properties": {"a": {"type": "string"}}, "required": ["a"]},
                {"properties": {"b": {"type": "boolean"}}, "required": ["b"]},
            ]
        },
        {"a": "text", "b": True},
    ),
    (
        "$ref, minItems and uniqueItems",
        {
            "$defs": {"line": LINE},
            "type": "object",
            "properties": {
                "lines": {
                    "type": "array",
                    "items": {"$ref": "#/$defs/line"},
                    "minItems": 2,
                    "uniqueItems": True,
                }
            },
            "required": ["lines"],
        },
        {"lines": [{"sku": "textxx", "qty": 5}, {"sku": "text 2", "qty": 5}]},
    ),
    (
        "tuple",
        {"type": "array", "prefixItems": [{"type": "string"}, {"type": "number"}], "items": False},
        ["text", 0],
    ),
    ("simple pattern", {"type": "string", "pattern": "^[A-Z]{3}$"}, "ABC"),
    ("number range", {"type": "number", "exclusiveMinimum": 0.5, "maximum": 0.7}, 0.6),
    ("maxLength", {"type": "string", "maxLength": 2}, "te"),
    (
        "optional recursion stays out",
        {
            "type": "object",
            "properties": {
                "name": {"type": "string"},
                "children": {"type": "array", "items": {"$ref": "#"}},
            },
            "required": ["name"],
        },
        {"name": "text"},
    ),
    (
        "no required fields: the first one shows the shape",
        {"type": "object", "properties": {"a": {"type": "integer"}, "b": {"type": "string"}}},
        {"a": 0},
    ),
    (
        "oneOf with a discriminator",
        {
            "oneOf": [
                {"type": "object", "properties": {"kind": {"const": "a"}}, "required": ["kind"]},
                {"type": "object", "properties": {"kind": {"const": "b"}}, "required": ["kind"]},
            ]
        },
        {"kind": "a"},
    ),
    ("untyped schema", {}, "text"),
    (
        "dependentRequired",
        {
            "type": "object",
            "properties": {
                "card": {"type": "string"},
                "cvv": {"type": "string", "pattern": "^[0-9]{3}$"},
            },
            "dependentRequired": {"card": ["cvv"]},
        },
        None,
    ),
]


def is_valid(schema: dict[str, Any], value: Any) -> bool:
    return Draft202012Validator(schema, format_checker=FORMATS).is_valid(value)


@pytest.mark.parametrize(("name", "schema", "expected"), SCHEMAS, ids=[s[0] for s in SCHEMAS])
def test_example_is_small_plain_and_valid(name: str, schema: dict[str, Any], expected: Any) -> None:
    example = example_for(schema)
    assert example is not None, name
    assert is_valid(schema, example)
    if expected is not None:
        assert example == expected


def test_example_for_a_compiled_signature() -> None:
    schema = compile_signature(
        "(text :string) -> {vendor :string, total :float, note :string?, "
        "level :enum[low | high]?, items [{sku :string, qty :int}]}"
    ).output_schema
    example = example_for(schema)
    assert example == {"vendor": "text", "total": 0, "items": [{"sku": "text", "qty": 0}]}
    assert is_valid(schema, example)


@pytest.mark.parametrize(
    "schema",
    [
        {"type": "string", "pattern": "^zz[0-9]+q$"},  # patterns are not generated
        {"type": "object", "required": ["self"], "properties": {"self": {"$ref": "#"}}},
        {"type": "integer", "minimum": 5, "maximum": 4},
        {"allOf": [{"type": "string"}, {"type": "integer"}]},
        {"type": "null"},  # the only instance is null, which reads as "none built"
        {"not": {}},
    ],
)
def test_impossible_or_unsupported_schemas_give_none(schema: dict[str, Any]) -> None:
    assert example_for(schema) is None


def schema_for(value: Any) -> dict[str, Any]:
    if isinstance(value, dict):
        return {
            "type": "object",
            "properties": {key: schema_for(item) for key, item in value.items()},
            "required": list(value),
            "additionalProperties": False,
        }
    if isinstance(value, list):
        return {
            "type": "array",
            "prefixItems": [schema_for(item) for item in value],
            "items": False,
            "minItems": len(value),
        }
    if isinstance(value, bool):
        return {"type": "boolean"}
    if isinstance(value, int):
        return {"type": "integer", "minimum": value}
    if isinstance(value, float):
        return {"type": "number", "maximum": value}
    if isinstance(value, str):
        return {"type": "string", "minLength": len(value)}
    return {"type": ["null", "string"]}


json_values = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(-1000, 1000)
    | st.floats(-1e6, 1e6, allow_nan=False)
    | st.text(max_size=8),
    lambda children: (
        st.lists(children, max_size=4) | st.dictionaries(st.text(max_size=6), children, max_size=4)
    ),
    max_leaves=12,
)


@settings(max_examples=150, deadline=None)
@given(json_values)
def test_example_of_a_derived_schema_always_validates(value: Any) -> None:
    schema = schema_for(value)
    example = example_for(schema)
    assert example is not None
    assert is_valid(schema, example)
