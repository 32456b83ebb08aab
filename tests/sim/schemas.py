"""Schemas for the generator and defect tests: one rich example and a hypothesis strategy."""

from __future__ import annotations

from typing import Any

from hypothesis import strategies as st

RICH_SCHEMA: dict[str, Any] = {
    "$schema": "https://json-schema.org/draft/2020-12/schema",
    "$defs": {
        "money": {
            "type": "object",
            "properties": {
                "amount": {"type": "number", "exclusiveMinimum": 0, "maximum": 10},
                "currency": {"enum": ["EUR", "USD"]},
            },
            "required": ["amount", "currency"],
            "additionalProperties": False,
        }
    },
    "type": "object",
    "properties": {
        "id": {"type": "string", "format": "uuid"},
        "code": {"type": "string", "pattern": "^(AB|CD)-[0-9]{3}[a-z]?$"},
        "when": {"type": "string", "format": "date"},
        "email": {"type": "string", "format": "email"},
        "total": {"$ref": "#/$defs/money"},
        "lines": {"type": "array", "items": {"$ref": "#/$defs/money"}, "minItems": 3},
        "note": {"anyOf": [{"type": "null"}, {"type": "string", "maxLength": 5}]},
        "count": {"type": "integer", "multipleOf": 5, "minimum": 12, "maximum": 40},
        "kind": {"const": "invoice"},
        "flags": {"type": "array", "items": {"type": "boolean"}, "maxItems": 1},
        "pair": {"type": "array", "prefixItems": [{"type": "integer"}, {"type": "string"}]},
        "mixin": {
            "allOf": [
                {"properties": {"a": {"type": "integer"}}, "required": ["a"]},
                {"properties": {"b": {"type": "string"}}, "required": ["b"]},
            ]
        },
    },
    "required": ["id", "code", "total", "lines", "count", "kind", "mixin"],
    "additionalProperties": False,
}


_leaf = st.one_of(
    st.builds(lambda lo, span: {"type": "integer", "minimum": lo, "maximum": lo + span},
              st.integers(-1000, 1000), st.integers(0, 50)),
    st.builds(lambda n: {"type": "string", "minLength": n, "maxLength": n + 4}, st.integers(0, 20)),
    st.just({"type": "boolean"}),
    st.lists(st.text("abc", min_size=1, max_size=3), min_size=1, max_size=4, unique=True).map(
        lambda values: {"enum": values}
    ),
)  # fmt: skip
json_schemas = st.recursive(
    _leaf,
    lambda inner: st.one_of(
        st.dictionaries(st.text("xyz", min_size=1, max_size=4), inner, min_size=1, max_size=4).map(
            lambda props: {
                "type": "object",
                "properties": props,
                "required": sorted(props),
                "additionalProperties": False,
            }
        ),
        inner.map(lambda items: {"type": "array", "items": items, "minItems": 1}),
    ),
    max_leaves=8,
)
