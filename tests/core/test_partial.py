"""The incremental reader and the checked partial answer: complete values only, each
checked alone, the same whatever the chunking, and hostile streams cut off."""

from __future__ import annotations

import itertools
import json
import random
from typing import Any

import pytest

from app.core.answer.contract import Contract
from app.core.answer.grounding import build as grounded
from app.core.answer.incremental import Completed, Opened, Reader
from app.core.answer.partial import PartialAnswer
from app.core.wire.spec import ValidatorSpec

SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "name": {"type": "string", "minLength": 2},
        "age": {"type": "integer", "minimum": 0},
        "tags": {"type": "array", "items": {"enum": ["a", "b"]}},
        "home": {
            "type": "object",
            "properties": {"city": {"type": "string"}},
            "required": ["city"],
        },
        "either": {"anyOf": [{"type": "object"}, {"type": "string"}]},
    },
    "required": ["name", "age"],
}
ANSWER = {
    "name": 'Ada "Lovelace" é',
    "age": 36,
    "tags": ["a", "b"],
    "home": {"city": "London"},
    "either": {"x": [1, 2.5e3, True, None]},
}


def contract(schema: dict[str, Any] = SCHEMA, validators: tuple[Any, ...] = ()) -> Contract:
    return Contract(schema, None, None, validators)


def chunks(text: str, seed: int) -> list[str]:
    rng = random.Random(seed)
    out, i = [], 0
    while i < len(text):
        step = rng.randint(1, 7)
        out.append(text[i : i + step])
        i += step
    return out


def completed(reader: Reader, parts: list[str]) -> list[tuple[Any, Any]]:
    return [(e.path, e.value) for p in parts for e in reader.feed(p) if isinstance(e, Completed)]


@pytest.mark.parametrize("seed", range(8))
def test_every_chunking_completes_the_same_values(seed: int) -> None:
    text = "Here you go:\n```json\n" + json.dumps(ANSWER, ensure_ascii=False) + "\n```"
    whole = completed(Reader(max_chars=10_000, max_depth=10), [text])
    assert completed(Reader(max_chars=10_000, max_depth=10), chunks(text, seed)) == whole
    assert whole[-1] == ((), ANSWER)
    assert ((("name",), ANSWER["name"])) in whole


def test_escapes_split_across_chunks_are_read_whole() -> None:
    reader = Reader(max_chars=1000, max_depth=4)
    parts = ['{"q": "say \\', '"hi\\', '" \\u00', "e9", '"}']
    assert completed(reader, parts) == [(("q",), 'say "hi" é'), ((), {"q": 'say "hi" é'})]


def test_a_number_is_complete_only_at_its_delimiter() -> None:
    reader = Reader(max_chars=1000, max_depth=4)
    assert completed(reader, ['{"n": 12']) == []
    assert completed(reader, ["3"]) == []
    assert completed(reader, [",", '"m": 1}']) == [
        (("n",), 123),
        (("m",), 1),
        ((), {"n": 123, "m": 1}),
    ]


def test_containers_report_when_they_open() -> None:
    reader = Reader(max_chars=1000, max_depth=4)
    events = reader.feed('{"a": [')
    assert events == [Opened((), "object"), Opened(("a",), "array")]


@pytest.mark.parametrize(
    ("text", "why"),
    [
        ('{"a": 1,}', "expected a key"),
        ("{'a': 1}", "expected a key"),
        ('{"a": True}', "expected a value"),
        ('{"a": tru}', "not a JSON value"),
        ('{"a": "\\x"}', "escape"),
        ('{"a": 1]', "does not close"),
    ],
)
def test_what_is_not_json_stops_the_reader(text: str, why: str) -> None:
    reader = Reader(max_chars=1000, max_depth=4)
    reader.feed(text)
    assert reader.stopped is not None
    assert why in reader.stopped
    assert reader.feed('{"b": 2}') == []


def test_a_string_that_never_closes_is_cut_off_at_the_answer_limit() -> None:
    reader = Reader(max_chars=1_000_000, max_depth=4)
    assert reader.feed('{"a": "') == [Opened((), "object")]
    piece = "x" * 4096
    fed = 0
    while reader.stopped is None:
        assert reader.feed(piece) == []
        fed += len(piece)
    assert fed <= 1_000_000 + len(piece)
    assert "1000000 characters" in reader.stopped


def test_deep_nesting_is_cut_off() -> None:
    reader = Reader(max_chars=1_000_000, max_depth=100)
    reader.feed("[" * 10_000)
    assert reader.stopped is not None
    assert "nested more than 100" in reader.stopped


def test_a_million_tiny_chunks_are_read_once_each() -> None:
    items = ",".join(str(i % 10) for i in range(250_000))
    text = '{"xs": [' + items + "]}"
    reader = Reader(max_chars=2_000_000, max_depth=4)
    count = 0
    for char in text:  # one character at a time: over a million chunks
        count += len(reader.feed(char))
    assert reader.stopped is None
    assert reader.done
    assert count == 250_000 + 2 + 2  # every item, the array and the object, two opens


def feed_all(partial: PartialAnswer, text: str, seed: int = 0) -> list[tuple[Any, list[str]]]:
    shown = []
    for part in chunks(text, seed):
        if partial.feed(part):
            shown.append((partial.data(), list(partial.complete)))
    return shown


def test_only_values_that_pass_their_own_check_are_shown() -> None:
    bad = {**ANSWER, "name": "A", "age": -1, "tags": ["a", "c", "b"]}
    shown = feed_all(PartialAnswer(contract(), max_chars=10_000), json.dumps(bad))
    last, complete = shown[-1]
    assert "name" not in last  # too short
    assert "age" not in last  # below its minimum
    assert "tags" not in last  # an item failed: the array fails its own check
    assert last["home"] == {"city": "London"}
    assert "$.tags[2]" not in complete  # after a left-out item, indices would shift
    assert "$" not in complete  # the whole answer fails
    for data, _ in shown:
        assert data.get("tags", ["a"])[:1] == ["a"]


def test_a_value_without_a_schema_of_its_own_waits_for_the_value_around_it() -> None:
    partial = PartialAnswer(contract(), max_chars=10_000)
    text = json.dumps(ANSWER)
    before_end = text[: text.index('"either"') + 30]
    partial.feed(before_end)
    assert "either" not in partial.data()
    partial.feed(text[len(before_end) :])
    assert partial.data() == ANSWER
    assert partial.complete[-1] == "$"


def test_the_partial_grows_in_order_and_ends_as_the_answer() -> None:
    shown = feed_all(PartialAnswer(contract(), max_chars=10_000), json.dumps(ANSWER), seed=3)
    for (_, before), (_, after) in itertools.pairwise(shown):
        assert after[: len(before)] == before
    assert shown[-1][0] == ANSWER


def test_a_grounded_value_is_shown_only_when_the_input_holds_it() -> None:
    schema = {"type": "object", "properties": {"who": {"type": "string"}, "n": {"type": "integer"}}}
    check = grounded(ValidatorSpec(kind="grounded", paths=["$.who"]), "validators[0]", "Ada wrote")
    partial = PartialAnswer(contract(schema, (check,)), max_chars=1000)
    partial.feed('{"who": "Grace", "n": 3,')
    assert partial.data() == {"n": 3}
    partial = PartialAnswer(contract(schema, (check,)), max_chars=1000)
    partial.feed('{"who": "Ada", "n": 3,')
    assert partial.data() == {"who": "Ada", "n": 3}


def test_the_checks_stop_at_their_work_budget() -> None:
    # A pattern that costs many steps per item: the answer's budget runs out long before
    # its 20,000 items are checked, and nothing more is shown.
    schema = {"type": "array", "items": {"type": "string", "pattern": "^(a|b)*c?$"}}
    text = "[" + ",".join('"' + "ab" * 40 + '"' for _ in range(20_000)) + "]"
    partial = PartialAnswer(contract(schema), max_chars=2_000)
    for part in chunks(text, 1):
        partial.feed(part)
    assert partial.stopped is not None
    assert 0 < len(partial.complete) < 20_000
