"""The grammar sent to the embedded llama.cpp server: numbers' digits bounded, from the
schema's bounds or the defaults (tests/e2e run it on the model)."""

from __future__ import annotations

from typing import Any

import pytest

from app.core.turn.model import LLMRequest, Message
from app.providers.config import ModelConfig
from app.providers.grammar import (
    DEFAULT_FRACTION_DIGITS,
    DEFAULT_INTEGER_DIGITS,
    bounded_grammar,
    digit_bounds,
)
from app.providers.openai import request_body

pytest.importorskip("llama_cpp.llama_grammar")

SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {"n": {"type": "integer"}, "w": {"type": "number"}},
    "required": ["n", "w"],
}


def rule(grammar: str, name: str) -> str:
    return next(line for line in grammar.splitlines() if line.startswith(f"{name} ::="))


def test_the_digit_rules_are_bounded_and_llama_cpp_reads_the_grammar() -> None:
    grammar = bounded_grammar(SCHEMA)
    assert grammar is not None
    assert rule(grammar, "integral-part").count("[0-9]") == DEFAULT_INTEGER_DIGITS
    assert rule(grammar, "decimal-part").count("[0-9]") == DEFAULT_FRACTION_DIGITS
    assert "[eE]" not in rule(grammar, "number")


def test_the_schema_s_own_bounds_win_when_every_number_has_them() -> None:
    schema = {
        "type": "object",
        "properties": {
            "n": {"type": "integer", "minimum": 0, "maximum": 500},
            "price": {"type": "number", "maximum": 99999, "multipleOf": 0.01},
        },
    }
    assert digit_bounds(schema) == (5, 2)
    partly = {"type": "array", "items": [{"type": "integer", "maximum": 9}, {"type": "number"}]}
    assert digit_bounds({"type": "array", "prefixItems": partly["items"]}) == (
        DEFAULT_INTEGER_DIGITS,
        DEFAULT_FRACTION_DIGITS,
    )


def test_a_schema_without_numbers_is_sent_as_a_schema() -> None:
    assert bounded_grammar({"type": "object", "properties": {"s": {"type": "string"}}}) is None


def test_the_request_carries_the_grammar_only_for_a_grammar_model() -> None:
    request = LLMRequest(messages=(Message("user", "x"),), output_schema=SCHEMA)
    local = ModelConfig(provider="local", structured="json_object_schema", grammar=True)
    body, _ = request_body(request, spec=local, mechanism="json_object_schema")
    assert "grammar" in body
    assert "response_format" not in body
    other = ModelConfig(provider="local", structured="json_object_schema")
    body, _ = request_body(request, spec=other, mechanism="json_object_schema")
    assert body["response_format"] == {"type": "json_object", "schema": SCHEMA}
