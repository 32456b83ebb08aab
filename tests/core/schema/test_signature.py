"""The signature language: what each form compiles to, how it fails, and a round-trip property."""

from __future__ import annotations

import dataclasses
import json
import re
from dataclasses import dataclass
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from jsonschema import Draft202012Validator

from app.core.schema.signature import (
    EXPECTED_ENUM_VALUE,
    EXPECTED_NAME,
    EXPECTED_TYPE,
    MAX_DEPTH,
    SCHEMA_DIALECT,
    Signature,
    compile_signature,
)
from app.core.wire.errors import InvalidInput, SignatureError


def output(source: str) -> dict[str, Any]:
    """The output schema without the ``$schema`` header, for compact assertions."""
    schema = compile_signature(source).output_schema
    assert schema.pop("$schema") == SCHEMA_DIALECT
    return schema


def obj(properties: dict[str, Any], required: list[str]) -> dict[str, Any]:
    return {
        "type": "object",
        "properties": properties,
        "required": required,
        "additionalProperties": False,
    }


def valid(schema: dict[str, Any], instance: Any) -> bool:
    return Draft202012Validator(schema).is_valid(instance)


def fail(source: str) -> SignatureError:
    with pytest.raises(SignatureError) as caught:
        compile_signature(source)
    return caught.value


# -- what compiles to what ----------------------------------------------------


@pytest.mark.parametrize(
    ("type_", "schema"),
    [
        (":string", {"type": "string"}),
        (":int", {"type": "integer"}),
        (":float", {"type": "number"}),
        (":bool", {"type": "boolean"}),
        (":any", {}),
        (":map", {"type": "object"}),
    ],
)
def test_each_primitive_compiles_to_its_json_schema_type(
    type_: str, schema: dict[str, Any]
) -> None:
    assert output(f"-> {type_}") == schema
    assert output(f"{{x {type_}}}") == obj({"x": schema}, ["x"])


def test_output_is_a_full_2020_12_document() -> None:
    schema = compile_signature("() -> {x :int}").output_schema
    assert next(iter(schema)) == "$schema"
    assert schema["$schema"] == "https://json-schema.org/draft/2020-12/schema"
    Draft202012Validator.check_schema(schema)


@pytest.mark.parametrize("source", ["{x :int}", "-> {x :int}", "() -> {x :int}", "(  )->{x :int}"])
def test_input_part_is_optional_and_empty_input_is_none(source: str) -> None:
    sig = compile_signature(source)
    assert sig.input_schema is None
    assert sig.source == source
    assert output(source) == obj({"x": {"type": "integer"}}, ["x"])


def test_input_parameters_compile_to_an_object_schema() -> None:
    sig = compile_signature('(text :string, n :int? "how many", mode :enum[a|b]) -> :bool')
    assert sig.input_schema == {
        "$schema": SCHEMA_DIALECT,
        **obj(
            {
                "text": {"type": "string"},
                "n": {"type": ["integer", "null"], "description": "how many"},
                "mode": {"type": "string", "enum": ["a", "b"]},
            },
            ["text", "mode"],
        ),
    }
    assert valid(sig.input_schema, {"text": "t", "mode": "a"})
    assert not valid(sig.input_schema, {"text": "t", "mode": "a", "extra": 1})


def test_the_full_example_compiles_and_validates() -> None:
    sig = compile_signature(
        "(text :string, n :int) -> {vendor :string, total :float, "
        "lines [{sku :string, qty :int}], note :string?}"
    )
    schema = sig.output_schema
    assert schema["required"] == ["vendor", "total", "lines"]
    assert schema["properties"]["lines"] == {
        "type": "array",
        "items": obj({"sku": {"type": "string"}, "qty": {"type": "integer"}}, ["sku", "qty"]),
    }
    good = {"vendor": "ACME", "total": 9.5, "lines": [{"sku": "a", "qty": 2}]}
    assert valid(schema, good)
    assert valid(schema, {**good, "note": None})
    assert not valid(schema, {**good, "lines": [{"sku": "a", "qty": 2.5}]})


@pytest.mark.parametrize(
    ("source", "schema"),
    [
        ("-> [:string]", {"type": "array", "items": {"type": "string"}}),
        ("-> :int", {"type": "integer"}),
        ("[[:string]]", {"type": "array", "items": {"type": "array", "items": {"type": "string"}}}),
        ("[{a :int}]", {"type": "array", "items": obj({"a": {"type": "integer"}}, ["a"])}),
        (
            "{a {b {c :bool}}}",
            obj({"a": obj({"b": obj({"c": {"type": "boolean"}}, ["c"])}, ["b"])}, ["a"]),
        ),
        ("[:int?]", {"type": "array", "items": {"type": ["integer", "null"]}}),
    ],
)
def test_lists_and_objects_nest(source: str, schema: dict[str, Any]) -> None:
    assert output(source) == schema


@pytest.mark.parametrize(
    "source",
    [
        "{a :int, b :string}",
        "{a :int b :string}",
        "{a :int,b :string,}",
        "{\n  a :int\n  b :string\n}",
        "{a:int b:string}",
        "{\ta :int,\n\tb :string\t}",
    ],
)
def test_fields_are_separated_by_commas_or_whitespace(source: str) -> None:
    assert output(source) == obj({"a": {"type": "integer"}, "b": {"type": "string"}}, ["a", "b"])


def test_field_names_may_be_identifiers_or_quoted_strings() -> None:
    schema = output('{snake_case :int, kebab-case :int, _x1 :int, "two words" :int, "é\\"q" :int}')
    assert list(schema["properties"]) == ["snake_case", "kebab-case", "_x1", "two words", 'é"q']


def test_optional_primitive_is_nullable_and_not_required() -> None:
    schema = output("{a :string?, b :int?, c :map?, d :any?}")
    assert schema == obj(
        {
            "a": {"type": ["string", "null"]},
            "b": {"type": ["integer", "null"]},
            "c": {"type": ["object", "null"]},
            "d": {},
        },
        [],
    )
    assert valid(schema, {})
    assert valid(schema, {"a": None, "b": None, "c": None, "d": None})
    assert not valid(schema, {"b": "1"})


def test_optional_composite_is_any_of_the_type_or_null() -> None:
    schema = output("{tags [:string]?, who {name :string}?}")
    assert schema["properties"] == {
        "tags": {"anyOf": [{"type": "array", "items": {"type": "string"}}, {"type": "null"}]},
        "who": {"anyOf": [obj({"name": {"type": "string"}}, ["name"]), {"type": "null"}]},
    }
    assert schema["required"] == []
    assert valid(schema, {"tags": None, "who": None})
    assert valid(schema, {"who": {"name": "x"}})
    assert not valid(schema, {"who": {}})


def test_top_level_optional_output_admits_null() -> None:
    assert output("-> :int?") == {"type": ["integer", "null"]}


def test_enum_compiles_to_string_enum() -> None:
    assert output(":enum[low|mid|high]") == {"type": "string", "enum": ["low", "mid", "high"]}
    assert output(':enum["in progress" | done | v1.2 | 42]') == {
        "type": "string",
        "enum": ["in progress", "done", "v1.2", "42"],
    }


def test_optional_enum_adds_null_to_type_and_values() -> None:
    schema = output("{s :enum[a|b]?}")
    assert schema["properties"]["s"] == {"type": ["string", "null"], "enum": ["a", "b", None]}
    assert valid(schema, {"s": None})
    assert not valid(schema, {"s": "c"})


def test_descriptions_follow_the_type() -> None:
    schema = output(
        '{total :float "grand total incl. tax", note :string? "free text", '
        'tags [:string]? "labels", s :enum[a] "state"}'
    )
    assert schema["properties"] == {
        "total": {"type": "number", "description": "grand total incl. tax"},
        "note": {"type": ["string", "null"], "description": "free text"},
        "tags": {
            "anyOf": [{"type": "array", "items": {"type": "string"}}, {"type": "null"}],
            "description": "labels",
        },
        "s": {"type": "string", "enum": ["a"], "description": "state"},
    }


def test_a_string_followed_by_a_type_is_the_next_quoted_field_name() -> None:
    assert list(output('{a :int "b" :int}')["properties"]) == ["a", "b"]
    schema = output('{a :int "about a" "b" [:int] "about b"}')
    assert schema["properties"]["a"]["description"] == "about a"
    assert schema["properties"]["b"]["description"] == "about b"


def test_descriptions_understand_json_escapes() -> None:
    schema = output('{a :int "say \\"hi\\"\\n\\u00e9"}')
    assert schema["properties"]["a"]["description"] == 'say "hi"\né'


def test_signature_is_frozen() -> None:
    sig = compile_signature(":int")
    assert isinstance(sig, Signature)
    with pytest.raises(dataclasses.FrozenInstanceError):
        sig.source = "x"  # type: ignore[misc]


def test_nesting_up_to_the_limit_compiles() -> None:
    source = "[" * MAX_DEPTH + ":int" + "]" * MAX_DEPTH
    Draft202012Validator.check_schema(compile_signature(source).output_schema)


# -- how it fails -------------------------------------------------------------


def test_error_detail_names_position_line_column_and_shows_a_caret() -> None:
    error = fail("() -> {x :int, y }")
    assert error.detail == (
        "signature: at position 17 (line 1, col 18): expected a type (:string, :int, :float, "
        ":bool, :any, :map, :enum[...], [T] or {...}), got '}'\n"
        "  () -> {x :int, y }\n"
        "                   ^"
    )
    assert error.position == 17
    assert error.expected == EXPECTED_TYPE
    assert error.source == "() -> {x :int, y }"


def test_signature_error_is_invalid_input_on_the_signature_field() -> None:
    error = fail("{")
    assert isinstance(error, InvalidInput)
    assert error.field == "signature"
    assert error.status == 422
    assert not error.retryable
    assert str(error) == error.detail


@pytest.mark.parametrize(
    ("source", "position", "expected", "in_detail"),
    [
        pytest.param("", 0, "a signature such as", "got an empty signature", id="empty"),
        pytest.param("  \n ", 0, "a signature such as", "got an empty signature", id="blank"),
        pytest.param("{x :strng}", 3, EXPECTED_TYPE, "did you mean ':string'?", id="typo"),
        pytest.param("{x :flaot}", 3, EXPECTED_TYPE, "did you mean ':float'?", id="typo-float"),
        pytest.param("{x :integer}", 3, EXPECTED_TYPE, "did you mean ':int'?", id="alias-int"),
        pytest.param("{x :list}", 3, EXPECTED_TYPE, "lists are written [T]", id="alias-list"),
        pytest.param("{x :zzz}", 3, EXPECTED_TYPE, "got ':zzz'\n", id="unknown"),
        pytest.param("{x int}", 3, EXPECTED_TYPE, "did you mean ':int'?", id="no-colon"),
        pytest.param("{x: int}", 2, EXPECTED_TYPE, "right after ':'", id="colon-space"),
        pytest.param("{x? :int}", 2, EXPECTED_TYPE, "'?' goes after the type", id="early-?"),
        pytest.param(
            "{x :int",
            7,
            "',' or '}'",
            "'{' at position 0 (line 1, col 1) is never closed",
            id="unclosed-object",
        ),
        pytest.param("{x :int,", 8, EXPECTED_NAME, "'{' at position 0", id="unclosed-after-comma"),
        pytest.param("[:int", 5, "']' to close the list", "'[' at position 0", id="unclosed-list"),
        pytest.param("(a :int", 7, "',' or ')'", "'(' at position 0", id="unclosed-input"),
        pytest.param(":enum[a|b", 9, "'|' or ']'", "'[' at position 5", id="unclosed-enum"),
        pytest.param("{a {b :int}", 11, "',' or '}'", "'{' at position 0", id="unclosed-outer"),
        pytest.param(
            '{"ab :int}',
            1,
            "a closing '\"' for this string",
            "got end of signature",
            id="unclosed-string",
        ),
        pytest.param(
            '{a :int\n "b',
            9,
            "a closing '\"' for this string",
            "(line 2, col 2)",
            id="unclosed-string-line-2",
        ),
        pytest.param(
            "{x :int, x :bool}",
            9,
            "a field name not already used",
            '"x" again (first at position 1)',
            id="duplicate",
        ),
        pytest.param(
            '(a :int, "a" :int) -> :int',
            9,
            "a field name not already used",
            '"a" again',
            id="duplicate-input",
        ),
        pytest.param(
            ":enum[]", 6, EXPECTED_ENUM_VALUE, "an enum needs at least one value", id="empty-enum"
        ),
        pytest.param(
            ":enum", 5, "'[' after :enum", "got end of signature", id="enum-without-values"
        ),
        pytest.param(":enum[a,b]", 7, "'|' or ']'", "separated by '|'", id="enum-commas"),
        pytest.param(
            ":enum[a|a]", 8, "a value not already in this enum", '"a" again', id="enum-duplicate"
        ),
        pytest.param(":enum[a|]", 8, EXPECTED_ENUM_VALUE, "got ']'", id="enum-trailing-bar"),
        pytest.param("{x :int} foo", 9, "end of signature", "got 'foo'", id="trailing-junk"),
        pytest.param(":int ]", 5, "end of signature", "got ']'", id="trailing-bracket"),
        pytest.param(
            "(a :int) {x :int}",
            9,
            "'->' between the inputs and the output type",
            "got '{'",
            id="missing-arrow",
        ),
        pytest.param(
            "(a :int)",
            8,
            "'->' between the inputs and the output type",
            "got end of signature",
            id="missing-output",
        ),
        pytest.param(
            "{a :int} -> {x :int}",
            9,
            "end of signature",
            "inputs go in parentheses",
            id="braced-input",
        ),
        pytest.param("() ->", 5, EXPECTED_TYPE, "got end of signature", id="arrow-without-output"),
        pytest.param("{}", 1, EXPECTED_NAME, "use :map for any object", id="empty-object"),
        pytest.param("[]", 1, EXPECTED_TYPE, "got ']'", id="empty-list"),
        pytest.param(
            "[:int, :string]",
            5,
            "']' to close the list",
            "a list has one item type",
            id="list-two-types",
        ),
        pytest.param("{1x :int}", 1, EXPECTED_NAME, "got '1x'", id="bad-identifier"),
        pytest.param("{x :int,, y :int}", 8, EXPECTED_NAME, "got ','", id="double-comma"),
        pytest.param(
            '{x :int "\\q"}', 8, 'a valid "quoted string"', "got '\"\\q\"'", id="bad-escape"
        ),
        pytest.param("{x :int @}", 8, "',' or '}'", "got '@'", id="junk-character"),
        pytest.param("-> :int??", 8, "end of signature", "got '?'", id="double-?"),
    ],
)
def test_errors_report_position_and_what_was_expected(
    source: str, position: int, expected: str, in_detail: str
) -> None:
    error = fail(source)
    assert error.position == position
    assert error.expected.startswith(expected)
    assert in_detail in error.detail
    assert error.detail.startswith(f"signature: at position {position} (line ")
    assert error.source == source


def test_nesting_past_the_limit_is_an_error_not_a_crash() -> None:
    error = fail("[" * (MAX_DEPTH + 1) + ":int" + "]" * (MAX_DEPTH + 1))
    assert error.position == MAX_DEPTH
    assert error.expected == f"a type nested at most {MAX_DEPTH} levels deep"
    deep = fail("[" * 10_000)
    assert deep.position == MAX_DEPTH


def test_error_on_a_later_line_shows_that_line() -> None:
    error = fail("{\n  a :int\n  b :strin\n}")
    assert error.position == 15
    assert "(line 3, col 5)" in error.detail
    assert error.detail.endswith("\n    b :strin\n      ^")


def test_end_of_input_points_after_the_last_character_not_at_trailing_whitespace() -> None:
    error = fail("{a :int\n\n  ")
    assert error.position == 7
    assert error.detail.endswith("\n  {a :int\n         ^")


def test_long_lines_are_windowed_with_the_caret_still_under_the_error() -> None:
    source = "{" + ", ".join(f"field{i} :int" for i in range(30)) + ", oops :strng}"
    error = fail(source)
    excerpt_line, caret_line = error.detail.splitlines()[1:]
    assert len(excerpt_line) < 90
    assert excerpt_line.startswith("  …")
    assert excerpt_line[caret_line.index("^") :].startswith(":strng")


# -- the round-trip property --------------------------------------------------
#
# Random type trees are rendered to signature text in varied layouts, compiled,
# and checked against instances generated from the same tree.

PRIMITIVES = ("string", "int", "float", "bool", "any", "map")
IDENT = re.compile(r"[A-Za-z_][A-Za-z0-9_-]*")
BARE_ENUM = re.compile(r"[A-Za-z0-9_]+")


@dataclass(frozen=True)
class Prim:
    name: str


@dataclass(frozen=True)
class Enum:
    values: tuple[str, ...]


@dataclass(frozen=True)
class ListOf:
    item: Tree
    nullable: bool


@dataclass(frozen=True)
class Field:
    name: str
    type: Tree
    optional: bool
    description: str | None


@dataclass(frozen=True)
class Obj:
    fields: tuple[Field, ...]
    separator: str
    trailing_comma: bool


Tree = Prim | Enum | ListOf | Obj


def render(tree: Tree) -> str:
    match tree:
        case Prim(name):
            return f":{name}"
        case Enum(values):
            return (
                ":enum["
                + "|".join(v if BARE_ENUM.fullmatch(v) else json.dumps(v) for v in values)
                + "]"
            )
        case ListOf(item, nullable):
            return f"[{render(item)}{'?' if nullable else ''}]"
        case Obj(fields, separator, trailing_comma):
            return (
                "{"
                + separator.join(map(render_field, fields))
                + ("," if trailing_comma else "")
                + "}"
            )
    raise AssertionError(tree)


def render_field(field: Field) -> str:
    name = field.name if IDENT.fullmatch(field.name) else json.dumps(field.name)
    text = f"{name} {render(field.type)}{'?' if field.optional else ''}"
    return text if field.description is None else f"{text} {json.dumps(field.description)}"


json_leaves = st.none() | st.booleans() | st.integers() | st.text(max_size=4)


def instances(tree: Tree) -> st.SearchStrategy[Any]:
    """Values that conform to ``tree``."""
    match tree:
        case Prim("string"):
            return st.text(max_size=5)
        case Prim("int"):
            return st.integers()
        case Prim("float"):
            return st.floats(allow_nan=False, allow_infinity=False) | st.integers()
        case Prim("bool"):
            return st.booleans()
        case Prim("any"):
            return json_leaves | st.lists(json_leaves, max_size=2)
        case Prim("map"):
            return st.dictionaries(st.text(max_size=3), json_leaves, max_size=2)
        case Enum(values):
            return st.sampled_from(values)
        case ListOf(item, nullable):
            items = instances(item) | st.none() if nullable else instances(item)
            return st.lists(items, max_size=3)
        case Obj(fields):
            return st.fixed_dictionaries(
                {f.name: instances(f.type) for f in fields if not f.optional},
                optional={f.name: instances(f.type) | st.none() for f in fields if f.optional},
            )
    raise AssertionError(tree)


names = st.from_regex(r"[A-Za-z_][A-Za-z0-9_-]{0,6}", fullmatch=True) | st.text(max_size=6)
descriptions = st.none() | st.text(max_size=8)
enums = st.builds(
    Enum,
    st.lists(
        st.from_regex(r"[A-Za-z0-9_]{1,5}", fullmatch=True) | st.text(max_size=5),
        min_size=1,
        max_size=4,
        unique=True,
    ).map(tuple),
)
separators = st.sampled_from([", ", " ", ",", ",\n  ", "\n", " ,\t"])


def objects(children: st.SearchStrategy[Tree]) -> st.SearchStrategy[Obj]:
    fields = st.lists(
        st.builds(Field, names, children, st.booleans(), descriptions),
        min_size=1,
        max_size=4,
        unique_by=lambda f: f.name,
    ).map(tuple)
    return st.builds(Obj, fields, separators, st.booleans())


trees: st.SearchStrategy[Tree] = st.recursive(
    st.builds(Prim, st.sampled_from(PRIMITIVES)) | enums,
    lambda children: st.builds(ListOf, children, st.booleans()) | objects(children),
    max_leaves=12,
)
roots_with_a_required_field = objects(trees).filter(lambda o: any(not f.optional for f in o.fields))


@settings(deadline=None, max_examples=200)
@given(data=st.data(), tree=trees)
def test_any_type_tree_compiles_to_a_schema_its_instances_satisfy(
    data: st.DataObject, tree: Tree
) -> None:
    schema = compile_signature(f"-> {render(tree)}").output_schema
    Draft202012Validator.check_schema(schema)
    instance = data.draw(instances(tree), label="instance")
    assert valid(schema, instance)


@settings(deadline=None, max_examples=200)
@given(data=st.data(), root=roots_with_a_required_field)
def test_dropping_a_required_field_or_adding_an_unknown_one_fails_validation(
    data: st.DataObject, root: Obj
) -> None:
    schema = compile_signature(render(root)).output_schema
    instance = data.draw(instances(root), label="instance")
    assert valid(schema, instance)
    required = [f.name for f in root.fields if not f.optional]
    missing = data.draw(st.sampled_from(required), label="dropped")
    assert not valid(schema, {k: v for k, v in instance.items() if k != missing})
    unknown = "".join(f.name for f in root.fields) + "!"
    assert not valid(schema, {**instance, unknown: 1})


@settings(deadline=None, max_examples=100)
@given(data=st.data(), root=objects(trees))
def test_input_parameters_compile_like_an_object_of_the_same_fields(
    data: st.DataObject, root: Obj
) -> None:
    params = root.separator.join(map(render_field, root.fields))
    sig = compile_signature(f"({params}) -> :any")
    assert sig.input_schema == compile_signature(render(root)).output_schema
    assert valid(sig.input_schema, data.draw(instances(root), label="input"))


grammar_text = st.text(alphabet='(){}[]:,|?"-> \n\\abeintmgrsu1', max_size=30)


@settings(deadline=None, max_examples=300)
@given(source=grammar_text | st.text(max_size=30))
def test_arbitrary_text_compiles_or_raises_a_signature_error_pointing_into_it(source: str) -> None:
    try:
        sig = compile_signature(source)
    except SignatureError as caught:
        error = caught
    else:
        Draft202012Validator.check_schema(sig.output_schema)
        return
    assert 0 <= error.position <= len(source)
    assert error.detail.splitlines()[-1].strip() == "^"
