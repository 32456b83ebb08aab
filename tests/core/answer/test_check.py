"""check_answer: the one entry point from raw model text to a verdict."""

from __future__ import annotations

import json
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from app.core.answer.check import EMPTY_ANSWER, NO_JSON, Checked, SyntaxProblem, check_answer

INVOICE = {
    "type": "object",
    "properties": {
        "total": {"type": "number"},
        "lines": {
            "type": "array",
            "items": {
                "type": "object",
                "properties": {"sku": {"type": "string"}, "qty": {"type": "integer"}},
                "required": ["sku", "qty"],
                "additionalProperties": False,
            },
        },
    },
    "required": ["total"],
}


def ok(text: str, schema: dict[str, Any] = INVOICE, **kwargs: Any) -> Checked:
    checked = check_answer(text, schema, **kwargs)
    assert checked.ok, checked
    assert checked.kind is None
    assert checked.errors == ()
    assert checked.syntax is None
    return checked


def rejected(text: str, schema: dict[str, Any] = INVOICE, **kwargs: Any) -> Checked:
    checked = check_answer(text, schema, **kwargs)
    assert not checked.ok, checked
    return checked


# -- the happy paths ------------------------------------------------------------------


def test_clean_json_passes_without_warnings() -> None:
    checked = ok('{"total": 12.5, "lines": [{"sku": "a", "qty": 1}]}')
    assert checked.value == {"total": 12.5, "lines": [{"sku": "a", "qty": 1}]}
    assert checked.warnings == ()
    assert checked.candidate == '{"total": 12.5, "lines": [{"sku": "a", "qty": 1}]}'


def test_fenced_answer_in_prose_is_extracted_repaired_and_coerced() -> None:
    text = "Here you go:\n```json\n{\n  'total': '12.5',\n  lines: [{sku: 'a', qty: 2.0},],\n}\n```"
    checked = ok(text)
    assert checked.value == {"total": 12.5, "lines": [{"sku": "a", "qty": 2}]}
    assert checked.warnings == (
        "extract: took the JSON object from a ```json code fence",
        "repair: changed 3 single-quoted strings to double quotes (first at line 2, col 3)",
        "repair: quoted 3 unquoted object keys (first at line 3, col 3)",
        "repair: removed 2 trailing commas (first at line 3, col 31)",
        'repair: coerced $.total from string "12.5" to number',
        "repair: coerced $.lines[0].qty from number 2.0 to integer",
    )
    assert checked.candidate is not None
    assert checked.candidate.startswith("{\n  'total'")


def test_json_in_prose_is_extracted_with_a_note() -> None:
    checked = ok('The invoice total is {"total": 3}. Let me know!')
    assert checked.value == {"total": 3}
    assert checked.warnings == (
        "extract: took the JSON object out of surrounding prose "
        "(ignored 20 characters before it, 14 after)",
    )


def test_lone_object_is_wrapped_when_the_schema_wants_a_list() -> None:
    schema = {"type": "array", "items": {"type": "object", "required": ["a"]}}
    checked = ok('{"a": 1}', schema)
    assert checked.value == [{"a": 1}]
    assert checked.warnings == ("repair: wrapped the object at $ in a list",)


def test_python_literal_scalar_answer_is_repaired() -> None:
    checked = ok("True", {"type": "boolean"})
    assert checked.value is True


# -- several candidates ---------------------------------------------------------------


def test_first_valid_candidate_wins_over_an_invalid_echo() -> None:
    text = 'You asked for {"totl": 0}; here it is: {"total": 7}'
    checked = ok(text)
    assert checked.value == {"total": 7}
    assert checked.candidate == '{"total": 7}'


def test_two_valid_candidates_take_the_first_and_say_so() -> None:
    checked = ok('Format: {"total": 0}. Answer: {"total": 7}')
    assert checked.value == {"total": 0}
    assert checked.warnings[-1] == (
        "extract: the answer holds 2 different JSON values that match the schema; took the first"
    )


def test_no_valid_candidate_reports_on_the_one_with_fewest_errors() -> None:
    text = 'A: {"lines": [{"qty": "x"}]} B: {"total": "x"}'
    checked = rejected(text)
    assert checked.kind == "schema"
    assert checked.candidate == '{"total": "x"}'
    assert checked.errors == ('$.total: expected number, got string "x"',)


def test_ties_go_to_the_last_candidate() -> None:
    checked = rejected('{"total": "a"} then {"total": "b"}')
    assert checked.candidate == '{"total": "b"}'


def test_a_parseable_candidate_beats_an_unparseable_one() -> None:
    checked = rejected('{"total": 1,, "x"} or rather {"total": "1 euro"}')
    assert checked.kind == "schema"
    assert checked.candidate == '{"total": "1 euro"}'


def test_a_candidate_of_the_wrong_kind_does_not_hide_a_broken_answer() -> None:
    checked = rejected('As noted in [1], the result is {"total" 1, "lines": []}')
    assert checked.kind == "syntax"
    assert checked.candidate == '{"total" 1, "lines": []}'


# -- diagnostics ----------------------------------------------------------------------


def test_syntax_error_has_line_column_and_a_caret_excerpt() -> None:
    text = '{\n  "lines": [],\n  "total" 12\n}'
    checked = rejected(text)
    assert checked.kind == "syntax"
    assert checked.value is None
    assert checked.errors == ("line 3, column 11: Expecting ':' delimiter",)
    assert checked.syntax == SyntaxProblem(
        line=3,
        column=11,
        message="Expecting ':' delimiter",
        excerpt='  3 |   "total" 12\n    |           ^',
    )
    assert checked.candidate == text


def test_syntax_error_position_is_in_the_models_own_text_after_repairs() -> None:
    text = "{'a': 1, // c\n 'total': 2 'lines': []}"
    checked = rejected(text)
    assert checked.syntax is not None
    assert (checked.syntax.line, checked.syntax.column) == (2, 13)
    assert checked.syntax.excerpt == "  2 |  'total': 2 'lines': []}\n    |             ^"
    assert checked.warnings == (
        "repair: changed 2 single-quoted strings to double quotes (first at line 1, col 2)",
        "repair: removed a comment (line 1, col 10)",
    )


def test_truncated_answer_is_a_syntax_error_at_the_end() -> None:
    checked = rejected('Sure: {"total": 12, "lines": [{"sku": "a"')
    assert checked.kind == "syntax"
    assert checked.errors == (
        "line 1, column 36: Expecting ',' delimiter "
        "(the text ends before the JSON value is complete)",
    )


def test_syntax_excerpt_on_a_long_line_is_windowed() -> None:
    text = '{"total": 1, "note": "' + "n" * 300 + '", "lines" []}'
    checked = rejected(text)
    assert checked.syntax is not None
    first, caret = checked.syntax.excerpt.split("\n")
    assert first.startswith("  1 | …")
    assert len(first) < 80
    assert first[caret.index("^")] == "["
    assert checked.syntax.column == 334


def test_tabs_do_not_shift_the_caret() -> None:
    checked = rejected('{\n\t"total"\t1\n}')
    assert checked.syntax is not None
    first, caret = checked.syntax.excerpt.split("\n")
    assert first[caret.index("^")] == "1"
    assert "\t" not in first


def test_nan_is_a_syntax_error_not_a_number() -> None:
    checked = rejected('{"total": NaN}')
    assert checked.errors == ("line 1, column 11: NaN is not valid JSON (use a number or null)",)
    negative = rejected('{"total": -Infinity}')
    assert negative.syntax is not None
    assert negative.syntax.column == 11


def test_schema_errors_are_path_precise_and_capped() -> None:
    lines = [{"sku": "s", "qty": f"{i} units"} for i in range(5)]
    checked = rejected(json.dumps({"total": 1, "lines": lines}), max_errors=2)
    assert checked.kind == "schema"
    assert checked.errors == (
        '$.lines[0].qty: expected integer, got string "0 units"',
        '$.lines[1].qty: expected integer, got string "1 units"',
        "... and 3 more errors",
    )
    assert checked.value == {"total": 1, "lines": lines}


def test_schema_error_value_is_the_coerced_best_parse() -> None:
    checked = rejected('{"total": "12", "lines": [{"sku": "a"}]}')
    assert checked.value == {"total": 12, "lines": [{"sku": "a"}]}
    assert checked.errors == ('$.lines[0]: missing required field "qty"',)
    assert checked.warnings == ('repair: coerced $.total from string "12" to number',)


@pytest.mark.parametrize("text", ["", "   \n\t"])
def test_empty_answer(text: str) -> None:
    checked = rejected(text)
    assert (checked.kind, checked.errors, checked.candidate) == ("empty", (EMPTY_ANSWER,), None)


def test_prose_without_json_is_empty() -> None:
    checked = rejected("I am sorry, I cannot produce that.")
    assert (checked.kind, checked.errors, checked.candidate) == ("empty", (NO_JSON,), None)


def test_absurdly_deep_nesting_is_refused_not_crashed() -> None:
    checked = rejected("[" * 5000 + "]" * 5000, {"type": "array"})
    assert checked.kind == "syntax"
    assert "nested more than 100 levels" in checked.errors[0]


# -- strict mode ----------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ('{"total": 1,}', "Expecting property name enclosed in double quotes"),
        ("{'total': 1}", "Expecting property name enclosed in double quotes"),
        ('{"total": 1, "lines": [], "x": True}', "Expecting value"),
        ("{total: 1}", "Expecting property name enclosed in double quotes"),
        ('{"total": 1 // one\n}', "Expecting ',' delimiter"),
        ("{“total”: 1}", "Expecting property name enclosed in double quotes"),
    ],
)
def test_strict_mode_reports_what_lenient_mode_repairs(text: str, message: str) -> None:
    assert ok(text, {"type": "object"}).warnings != ()
    checked = rejected(text, {"type": "object"}, strict=True)
    assert checked.kind == "syntax"
    assert checked.syntax is not None
    assert checked.syntax.message.startswith(message)
    assert checked.warnings == ()


def test_strict_mode_explains_common_mistakes() -> None:
    messages = {
        text: rejected(text, strict=True).errors[0]
        for text in ('{"total": 1,}', "{'total': 1}", '{"total": True}', '{"total": 1 # n\n}')
    }
    assert messages == {
        '{"total": 1,}': "line 1, column 13: Expecting property name enclosed in double quotes "
        "(remove the trailing comma before '}')",
        "{'total': 1}": "line 1, column 2: Expecting property name enclosed in double quotes "
        "(JSON strings and keys need double quotes)",
        '{"total": True}': "line 1, column 11: Expecting value (write true, not True)",
        '{"total": 1 # n\n}': "line 1, column 13: Expecting ',' delimiter "
        "(JSON does not allow comments)",
    }


def test_strict_mode_does_not_coerce() -> None:
    checked = rejected('{"total": "12"}', strict=True)
    assert checked.errors == ('$.total: expected number, got string "12"',)
    assert checked.value == {"total": "12"}


def test_strict_mode_still_extracts_from_fences() -> None:
    checked = ok('```json\n{"total": 1}\n```', strict=True)
    assert checked.warnings == ("extract: took the JSON object from a ```json code fence",)


# -- round trip -----------------------------------------------------------------------


def schema_for(value: Any) -> dict[str, Any]:
    """The tightest simple schema ``value`` satisfies."""
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
    if value is None:
        return {"type": "null"}
    if isinstance(value, bool):
        return {"type": "boolean"}
    if isinstance(value, int):
        return {"type": "integer"}
    if isinstance(value, float):
        return {"type": "number"}
    return {"type": "string"}


json_values = st.recursive(
    st.none()
    | st.booleans()
    | st.integers()
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(),
    lambda children: (
        st.lists(children, max_size=5) | st.dictionaries(st.text(max_size=10), children, max_size=5)
    ),
    max_leaves=20,
)
containers = json_values.filter(lambda v: isinstance(v, dict | list))
layouts = st.fixed_dictionaries(
    {"indent": st.none() | st.integers(0, 4), "ensure_ascii": st.booleans()}
)


@settings(max_examples=200, deadline=None)
@given(json_values, layouts)
def test_any_json_value_round_trips(value: Any, layout: dict[str, Any]) -> None:
    checked = check_answer(json.dumps(value, **layout), schema_for(value))
    assert checked.ok, checked
    assert checked.value == value
    assert checked.warnings == ()


@settings(max_examples=150, deadline=None)
@given(containers, layouts, st.sampled_from(["prose", "fence", "bare fence", "both"]))
def test_wrapped_json_value_round_trips(value: Any, layout: dict[str, Any], wrap: str) -> None:
    body = json.dumps(value, **layout)
    text = {
        "prose": f"Here is the result:\n{body}\nLet me know if you need more.",
        "fence": f"Sure.\n```json\n{body}\n```",
        "bare fence": f"```\n{body}\n```\nDone.",
        "both": f"Here it is:\n\n```json\n{body}\n```\n\nThe answer above follows the schema.",
    }[wrap]
    checked = check_answer(text, schema_for(value))
    assert checked.ok, checked
    assert checked.value == value
    assert len(checked.warnings) == 1
    assert checked.warnings[0].startswith("extract: ")


def test_answer_cut_off_after_the_opening_brace_is_a_syntax_error() -> None:
    checked = rejected("Sure, here it is:\n{")
    assert checked.kind == "syntax"
    assert checked.candidate == "{"
    assert checked.errors == (
        "line 1, column 2: Expecting property name enclosed in double quotes "
        "(the text ends before the JSON value is complete)",
    )


# -- a value valid as written takes one schema check; the rest goes the full way -----------

# Every coercion the schema can ask for: numbers and flags in strings, a lone object for a
# list, a float with no fraction for an integer, under a union and a reference.
COERCIBLE = {
    "type": "object",
    "properties": {
        "n": {"type": "integer"},
        "x": {"type": "number"},
        "flag": {"type": "boolean"},
        "tags": {"type": "array", "items": {"$ref": "#/$defs/tag"}},
        "either": {"anyOf": [{"type": "integer"}, {"type": "array"}]},
    },
    "additionalProperties": {"type": ["string", "integer"]},
    "$defs": {"tag": {"type": "object", "properties": {"w": {"type": "integer"}}}},
}
scalars = (
    st.none()
    | st.booleans()
    | st.integers(-5, 5)
    | st.sampled_from([0.0, 3.0, -2.0, 1.5, 1e20])
    | st.sampled_from(["3", "2.5", "true", "x", " 4 "])
)
coercible_values = st.dictionaries(
    st.sampled_from(["n", "x", "flag", "tags", "either", "other"]),
    scalars
    | st.lists(st.dictionaries(st.just("w"), scalars, max_size=1), max_size=3)
    | st.dictionaries(st.just("w"), scalars, max_size=1),
    max_size=6,
)


@settings(max_examples=300, deadline=None)
@given(coercible_values, st.booleans())
def test_the_verdict_is_the_full_ways_whatever_the_value(value: Any, strict: bool) -> None:
    from app.core.answer.repair import coerce
    from app.core.schema.validation import cap_errors, compiled

    schema = compiled(COERCIBLE)
    expected: Any = value
    notes: tuple[str, ...] = ()
    if not strict:
        full = coerce(value, schema)
        expected, notes = full.value, full.warnings
    errors, complete = schema.error_lines(expected)
    checked = check_answer(json.dumps(value), COERCIBLE, strict=strict)
    assert checked.ok == (not errors)
    assert checked.value == expected
    assert checked.warnings == notes
    assert checked.errors == tuple(cap_errors(errors, 8, complete=complete))


def test_a_whole_float_where_an_integer_is_wanted_is_still_made_an_integer() -> None:
    # Valid as written (JSON Schema takes 2.0 as an integer): the coercion still applies.
    checked = ok('{"total": 1, "lines": [{"sku": "a", "qty": 2.0}]}')
    assert checked.value == {"total": 1, "lines": [{"sku": "a", "qty": 2}]}
    assert type(checked.value["lines"][0]["qty"]) is int
    assert checked.warnings == ("repair: coerced $.lines[0].qty from number 2.0 to integer",)
    strict = ok('{"total": 1, "lines": [{"sku": "a", "qty": 2.0}]}', strict=True)
    assert type(strict.value["lines"][0]["qty"]) is float


def test_a_deep_or_surrogate_value_is_still_refused_after_the_text_prefilters() -> None:
    deep = "[" * 101 + "]" * 101
    assert rejected(deep, {}).errors == (
        "line 1, column 1: the value is nested more than 100 levels deep",
    )
    assert ok("[" * 50 + "]" * 50, {}).value is not None
    escaped = rejected('{"sku": "a\\ud800"}', {"type": "object"})
    assert escaped.kind == "syntax"
    assert "unpaired UTF-16 surrogate" in escaped.errors[0]
