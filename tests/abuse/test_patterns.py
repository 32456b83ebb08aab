"""Client regular expressions run in linear time (RE2), at submit and on model output.

Before: ``POST /v1/jobs`` with the 150-byte schema below took 737 s (the example builder
tried sample strings against the pattern with Python's backtracking ``re``), and the
answer ``"aaaa…a!"`` against ``^(a+)+$`` held a worker's event loop for minutes. RE2 runs
every client pattern (``app.core.schema.pattern``), so these finish; bench/hostile_inputs.py
measures how fast.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from app.core.answer.check import check_answer
from app.core.answer.contract import build_contract
from app.core.schema.pattern import PatternError, UnsupportedPattern, compile_pattern, translate
from app.core.schema.validation import check_schema, schema_errors
from app.core.turn.loop import JobResult, Runtime, run_job
from app.core.wire import codes
from app.core.wire.errors import InvalidInput
from app.core.wire.spec import JobSpec
from tests.abuse.service import api, problem_field
from tests.core.fakes import ScriptedClient, reply

FROZE_THE_API: dict[str, Any] = {
    "task": "x",
    "schema": {
        "type": "object",
        "properties": {"a": {"type": "string", "minLength": 32, "pattern": "(x+x+)+y"}},
        "required": ["a"],
    },
}
EVIL = "^(a+)+$"
EVIL_ANSWER = "a" * 31 + "!"


@pytest.fixture(scope="module")
def http(tmp_path_factory: pytest.TempPathFactory) -> Iterator[httpx.Client]:
    with (
        api(tmp_path_factory.mktemp("patterns")) as url,
        httpx.Client(base_url=url, timeout=30) as client,
    ):
        yield client


def test_the_150_byte_schema_that_froze_the_api_is_accepted_at_once(http: httpx.Client) -> None:
    response = http.post("/v1/jobs", json=FROZE_THE_API)
    assert response.status_code == 202, response.text


def test_a_hostile_pattern_property_is_accepted_at_once(http: httpx.Client) -> None:
    spec = {
        "task": "x",
        "schema": {
            "type": "object",
            "patternProperties": {"(x+x+)+y": {"type": "string", "pattern": "(a|a)*b"}},
            "minProperties": 1,
        },
    }
    response = http.post("/v1/jobs", json=spec)
    assert response.status_code == 202, response.text


@pytest.mark.parametrize(
    ("pattern", "feature"),
    [
        ("^(?=.*\\d)\\w+$", "lookahead"),
        ("(?<!x)y", "lookbehind"),
        ("(a)\\1", "backreferences"),
        ("(?<q>a)\\k<q>", "backreferences"),
        ("(?>a+)b", "atomic groups"),
    ],
)
def test_a_pattern_re2_cannot_run_is_a_422_naming_the_schema_and_the_feature(
    http: httpx.Client, pattern: str, feature: str
) -> None:
    spec = {"task": "x", "schema": {"type": "string", "pattern": pattern}}
    response = http.post("/v1/jobs", json=spec)
    assert problem_field(response) == "schema"
    assert feature in response.json()["detail"]
    assert "$.pattern" in response.json()["detail"]


def test_an_unsupported_pattern_property_name_is_a_422(http: httpx.Client) -> None:
    spec = {"task": "x", "schema": {"type": "object", "patternProperties": {"(?=a)": {}}}}
    response = http.post("/v1/jobs", json=spec)
    assert problem_field(response) == "schema"
    assert "patternProperties" in response.json()["detail"]


def test_an_unsupported_regex_validator_is_a_422_naming_the_validator(http: httpx.Client) -> None:
    spec = {
        "task": "x",
        "signature": "{a :string}",
        "validators": [{"kind": "regex", "path": "$.a", "pattern": "(?!x)"}],
    }
    response = http.post("/v1/jobs", json=spec)
    assert problem_field(response) == "validators[0]"
    assert "lookahead" in response.json()["detail"]


# -- model output against client patterns ------------------------------------------------------


@pytest.mark.parametrize(
    "schema",
    [
        {"type": "object", "properties": {"a": {"type": "string", "pattern": EVIL}}},
        {"type": "object", "patternProperties": {EVIL: {"type": "integer"}}},
        {"type": "object", "propertyNames": {"pattern": EVIL}},
        {"type": "object", "patternProperties": {EVIL: True}, "additionalProperties": False},
        {"type": "object", "patternProperties": {EVIL: True}, "unevaluatedProperties": False},
    ],
    ids=["pattern", "patternProperties", "propertyNames", "additional", "unevaluated"],
)
def test_a_hostile_answer_is_rejected_in_milliseconds(schema: dict[str, Any]) -> None:
    check_schema(schema)
    # The evil string as a value and as a key: every keyword that matches patterns sees it.
    answer = f'{{"a": "{EVIL_ANSWER}", "{EVIL_ANSWER}": "{EVIL_ANSWER}"}}'
    checked = check_answer(answer, schema)
    assert not checked.ok
    assert checked.kind == "schema"


def test_a_hostile_answer_ends_as_a_rejected_turn_with_a_diagnosis() -> None:
    spec = JobSpec.model_validate(
        {
            "task": "x",
            "schema": {"type": "object", "properties": {"a": {"type": "string", "pattern": EVIL}}},
            "budget": {"maxTurns": 1},
        }
    )
    client = ScriptedClient([reply(f'{{"a": "{EVIL_ANSWER}"}}')])
    result = _run(spec, client)
    (turn,) = result.turns
    assert turn.outcome == "invalid"
    assert turn.error_code == codes.LLM_INVALID_OUTPUT
    assert turn.diagnosis is not None
    assert "expected a string matching ^(a+)+$" in turn.diagnosis


def _run(spec: JobSpec, client: ScriptedClient) -> JobResult:
    return asyncio.run(run_job(spec, Runtime(client=client)))


def test_the_regex_validator_is_linear_on_a_hostile_answer() -> None:
    spec = JobSpec.model_validate(
        {
            "task": "x",
            "signature": "{a :string}",
            "validators": [{"kind": "regex", "path": "$.a", "pattern": EVIL}],
        }
    )
    (validator,) = build_contract(spec).validators
    verdict = validator({"a": EVIL_ANSWER})
    assert isinstance(verdict, tuple)  # a regex validator answers at once
    assert verdict[0] is False


def test_format_regex_never_runs_a_backtracking_engine() -> None:
    schema = {"type": "object", "properties": {"r": {"type": "string", "format": "regex"}}}
    nested = "(" * 50_000 + ")" * 50_000  # Python's re.compile recursed on this one
    # Each is judged (none recurses or backtracks): the first two are ECMA regexes, the
    # nesting is past the parser's depth and the repeat past its count.
    for value in ("(x+x+)+y", "(?=lookahead)ok"):
        assert schema_errors({"r": value}, schema) == [], value
    for value in (nested, "a{99999999}"):
        assert schema_errors({"r": value}, schema), value[:20]
    assert schema_errors({"r": "(unclosed"}, schema)
    assert schema_errors({"r": "^[a-z]+$"}, schema) == []


def test_a_long_answer_is_matched_in_linear_time() -> None:
    schema = {"type": "object", "properties": {"a": {"type": "string", "pattern": EVIL}}}
    answer = '{"a": "' + "a" * 200_000 + '!"}'
    checked = check_answer(answer, schema)
    assert checked.kind == "schema"


# -- the engine ---------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("pattern", "text", "matches"),
    [
        ("^\\d+$", "٣", False),  # ECMA \d is ASCII (Python's re is Unicode)
        ("^\\w+$", "é", False),  # ECMA \w is ASCII
        ("^\\s$", "\u00a0", True),  # ECMA \s includes Unicode spaces
        ("^\\s$", "\v", True),
        ("^\\S$", "\u2028", False),
        ("^.$", "\r", False),  # ECMA . excludes line terminators
        ("^.$", "\u2029", False),
        ("^a$", "a\n", False),  # ECMA $ is the end of the text (Python's allows a final \n)
        ("^[^]$", "\n", True),
        ("^[]$", "", False),
        ("^\\u00e9\\u{1F600}$", "é😀", True),
        ("^\\uD83D\\uDE00$", "😀", True),
        ("^\\cJ$", "\n", True),
        ("^(?<year>\\d{4})$", "2024", True),
        ("^[\\s\\d]+$", " 1\u3000", True),
        ("^[[]$", "[", True),
        ("^\\p{Lu}+$", "ÉA", True),
        ("^a\\/b\\.c$", "a/b.c", True),
    ],
)
def test_patterns_mean_what_ecma_262_says(pattern: str, text: str, matches: bool) -> None:
    assert compile_pattern(pattern).search(text) is matches


def test_unsupported_features_are_told_apart_from_invalid_patterns() -> None:
    with pytest.raises(UnsupportedPattern):
        translate("(?=a)")
    with pytest.raises(PatternError) as invalid:
        compile_pattern("(unclosed")
    assert not isinstance(invalid.value, UnsupportedPattern)
    with pytest.raises(InvalidInput):
        check_schema({"type": "string", "pattern": "(unclosed"})
