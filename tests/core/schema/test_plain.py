"""The quick check of plain schemas says yes exactly when the full validator does."""

from __future__ import annotations

import json
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from app.core.schema.keywords import Validator
from app.core.schema.plain import plain_check
from app.core.schema.signature import compile_signature
from app.core.schema.steps import TooMuchWork, work_budget
from app.core.schema.validation import FORMATS, Schema

names = st.sampled_from(["a", "b", "c"])
types = st.sampled_from(["string", "integer", "number", "boolean", "null", "object", "array"])
leaves = st.one_of(
    st.booleans(),
    st.fixed_dictionaries({}, optional={"type": types | st.lists(types, min_size=1, max_size=3)}),
    st.fixed_dictionaries({"enum": st.lists(st.sampled_from(["x", "y", "1", None]), min_size=1)}),
    st.fixed_dictionaries(
        {},
        optional={
            "minimum": st.integers(-2, 2) | st.floats(-2, 2),
            "maximum": st.integers(-2, 2),
            "exclusiveMinimum": st.integers(-2, 2) | st.floats(-2, 2),
            "exclusiveMaximum": st.integers(-2, 2),
            "minLength": st.integers(0, 2),
            "maxLength": st.integers(0, 2),
            "minItems": st.integers(0, 2),
            "maxItems": st.integers(0, 2),
            "description": st.text(max_size=3),
        },
    ),
)
schemas = st.recursive(
    leaves,
    lambda inner: st.one_of(
        st.fixed_dictionaries(
            {},
            optional={
                "type": st.just("object"),
                "properties": st.dictionaries(names, inner, max_size=3),
                "required": st.lists(names, max_size=3),
                "additionalProperties": inner,
            },
        ),
        st.fixed_dictionaries({"items": inner}, optional={"type": st.just("array")}),
        st.fixed_dictionaries({"anyOf": st.lists(inner, min_size=1, max_size=3)}),
    ),
    max_leaves=8,
)
values = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(-3, 3)
    | st.sampled_from([0.5, 2.0, -1.0, 1e300])
    | st.sampled_from(["", "x", "y", "1", "xyz"]),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(names, inner, max_size=3),
    max_leaves=10,
)


@settings(max_examples=500, deadline=None)
@given(schemas, values)
def test_the_quick_check_agrees_with_the_full_validator(schema: Any, value: Any) -> None:
    check = plain_check(schema)
    assert check is not None, schema
    full = Validator(schema, format_checker=FORMATS).is_valid(value)
    assert check(value) == full, (json.dumps(schema), value)


@settings(max_examples=500, deadline=None)
@given(leaves, values)
def test_each_keyword_agrees_with_the_full_validator(schema: Any, value: Any) -> None:
    check = plain_check(schema)
    assert check is not None, schema
    full = Validator(schema, format_checker=FORMATS).is_valid(value)
    assert check(value) == full, (json.dumps(schema), value)


@pytest.mark.parametrize(
    "signature",
    [
        "{name :string, age :int, email :string}",
        "{items [{sku :string, qty :int, price :float?}], note :string?, paid :bool}",
        "{kind :enum[a | b]?, tags [:string]?, extra :map, anything :any}",
    ],
)
def test_every_signature_compiles_to_a_plain_schema(signature: str) -> None:
    assert plain_check(compile_signature(signature).output_schema) is not None


@pytest.mark.parametrize(
    "schema",
    [
        {"$ref": "#/$defs/x", "$defs": {"x": {}}},
        {"type": "string", "pattern": "^a"},
        {"type": "string", "format": "email"},
        {"oneOf": [{"type": "string"}]},
        {"prefixItems": [{"type": "string"}]},
        {"enum": [1, 2]},
        {"type": "integer", "minimum": "1"},
        {"type": "strings"},
        {"properties": {"a": {"allOf": []}}},
        [],
    ],
)
def test_anything_else_is_left_to_the_full_validator(schema: Any) -> None:
    assert plain_check(schema) is None


def test_values_json_does_not_make_are_left_to_the_full_validator() -> None:
    check = plain_check({"type": "array"})
    assert check is not None
    assert not check(("a",))  # a tuple: the full validator decides (it says no)
    assert not Schema({"type": "array"}).is_valid(("a",))
    assert Schema({"minimum": 1}).is_valid(True)  # bounds apply to numbers only


def test_schema_answers_are_the_same_with_or_without_the_quick_check() -> None:
    schema = Schema(compile_signature("{name :string, age :int}").output_schema)
    assert schema.is_valid({"name": "a", "age": 3})
    assert schema.error_lines({"name": "a", "age": 3}) == ([], True)
    assert schema.failing_paths({"name": "a", "age": 3}) == ()
    assert schema.error_lines({"name": "a", "age": "3"}) == (
        ['$.age: expected integer, got string "3"'],
        True,
    )
    assert schema.failing_paths({"name": "a"}) == (("age",),)


def test_the_quick_check_is_charged_to_the_work_budget() -> None:
    schema = Schema({"type": "array", "items": {"type": "integer"}})
    with work_budget(10), pytest.raises(TooMuchWork):
        schema.is_valid(list(range(100)))
    with work_budget(1000):
        assert schema.is_valid(list(range(100)))
