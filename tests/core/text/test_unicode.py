"""Unpaired surrogates are found wherever they sit, however the text around them looks."""

from __future__ import annotations

import json
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from app.core.text.unicode import has_surrogate, surrogate_path
from app.core.wire.spec import JobSpec, valid_unicode

# Text that is ASCII, non-ASCII, or holds a lone surrogate.
texts = st.sampled_from(["", "plain", "café", "日本", "\ud800", "a\udc00b", "😀"]) | st.text(
    max_size=4
)
values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | texts,
    lambda children: st.lists(children, max_size=4) | st.dictionaries(texts, children, max_size=4),
    max_leaves=12,
)


def encodable(value: Any) -> bool:
    try:
        json.dumps(value, ensure_ascii=False).encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


@settings(max_examples=300, deadline=None)
@given(values)
def test_a_surrogate_is_found_in_any_string_or_key(value: Any) -> None:
    assert has_surrogate(value) == (not encodable(value))
    assert (surrogate_path(value) is None) == encodable(value)


def test_the_path_names_the_first_string_or_key_holding_one() -> None:
    assert surrogate_path({"a": ["x", "caf\u00e9", "\udc00"]}) == ("a", 2)
    assert surrogate_path({"ok": 1, "k\ud800": "v"}) == ("k\ud800",)
    assert surrogate_path(("x", "\ud800")) == (1,)
    assert surrogate_path(["café", {"日本": "😀"}]) is None


@pytest.mark.parametrize("value", [None, True, 3, 2.5, "", "ascii", "café", [], {}, ["日本"]])
def test_clean_values_pass_as_they_are(value: Any) -> None:
    assert valid_unicode(value) is value


class Text(str):
    pass


@pytest.mark.parametrize(
    ("value", "where"),
    [
        ("x\ud800", ""),
        (Text("x\ud800"), ""),
        (["ok", "\udc00"], " at $[1]"),
        ({"k": {"deep": "\ud800"}}, " at $.k.deep"),
    ],
)
def test_a_value_holding_a_surrogate_is_refused_with_where(value: Any, where: str) -> None:
    with pytest.raises(ValueError, match="unpaired UTF-16 surrogate") as raised:
        valid_unicode(value)
    assert str(raised.value).startswith(f"holds an unpaired UTF-16 surrogate{where};")


def test_a_job_with_a_surrogate_anywhere_is_refused_naming_the_field() -> None:
    base = {"task": "t", "signature": "{a :int}"}
    for field, value in [("task", "t\ud800"), ("metadata", {"k": "\udc00"}), ("input", ["\ud800"])]:
        with pytest.raises(ValueError, match="unpaired UTF-16 surrogate") as raised:
            JobSpec.model_validate({**base, field: value})
        assert field in str(raised.value)
