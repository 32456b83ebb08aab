"""Field-level patches (app.core.answer.patch): which parts fail, the sub-schema, the merge."""

from __future__ import annotations

from typing import Any

import pytest

from app.core.answer.patch import MAX_PATCH_PATHS, merge, plan, pointer
from app.core.answer.validators import read_paths
from app.core.schema.validation import Schema, schema_errors
from app.core.wire.spec import ValidatorSpec

INVOICE: dict[str, Any] = {
    "type": "object",
    "properties": {
        "vendor": {"type": "string"},
        "lines": {
            "type": "array",
            "items": {
                "type": "object",
                "properties": {"sku": {"type": "string"}, "qty": {"type": "integer"}},
                "required": ["sku", "qty"],
                "additionalProperties": False,
            },
        },
        "total": {"type": "number"},
    },
    "required": ["vendor", "lines", "total"],
    "additionalProperties": False,
}


def test_pointer_escapes_slash_and_tilde() -> None:
    assert pointer(("lines", 2, "a/b~c")) == "/lines/2/a~1b~0c"
    assert pointer(()) == ""


def test_failing_paths_point_into_nested_arrays_and_name_missing_fields() -> None:
    value = {
        "vendor": "ACME",
        "lines": [{"sku": "A", "qty": 1}, {"sku": "B"}, {"sku": "C", "qty": "3"}],
    }
    paths = Schema(INVOICE).failing_paths(value)
    assert paths is not None
    assert set(paths) == {("lines", 1, "qty"), ("lines", 2, "qty"), ("total",)}


def test_a_field_it_must_not_have_fails_its_whole_object() -> None:
    value = {"vendor": "ACME", "lines": [{"sku": "A", "qty": 1, "note": "x"}], "total": 1}
    assert Schema(INVOICE).failing_paths(value) == (("lines", 0),)


def test_plan_asks_for_the_failing_parts_under_their_own_subschemas() -> None:
    value = {"vendor": "ACME", "lines": [{"sku": "A", "qty": "3 units"}], "total": 3}
    patch = plan(value, Schema(INVOICE).failing_paths(value), INVOICE, mode="auto")
    assert patch is not None
    assert patch.pointers == ("/lines/0/qty",)
    assert patch.schema == {
        "type": "object",
        "properties": {"/lines/0/qty": {"type": "integer"}},
        "required": ["/lines/0/qty"],
        "additionalProperties": False,
    }


def test_merge_puts_parts_into_a_copy_of_nested_objects_and_arrays() -> None:
    value: dict[str, Any] = {
        "vendor": "ACME",
        "lines": [{"sku": "A", "qty": "3 units"}, {"sku": "B"}],
    }
    patch = plan(
        value, [("lines", 0, "qty"), ("lines", 1, "qty"), ("total",)], INVOICE, mode="patch"
    )
    assert patch is not None
    merged = merge(patch, {"/lines/0/qty": 3, "/lines/1/qty": 1, "/total": 4})
    assert merged.value == {
        "vendor": "ACME",
        "lines": [{"sku": "A", "qty": 3}, {"sku": "B", "qty": 1}],
        "total": 4,
    }
    assert merged.ignored == ()
    assert merged.missing == ()
    assert schema_errors(merged.value, INVOICE) == []
    assert value["lines"][0]["qty"] == "3 units"  # the base is never modified


def test_merge_ignores_parts_that_were_not_asked_for() -> None:
    value = {"vendor": "ACME", "lines": [], "total": "x"}
    patch = plan(value, [("total",)], INVOICE, mode="auto")
    assert patch is not None
    merged = merge(patch, {"/total": 0, "/vendor": "EVIL", "notes": "hi"})
    assert merged.value == {"vendor": "ACME", "lines": [], "total": 0}
    assert merged.ignored == ("/vendor", "notes")


def test_merge_reads_a_whole_answer_at_the_paths_asked_for() -> None:
    value = {"vendor": "ACME", "lines": [{"sku": "A", "qty": "x"}], "total": 1}
    patch = plan(value, [("lines", 0, "qty")], INVOICE, mode="auto")
    assert patch is not None
    merged = merge(patch, {"vendor": "Other", "lines": [{"sku": "Z", "qty": 5}], "total": 9})
    assert merged.value == {"vendor": "ACME", "lines": [{"sku": "A", "qty": 5}], "total": 1}
    assert merged.ignored == ("vendor", "total")


def test_merge_names_parts_the_answer_left_out_and_keeps_them() -> None:
    value = {"vendor": "ACME", "lines": [], "total": "x"}
    patch = plan(value, [("total",), ("vendor",)], INVOICE, mode="patch")
    assert patch is not None
    merged = merge(patch, {"/vendor": "B"})
    assert merged.value["total"] == "x"
    assert merged.value["vendor"] == "B"
    assert merged.missing == ("/total",)


@pytest.mark.parametrize(
    ("value", "paths", "why"),
    [
        ([1, 2], [(0,)], "not an object"),
        ({"vendor": 1, "lines": [], "total": 1}, [()], "a root-level failure"),
        ({"vendor": 1, "lines": [], "total": 1}, None, "no paths"),
        ({"total": "x"}, [("total",)], "every field fails (auto)"),
        ({"vendor": "A", "lines": [], "total": 1}, [("nowhere", "deep")], "no subschema"),
    ],
)
def test_plan_asks_for_the_whole_answer_when(value: Any, paths: Any, why: str) -> None:
    assert plan(value, paths, INVOICE, mode="auto") is None, why


def test_mode_whole_never_patches_and_patch_patches_even_every_field() -> None:
    value = {"total": "x"}
    assert plan(value, [("total",)], INVOICE, mode="whole") is None
    assert plan(value, [("total",)], INVOICE, mode="patch") is not None


def test_too_many_parts_is_a_whole_re_ask() -> None:
    schema = {"type": "object", "additionalProperties": {"type": "integer"}}
    value = {f"k{i}": "x" for i in range(MAX_PATCH_PATHS + 2)}
    paths = [(k,) for k in list(value)[: MAX_PATCH_PATHS + 1]]
    assert plan(value, paths, schema, mode="auto") is None


def test_inner_paths_fold_into_the_outer_one() -> None:
    value = {"vendor": "A", "lines": [{"sku": 1, "qty": "x"}], "total": 1}
    patch = plan(
        value, [("lines", 0, "qty"), ("lines", 0), ("lines", 0, "sku")], INVOICE, mode="auto"
    )
    assert patch is not None
    assert patch.pointers == ("/lines/0",)


def test_refs_into_defs_travel_with_the_subschema() -> None:
    schema = {
        "type": "object",
        "properties": {"a": {"$ref": "#/$defs/Qty"}, "b": {"type": "string"}},
        "required": ["a", "b"],
        "$defs": {"Qty": {"type": "integer", "minimum": 1}},
    }
    patch = plan({"a": 0, "b": "ok"}, [("a",)], schema, mode="auto")
    assert patch is not None
    assert patch.schema["properties"]["/a"] == {"$ref": "#/$defs/Qty"}
    assert patch.schema["$defs"] == {"Qty": {"type": "integer", "minimum": 1}}
    assert schema_errors({"/a": 2}, patch.schema) == []
    assert schema_errors({"/a": 0}, patch.schema) != []


def test_a_union_on_the_way_is_a_whole_re_ask() -> None:
    schema = {
        "type": "object",
        "properties": {
            "x": {"anyOf": [{"type": "object", "properties": {"y": {"type": "integer"}}}]}
        },
        "required": ["x"],
    }
    assert plan({"x": {"y": "no"}, "z": 1}, [("x", "y")], schema, mode="auto") is None


def test_a_sum_validator_names_the_numbers_it_added_and_the_total() -> None:
    spec = ValidatorSpec(kind="sum", items="$.lines[*].amount", equals="$.total")
    value = {"lines": [{"amount": 1}, {"amount": 2}], "total": 4, "vendor": "A"}
    assert read_paths(spec, value) == (("lines", 0, "amount"), ("lines", 1, "amount"), ("total",))


def test_a_missing_field_a_validator_reads_is_named_and_a_webhook_reads_none() -> None:
    spec = ValidatorSpec(kind="nonempty", path="$.notes")
    assert read_paths(spec, {"a": 1}) == (("notes",),)
    webhook = ValidatorSpec(kind="webhook", url="https://example.com/check")
    assert read_paths(webhook, {"a": 1}) is None
