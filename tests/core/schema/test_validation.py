"""Schema error lines a model can act on, and the checks a user-supplied schema must pass."""

from __future__ import annotations

import json
from typing import Any

import pytest
from jsonschema import Draft202012Validator

from app.core.schema.validation import Schema, check_schema, json_path, schema_errors
from app.core.wire.errors import InvalidInput

ORDER = {
    "$defs": {
        "line": {
            "type": "object",
            "properties": {
                "sku": {"type": "string", "minLength": 3},
                "qty": {"type": "integer", "minimum": 1},
            },
            "required": ["sku", "qty"],
            "additionalProperties": False,
        }
    },
    "type": "object",
    "properties": {
        "total": {"type": "number"},
        "priority": {"enum": ["low", "mid", "high"]},
        "lines": {"type": "array", "items": {"$ref": "#/$defs/line"}, "minItems": 1},
    },
    "required": ["total", "lines"],
}


def errors(value: Any, schema: dict[str, Any], **kwargs: Any) -> list[str]:
    return schema_errors(value, schema, **kwargs)


def test_valid_value_has_no_errors() -> None:
    assert errors({"total": 1, "lines": [{"sku": "abc", "qty": 1}]}, ORDER) == []


def test_type_error_quotes_the_bad_value() -> None:
    value = {"total": 1, "lines": [{"sku": "abc", "qty": 1}, {"sku": "abc", "qty": "3 units"}]}
    assert errors(value, ORDER) == ['$.lines[1].qty: expected integer, got string "3 units"']


def test_missing_required_field_is_named_at_its_object() -> None:
    assert errors({"total": 1, "lines": [{"sku": "abc"}]}, ORDER) == [
        '$.lines[0]: missing required field "qty"'
    ]


def test_unexpected_field_lists_the_allowed_ones() -> None:
    value = {"total": 1, "lines": [{"sku": "abc", "qty": 1, "foo": 2}]}
    assert errors(value, ORDER) == ['$.lines[0]: unexpected field "foo" (allowed: sku, qty)']


def test_enum_lists_the_choices() -> None:
    value = {"total": 1, "priority": "medium", "lines": [{"sku": "abc", "qty": 1}]}
    assert errors(value, ORDER) == [
        '$.priority: expected one of "low", "mid", "high", got "medium"'
    ]


def test_errors_follow_document_order_not_schema_order() -> None:
    value = {"lines": [{"qty": 0, "sku": "ab"}], "total": "12"}
    assert errors(value, ORDER) == [
        "$.lines[0].qty: expected a number >= 1, got 0",
        '$.lines[0].sku: expected at least 3 characters, got 2: "ab"',
        '$.total: expected number, got string "12"',
    ]


def test_errors_about_an_object_come_before_errors_inside_it() -> None:
    value = {"lines": [{"qty": "1"}]}
    assert errors(value, ORDER) == [
        '$: missing required field "total"',
        '$.lines[0]: missing required field "sku"',
        '$.lines[0].qty: expected integer, got string "1"',
    ]


def test_errors_are_capped_with_a_count_of_the_rest() -> None:
    value = {"total": 1, "lines": [{"sku": "abc", "qty": str(i)} for i in range(12)]}
    found = errors(value, ORDER, max_errors=3)
    assert found[:3] == [f'$.lines[{i}].qty: expected integer, got string "{i}"' for i in range(3)]
    assert found[3:] == ["... and 9 more errors"]


def test_identical_lines_are_reported_once() -> None:
    schema = {"allOf": [{"required": ["a"]}, {"required": ["a"]}]}
    assert errors({}, schema) == ['$: missing required field "a"']


def test_long_values_and_lines_are_truncated() -> None:
    found = errors({"s": "x" * 500}, {"properties": {"s": {"type": "integer"}}})
    assert found == [f'$.s: expected integer, got string "{"x" * 37}…"']
    many = {"enum": ["v" * 30 for _ in range(20)]}
    line = errors("nope", many)[0]
    assert len(line) == 200
    assert line.endswith("…")


@pytest.mark.parametrize(
    ("schema", "value", "message"),
    [
        ({"const": "x"}, "y", '$: expected "x", got "y"'),
        ({"maximum": 10}, 11, "$: expected a number <= 10, got 11"),
        ({"exclusiveMinimum": 0}, 0, "$: expected a number > 0, got 0"),
        ({"exclusiveMaximum": 1.5}, 2, "$: expected a number < 1.5, got 2"),
        ({"multipleOf": 5}, 12, "$: expected a multiple of 5, got 12"),
        ({"maxLength": 2}, "abc", '$: expected at most 2 characters, got 3: "abc"'),
        ({"pattern": "^[A-Z]{3}$"}, "usd", '$: expected a string matching ^[A-Z]{3}$, got "usd"'),
        (
            {"format": "date"},
            "2024-13-01",
            '$: expected a date like 2024-01-31 (format "date"), got "2024-13-01"',
        ),
        (
            {"format": "date-time"},
            "yesterday",
            "$: expected a date-time like 2024-01-31T12:00:00Z "
            '(format "date-time"), got "yesterday"',
        ),
        (
            {"format": "email"},
            "nobody",
            '$: expected an email address (format "email"), got "nobody"',
        ),
        (
            {"format": "uri"},
            "not a uri",
            '$: expected an absolute URI like https://example.com (format "uri"), got "not a uri"',
        ),
        ({"minItems": 1}, [], "$: expected at least 1 item, got 0"),
        ({"maxItems": 1}, [1, 2], "$: expected at most 1 item, got 2"),
        (
            {"uniqueItems": True},
            [1, 2, 1],
            "$: expected unique items, but 1 appears more than once",
        ),
        ({"minProperties": 2}, {"a": 1}, "$: expected at least 2 fields, got 1"),
        ({"not": {"type": "null"}}, None, "$: null is not allowed here"),
        (
            {"dependentRequired": {"card": ["cvv"]}},
            {"card": "x"},
            '$: missing field "cvv" (required when "card" is present)',
        ),
        (
            {"prefixItems": [{"type": "string"}], "items": False},
            ["a", "b"],
            "$: expected at most 1 item, got 2",
        ),
        ({"properties": {"x": False}}, {"x": 1}, "$: a field with value 1 is not allowed here"),
        ({"prefixItems": [False]}, [7], "$: 7 is not allowed here"),
        ({"type": ["string", "null"]}, 3, "$: expected string or null, got integer 3"),
        ({"type": "object"}, [1, 2], "$: expected object, got array [1, 2]"),
        ({"type": "string"}, None, "$: expected string, got null"),
        (
            {"propertyNames": {"pattern": "^[a-z]+$"}},
            {"Bad": 1},
            '$: invalid field name: expected a string matching ^[a-z]+$, got "Bad"',
        ),
        (
            {"additionalProperties": False},
            {"a": 1},
            '$: unexpected field "a" (this object allows no fields)',
        ),
        (
            {"contains": {"type": "integer"}},
            ["a"],
            '$: expected at least one item matching the "contains" schema',
        ),
    ],
)
def test_keyword_messages_read_as_plain_english(schema: Any, value: Any, message: str) -> None:
    assert errors(value, schema) == [message]


def test_any_of_with_no_matching_type_names_every_alternative() -> None:
    schema = {"anyOf": [{"type": "string"}, {"type": "integer"}, {"const": False}]}
    assert errors(True, schema) == ["$: expected string or integer or false, got boolean true"]


def test_any_of_reports_the_closest_branch_errors() -> None:
    schema = {
        "type": "object",
        "properties": {
            "item": {
                "anyOf": [
                    {
                        "type": "object",
                        "properties": {"kind": {"const": "book"}, "isbn": {"type": "string"}},
                        "required": ["kind", "isbn"],
                    },
                    {
                        "type": "object",
                        "properties": {"kind": {"const": "film"}, "minutes": {"type": "integer"}},
                        "required": ["kind", "minutes"],
                    },
                    {"type": "null"},
                ]
            }
        },
    }
    assert errors({"item": {"kind": "film"}}, schema) == [
        '$.item: missing required field "minutes"'
    ]
    assert errors({"item": {"kind": "film", "minutes": "90"}}, schema) == [
        '$.item.minutes: expected integer, got string "90"'
    ]


def test_one_of_matching_twice_says_so() -> None:
    schema = {"oneOf": [{"type": "integer"}, {"type": "number"}]}
    assert errors(3, schema) == ["$: matches more than one alternative of oneOf; it must match one"]


def test_json_path_quotes_keys_that_are_not_identifiers() -> None:
    assert json_path([]) == "$"
    assert json_path(["lines", 2, "qty"]) == "$.lines[2].qty"
    assert json_path(["odd key", "a-b", "_ok", 'q"']) == '$["odd key"]["a-b"]._ok["q\\""]'


def test_errors_under_odd_keys_use_bracket_paths() -> None:
    schema = {"properties": {"unit price": {"type": "number"}}}
    assert errors({"unit price": "x"}, schema) == [
        '$["unit price"]: expected number, got string "x"'
    ]


# -- check_schema ---------------------------------------------------------------------


def schema_problem(schema: Any, **kwargs: Any) -> str:
    with pytest.raises(InvalidInput) as caught:
        check_schema(schema, **kwargs)
    assert caught.value.field == "schema"
    return caught.value.detail


def test_a_good_schema_passes() -> None:
    check_schema(ORDER)
    check_schema({"$schema": "https://json-schema.org/draft/2020-12/schema#", "type": "string"})


def test_schema_must_be_an_object() -> None:
    assert schema_problem(["type", "string"]) == "schema must be a JSON object, got array"


def test_other_dialects_are_refused() -> None:
    detail = schema_problem({"$schema": "http://json-schema.org/draft-07/schema#"})
    assert detail.startswith('schema declares $schema "http://json-schema.org/draft-07/schema#"')
    assert "only JSON Schema 2020-12" in detail


def test_meta_schema_violations_name_the_place() -> None:
    detail = schema_problem({"properties": {"age": {"type": "int"}}})
    assert detail.startswith("schema is not valid JSON Schema 2020-12: $.properties.age.type:")
    assert '"int"' in detail
    items = schema_problem({"items": [{"type": "string"}]})
    assert "$.items: expected object or boolean, got array" in items


def test_unresolvable_refs_are_refused() -> None:
    detail = schema_problem({"properties": {"a": {"$ref": "#/$defs/missing"}}})
    assert detail.startswith('schema has an unresolvable $ref "#/$defs/missing" at $.properties.a')
    remote = schema_problem({"$ref": "https://example.com/schema.json"})
    assert 'unresolvable $ref "https://example.com/schema.json"' in remote


def test_refs_resolve_against_nested_ids_and_anchors() -> None:
    check_schema(
        {
            "$id": "https://example.com/root.json",
            "$defs": {
                "a": {"$id": "a.json", "$defs": {"b": {"$anchor": "bee", "type": "string"}}},
            },
            "properties": {
                "x": {"$ref": "a.json#bee"},
                "y": {"$ref": "#/$defs/a/$defs/b"},
                "z": {"$ref": "#"},
            },
        }
    )


def test_too_deep_schemas_are_refused() -> None:
    schema: dict[str, Any] = {"type": "string"}
    for _ in range(20):
        schema = {"type": "object", "properties": {"a": schema}}
    check_schema(schema)
    assert schema_problem(schema, max_depth=10).startswith(
        "schema is nested too deeply: more than 10 subschemas"
    )
    raw: Any = "leaf"
    for _ in range(5000):  # nested data, not subschemas: must not blow the stack
        raw = [raw]
    assert "nested too deeply" in schema_problem({"enum": [raw]})


def test_a_flood_of_errors_is_bounded_and_says_so() -> None:
    found = errors(["x"] * 5000, {"type": "array", "items": {"type": "integer"}}, max_errors=2)
    assert found[:2] == [
        '$[0]: expected integer, got string "x"',
        '$[1]: expected integer, got string "x"',
    ]
    assert found[2] == "... and at least 998 more errors"


def test_a_schema_is_compiled_once_and_keeps_no_callers_dict() -> None:
    from app.core.schema.validation import compiled

    schema: dict[str, Any] = {"type": "object", "properties": {"n": {"type": "integer"}}}
    first = compiled(schema)
    assert compiled({"type": "object", "properties": {"n": {"type": "integer"}}}) is first
    schema["properties"]["n"]["type"] = "string"  # the caller's dict changes afterwards
    assert first.errors({"n": 1}) == []
    assert compiled(schema) is not first
    assert compiled(schema).errors({"n": 1}) != []


def test_a_fixed_schema_is_compiled_and_derived_from_once() -> None:
    from app.core.schema.validation import compiled, derived, fixed

    schema = fixed({"type": "object", "properties": {"n": {"type": "integer"}}})
    assert compiled(schema) is compiled(schema)
    made: list[int] = []

    def text(s: dict[str, Any]) -> str:
        made.append(1)
        return json.dumps(s)

    assert derived(schema, "text", text) == derived(schema, "text", text) == json.dumps(schema)
    assert len(made) == 1
    # An equal schema that was not declared fixed is derived from every time.
    other = json.loads(json.dumps(schema))
    assert derived(other, "text", text) == json.dumps(schema)
    assert len(made) == 2
    assert compiled(other).errors({"n": "x"}) == ['$.n: expected integer, got string "x"']


# unevaluatedProperties seeing through $refs: from a sibling, inside a subschema with an
# $id of its own (relative refs resolve against it), under if/then/else, dependentSchemas,
# oneOf/anyOf and patternProperties.
UNEVALUATED: list[tuple[dict[str, Any], list[Any]]] = [
    (
        {
            "$defs": {"base": {"properties": {"a": {"type": "integer"}}}},
            "$ref": "#/$defs/base",
            "properties": {"b": {"type": "string"}},
            "unevaluatedProperties": False,
        },
        [{"a": 1, "b": "x"}, {"a": 1, "c": 2}, {"b": "x"}, {"a": "no"}],
    ),
    (
        {
            "$id": "https://example.com/root.json",
            "$defs": {
                "inner": {
                    "$id": "inner/",
                    "$defs": {"leaf": {"properties": {"z": True}}},
                    "allOf": [{"$ref": "#/$defs/leaf"}],
                    "properties": {"y": True},
                }
            },
            "allOf": [{"$ref": "inner/"}],
            "properties": {"x": True},
            "unevaluatedProperties": False,
        },
        [{"x": 1, "y": 2, "z": 3}, {"x": 1, "w": 2}, {"z": 1}],
    ),
    (
        {
            "$defs": {
                "named": {
                    "if": {"properties": {"kind": {"const": "a"}}},
                    "then": {"properties": {"kind": True, "alpha": True}},
                    "else": {"properties": {"kind": True, "beta": True}},
                },
                "extra": {"$ref": "#/$defs/named", "unevaluatedProperties": False},
            },
            "properties": {"item": {"$ref": "#/$defs/extra"}},
        },
        [
            {"item": {"kind": "a", "alpha": 1}},
            {"item": {"kind": "a", "beta": 1}},
            {"item": {"kind": "b", "beta": 1}},
            {"item": {"kind": "b", "alpha": 1}},
        ],
    ),
    (
        {
            "$defs": {"dep": {"properties": {"d": True}}},
            "dependentSchemas": {"c": {"$ref": "#/$defs/dep"}},
            "properties": {"c": True},
            "unevaluatedProperties": {"type": "integer"},
        },
        [{"c": 1, "d": "x"}, {"d": "x"}, {"d": 3}, {"c": 1, "e": "s"}],
    ),
    (
        {
            "$defs": {
                "pp": {"patternProperties": {"^p": True}, "anyOf": [{"$ref": "#/$defs/q"}]},
                "q": {"properties": {"q": True}},
            },
            "oneOf": [{"$ref": "#/$defs/pp"}],
            "unevaluatedProperties": False,
        },
        [{"p1": 1, "q": 2}, {"p1": 1, "r": 2}, {"q": 1}],
    ),
]


@pytest.mark.parametrize(("schema", "values"), UNEVALUATED)
def test_unevaluated_properties_follow_refs_from_where_they_stand(
    schema: dict[str, Any], values: list[Any]
) -> None:
    check_schema(schema)
    compiled = Schema(schema)
    for value in values:
        stock = Draft202012Validator(schema).is_valid(value)
        assert compiled.is_valid(value) is stock, value
        assert (compiled.errors(value) == []) is stock, value
