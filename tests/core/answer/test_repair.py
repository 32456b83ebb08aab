"""Syntax repairs (one per kind, with its warning) and schema-guided coercions."""

from __future__ import annotations

import json
from typing import Any

import pytest

from app.core.answer.repair import coerce, line_column, repair_syntax
from app.core.schema.validation import Schema


def repaired(text: str) -> tuple[Any, tuple[str, ...]]:
    result = repair_syntax(text)
    return json.loads(result.text), result.warnings


# -- syntax repairs -------------------------------------------------------------------


def test_trailing_comma_is_removed_with_its_position() -> None:
    value, warnings = repaired('{\n  "a": 1,\n  "b": [1, 2,],\n}')
    assert value == {"a": 1, "b": [1, 2]}
    assert warnings == ("repair: removed 2 trailing commas (first at line 3, col 13)",)


def test_single_trailing_comma_warning_names_line_and_column() -> None:
    value, warnings = repaired('{"total": 12,}')
    assert value == {"total": 12}
    assert warnings == ("repair: removed trailing comma (line 1, col 13)",)


def test_single_quoted_strings_become_double_quoted_keeping_their_content() -> None:
    value, warnings = repaired("""{'name': 'it\\'s "fine"'}""")
    assert value == {"name": 'it\'s "fine"'}
    assert warnings == (
        "repair: changed 2 single-quoted strings to double quotes (first at line 1, col 2)",
    )


def test_python_literals_become_json_literals() -> None:
    value, warnings = repaired('{"a": True, "b": False, "c": None}')
    assert value == {"a": True, "b": False, "c": None}
    assert warnings == (
        "repair: replaced 3 Python literals (True/False/None) with JSON true/false/null "
        "(first at line 1, col 7)",
    )


def test_unquoted_object_keys_are_quoted() -> None:
    value, warnings = repaired('{name: "Ada", $id: 1, _x: 2}')
    assert value == {"name": "Ada", "$id": 1, "_x": 2}
    assert warnings == ("repair: quoted 3 unquoted object keys (first at line 1, col 2)",)


def test_comments_are_removed_outside_strings_only() -> None:
    text = '{\n  "url": "http://x.org/#top", // the link\n  # a note\n  "n": /* inline */ 1\n}'
    value, warnings = repaired(text)
    assert value == {"url": "http://x.org/#top", "n": 1}
    assert warnings == ("repair: removed 3 comments (first at line 2, col 31)",)


def test_curly_quotes_around_keys_and_strings_become_straight() -> None:
    value, warnings = repaired("{“name”: “Ada”}")
    assert value == {"name": "Ada"}
    assert warnings == (
        "repair: replaced curly quotes “…” with straight double quotes 2 times "
        "(first at line 1, col 2)",
    )


def test_curly_quotes_inside_a_proper_string_are_content() -> None:
    text = '{"quote": "she said “hi”"}'
    assert repair_syntax(text).text == text


def test_raw_line_break_inside_a_string_is_escaped() -> None:
    value, warnings = repaired('{"note": "line one\nline two"}')
    assert value == {"note": "line one\nline two"}
    assert warnings == (
        "repair: escaped a raw control character (such as a line break) inside a string "
        "(line 1, col 11)",
    )


def test_invalid_escapes_keep_the_backslash_or_drop_a_needless_one() -> None:
    value, warnings = repaired('{"re": "\\d+", "s": "it\\\'s"}')
    assert value == {"re": "\\d+", "s": "it's"}
    assert warnings == (
        "repair: fixed 2 invalid backslash escapes inside strings (first at line 1, col 9)",
    )


def test_several_repairs_each_get_one_warning() -> None:
    value, warnings = repaired("{name: 'Ada', tags: ['x',], ok: True,}")
    assert value == {"name": "Ada", "tags": ["x"], "ok": True}
    assert warnings == (
        "repair: quoted 3 unquoted object keys (first at line 1, col 2)",
        "repair: changed 2 single-quoted strings to double quotes (first at line 1, col 8)",
        "repair: removed 2 trailing commas (first at line 1, col 25)",
        "repair: replaced a Python literal (True/False/None) with JSON true/false/null "
        "(line 1, col 33)",
    )


def test_strings_that_look_like_repairs_are_left_alone() -> None:
    text = """{"a": "True, // not a comment, 'quoted', key: x,]"}"""
    result = repair_syntax(text)
    assert result.text == text
    assert result.warnings == ()


@pytest.mark.parametrize(
    ("text", "repaired", "count"),
    [
        ('{\n  "a": 1\n  "b": [2, 3]\n}', '{\n  "a": 1\n  ,"b": [2, 3]\n}', 1),
        ('["x" "y" {"z": null} [true]]', '["x" ,"y" ,{"z": null} ,[true]]', 3),
        ('{"a": {"b": "c"} "d": 1.5 "e": false}', '{"a": {"b": "c"} ,"d": 1.5 ,"e": false}', 2),
        ("{a: 1 b: 2}", '{"a": 1 ,"b": 2}', 1),
    ],
)
def test_a_missing_comma_between_two_values_is_added(text: str, repaired: str, count: int) -> None:
    result = repair_syntax(text)
    assert result.text == repaired
    json.loads(result.text)
    warning = next(w for w in result.warnings if "comma" in w)
    assert ("a missing comma" if count == 1 else f"{count} missing commas") in warning


@pytest.mark.parametrize(
    "text",
    [
        '{"a": [1, 2',  # truncated: the missing brackets are unknown data
        '{"a": "unterminated',
        "[1 234]",  # two numbers: maybe one with a thousands separator
        '{"a" 1}',  # a missing colon
        '{"a": 1} {"b": 2}',  # two top-level values: the extractor's business, not a comma
        "[1,,2]",  # a missing value
        '{"a": 1,,}',
        "[,]",
    ],
)
def test_ambiguous_breakage_is_not_repaired(text: str) -> None:
    result = repair_syntax(text)
    with pytest.raises(json.JSONDecodeError):
        json.loads(result.text)
    assert "trailing comma" not in " ".join(result.warnings)


def test_original_position_maps_repaired_text_back_to_the_model_text() -> None:
    text = "{'a': 1, // c\n 'b': 2 'c': 3}"
    result = repair_syntax(text)
    with pytest.raises(json.JSONDecodeError) as caught:
        json.loads(result.text)
    original = result.original_position(caught.value.pos)
    assert text[original : original + 2] == "'c"
    assert result.original_position(len(result.text)) == len(text)


def test_line_column_is_one_based() -> None:
    assert line_column("ab\ncd", 0) == (1, 1)
    assert line_column("ab\ncd", 4) == (2, 2)
    assert line_column("ab\ncd", 5) == (2, 3)


# -- coercions ------------------------------------------------------------------------


def coerced(value: Any, schema: dict[str, Any]) -> tuple[Any, tuple[str, ...]]:
    result = coerce(value, Schema(schema))
    return result.value, result.warnings


def props(**properties: Any) -> dict[str, Any]:
    return {"type": "object", "properties": properties}


def test_numeric_string_becomes_a_number() -> None:
    value, warnings = coerced({"total": "3.50"}, props(total={"type": "number"}))
    assert value == {"total": 3.5}
    assert warnings == ('repair: coerced $.total from string "3.50" to number',)


def test_integer_string_becomes_an_integer() -> None:
    value, warnings = coerced({"qty": " 42 "}, props(qty={"type": "integer"}))
    assert value == {"qty": 42}
    assert type(value["qty"]) is int
    assert warnings == ('repair: coerced $.qty from string " 42 " to integer',)


def test_integer_string_where_number_wanted_stays_an_int() -> None:
    value, _ = coerced("42", {"type": "number"})
    assert value == 42
    assert type(value) is int


@pytest.mark.parametrize("text", ["3 units", "3.5", "1,000", "$12", "", "1e400", "NaN"])
def test_non_numeric_or_lossy_strings_are_left_for_the_validator(text: str) -> None:
    value, warnings = coerced({"qty": text}, props(qty={"type": "integer"}))
    assert value == {"qty": text}
    assert warnings == ()


def test_boolean_string_becomes_a_boolean() -> None:
    value, warnings = coerced(
        [{"ok": "false"}, {"ok": "TRUE"}],
        {
            "type": "array",
            "items": props(ok={"type": "boolean"}),
        },
    )
    assert value == [{"ok": False}, {"ok": True}]
    assert warnings == (
        'repair: coerced $[0].ok from string "false" to boolean',
        'repair: coerced $[1].ok from string "TRUE" to boolean',
    )


def test_integral_float_becomes_an_integer() -> None:
    value, warnings = coerced({"qty": 3.0}, props(qty={"type": "integer"}))
    assert value == {"qty": 3}
    assert type(value["qty"]) is int
    assert warnings == ("repair: coerced $.qty from number 3.0 to integer",)


def test_non_integral_float_is_not_rounded() -> None:
    assert coerced({"qty": 3.5}, props(qty={"type": "integer"})) == ({"qty": 3.5}, ())


def test_lone_object_is_wrapped_where_an_array_is_wanted() -> None:
    schema = props(lines={"type": "array", "items": props(qty={"type": "integer"})})
    value, warnings = coerced({"lines": {"qty": "2"}}, schema)
    assert value == {"lines": [{"qty": 2}]}
    assert warnings == (
        "repair: wrapped the object at $.lines in a list",
        'repair: coerced $.lines[0].qty from string "2" to integer',
    )


def test_one_element_list_is_not_unwrapped_where_an_object_is_wanted() -> None:
    assert coerced({"a": [{"x": 1}]}, props(a={"type": "object"})) == ({"a": [{"x": 1}]}, ())


def test_strings_are_never_coerced_when_a_string_is_allowed() -> None:
    schema = props(zip={"type": ["string", "integer"]}, flag={"type": ["string", "boolean"]})
    assert coerced({"zip": "01234", "flag": "true"}, schema) == (
        {"zip": "01234", "flag": "true"},
        (),
    )


def test_nullable_type_list_still_coerces() -> None:
    value, _ = coerced({"n": "7"}, props(n={"type": ["integer", "null"]}))
    assert value == {"n": 7}


def test_coercion_follows_refs_and_prefix_items() -> None:
    schema = {
        "$defs": {
            "pair": {"type": "array", "prefixItems": [{"type": "string"}, {"type": "integer"}]}
        },
        "type": "object",
        "additionalProperties": {"$ref": "#/$defs/pair"},
    }
    value, _ = coerced({"a": ["x", "1"], "b": ["2", 3.0]}, schema)
    assert value == {"a": ["x", 1], "b": ["2", 3]}


def test_coercion_follows_pattern_properties_and_all_of() -> None:
    schema = {
        "allOf": [
            {"patternProperties": {"^n_": {"type": "number"}}},
            {"properties": {"flag": {"type": "boolean"}}},
        ]
    }
    value, _ = coerced({"n_a": "1.5", "flag": "false", "other": "2"}, schema)
    assert value == {"n_a": 1.5, "flag": False, "other": "2"}


def test_any_of_coerces_only_when_exactly_one_branch_accepts() -> None:
    one = {"anyOf": [{"type": "integer"}, {"type": "null"}]}
    assert coerced("5", one) == (5, ('repair: coerced $ from string "5" to integer',))
    two = {"anyOf": [{"type": "integer"}, {"type": "number", "minimum": 0}]}
    assert coerced("5", two) == ("5", ())


def test_any_of_leaves_a_value_that_already_matches_a_branch() -> None:
    schema = {"anyOf": [{"type": "string"}, {"type": "integer"}]}
    assert coerced("5", schema) == ("5", ())


def test_any_of_coerces_inside_the_one_matching_object_branch() -> None:
    schema = {
        "oneOf": [
            {
                "type": "object",
                "properties": {"kind": {"const": "a"}, "n": {"type": "integer"}},
                "required": ["kind"],
            },
            {
                "type": "object",
                "properties": {"kind": {"const": "b"}, "s": {"type": "string"}},
                "required": ["kind"],
            },
        ]
    }
    value, warnings = coerced({"kind": "a", "n": "4"}, schema)
    assert value == {"kind": "a", "n": 4}
    assert warnings == ('repair: coerced $.n from string "4" to integer',)


def test_many_coercions_are_summarised() -> None:
    schema = {"type": "array", "items": {"type": "integer"}}
    value, warnings = coerced([str(i) for i in range(20)], schema)
    assert value == list(range(20))
    assert len(warnings) == 9
    assert warnings[-1] == "repair: ... and 12 more coercions"
