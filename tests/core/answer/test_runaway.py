"""Loops in cut-off answers (app.core.answer.runaway) and what the next call does about them."""

from __future__ import annotations

from typing import Any

import pytest

from app.core.answer.runaway import looping
from app.core.turn.loop import Runtime, run_job
from app.core.wire.spec import JobSpec
from app.providers.structured import bound_arrays
from tests.core.fakes import ScriptedClient, answer, reply

# Answers gemma 3 270M gave on docs/benchmarks/real-model.md's tasks, cut at 128 tokens.
COUNTING = '{ "values": [1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16, 17, 18, 19, 20,'
SAME_ITEMS = '{ "vendor": "ACME", "lines": [' + '{"sku": "}, {", "amount": 126.70}, ' * 6 + '{"sku'


@pytest.mark.parametrize(
    "text",
    [
        COUNTING,
        SAME_ITEMS,
        '{"a": "' + " " * 300,  # whitespace runaway
        '{"a": 1,' + "\n" * 40,
        '{"text": "' + "ha " * 40,
    ],
)
def test_a_tail_that_repeats_itself_is_a_loop(text: str) -> None:
    assert looping(text)


@pytest.mark.parametrize(
    "text",
    [
        '{"name": "Alice Moreau", "bio": "Born in Lyon, she studied law and moved to Paris',
        '["aa", "bb", "cc", "dd", "ee", "ff", "gg", "hh", "ii",',
        '{"x": 1' + "0" * 60,  # one long number is not a repeated part
        # A loop that ended before the cut (the list was closed): not looping at the cut.
        '{"lines": [' + '{"sku": ": 277, ", "amount": 92.82}, ' * 4 + '{"sku": "x"}], "total":',
        "",
        "{",
    ],
)
def test_an_answer_merely_cut_short_is_not_a_loop(text: str) -> None:
    assert not looping(text)


def test_bound_arrays_bounds_every_unbounded_list_and_keeps_the_rest() -> None:
    schema: dict[str, Any] = {
        "type": "object",
        "properties": {
            "a": {"type": "array", "items": {"type": "integer"}, "minItems": 5},
            "b": {"type": "array", "maxItems": 2, "items": {"type": "array"}},
            "c": {"type": ["array", "null"]},
            "d": {"type": "string"},
        },
    }
    bounded = bound_arrays(schema, 3)
    props = bounded["properties"]
    assert props["a"]["maxItems"] == 5  # never below minItems
    assert props["b"]["maxItems"] == 2  # its own bound stays
    assert props["b"]["items"]["maxItems"] == 3
    assert props["c"]["maxItems"] == 3
    assert props["d"] == {"type": "string"}
    assert "maxItems" not in schema["properties"]["a"]  # a copy


def test_bound_arrays_leaves_values_alone() -> None:
    # const/enum/default/examples hold data that happens to look like a schema
    shaped = {"type": "array"}
    schema: dict[str, Any] = {
        "anyOf": [{"const": shaped}, {"enum": [shaped]}, {"type": "array", "default": shaped}]
    }
    bounded = bound_arrays(schema, 3)
    const, enum, array = bounded["anyOf"]
    assert const == {"const": shaped}
    assert enum == {"enum": [shaped]}
    assert array == {"type": "array", "default": shaped, "maxItems": 3}


STATS = {
    "type": "object",
    "properties": {"values": {"type": "array", "items": {"type": "integer"}}},
    "required": ["values"],
    "additionalProperties": False,
}


def job(**fields: Any) -> JobSpec:
    body: dict[str, Any] = {
        "task": "List the readings.",
        "input": "Readings: 2, 42, 5.",
        "schema": STATS,
        "maxOutputTokens": 100,
        "budget": {"maxTurns": 1, "returnRetries": 1},
    }
    return JobSpec.model_validate(body | fields)


async def test_a_looping_answer_is_asked_again_differently_not_bigger() -> None:
    client = ScriptedClient([reply(COUNTING, finish="length"), answer({"values": [2, 42, 5]})])
    result = await run_job(job(), Runtime(client=client))
    assert result.envelope.data == {"values": [2, 42, 5]}
    first, second = client.requests
    # Not the same request with twice the room: the same room, the loop named, and the
    # lists bounded by the input's length in words (4) where a grammar compiles the schema.
    assert [r.max_output_tokens for r in client.requests] == [100, 100]
    assert (first.max_items, second.max_items) == (None, 4)
    assert "repeated the same part over and over" in second.messages[-1].content
    assert COUNTING not in second.messages[-1].content
    assert result.turns[0].outcome == "truncated"
    assert "repeated the same part" in (result.turns[0].diagnosis or "")


async def test_an_answer_merely_cut_short_is_still_asked_again_bigger() -> None:
    client = ScriptedClient([reply('{"values": [2, 42', finish="length"), answer({"values": [2]})])
    result = await run_job(job(), Runtime(client=client))
    assert result.envelope.status == "success"
    assert [r.max_output_tokens for r in client.requests] == [100, 200]
    assert [r.max_items for r in client.requests] == [None, None]
