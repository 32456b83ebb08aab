"""Shipped templates render the same text whether or not their skeleton is reused."""

from __future__ import annotations

from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from app.core.turn.templates import _STRICT, _parsed, _tidy, render

# Texts as a job may hold them: blank lines, trailing spaces, Mustache and NUL included.
texts = st.lists(
    st.sampled_from(["a", " ", "\n", "{{", "}}", "#", "`", "é", "\x00", "0", "\t"]), max_size=20
).map("".join)


def pystache(name: str, context: dict[str, Any]) -> str:
    return _tidy(_STRICT.render(_parsed(name), dict(context)))


@settings(max_examples=300, deadline=None)
@given(
    texts,
    texts,
    texts,
    st.booleans(),
    st.lists(texts, max_size=2),
)
def test_a_task_renders_as_pystache_renders_it(
    task: str, shown: str, tag: str, has_input: bool, plan: list[str]
) -> None:
    context = {
        "task": task,
        "has_input": has_input,
        "input": shown,
        "input_tag": tag,
        "has_plan": bool(plan),
        "plan": plan,
    }
    assert render("task", context) == pystache("task", context)
    # Twice: the second time from the kept skeleton.
    assert render("task", context) == pystache("task", context)


@settings(max_examples=200, deadline=None)
@given(texts, texts, st.one_of(st.none(), texts), st.booleans())
def test_a_simplified_task_renders_as_pystache_renders_it(
    task: str, shown: str, last_error: str | None, has_input: bool
) -> None:
    context = {
        "task": task,
        "has_input": has_input,
        "input": shown,
        "input_tag": "input",
        "last_error": last_error,
    }
    assert render("simplified_task", context) == pystache("simplified_task", context)


@settings(max_examples=200, deadline=None)
@given(st.booleans(), st.booleans(), texts, st.booleans())
def test_a_system_prompt_renders_as_pystache_renders_it(
    has_tools: bool, show_schema: bool, schema: str, can_fail: bool
) -> None:
    context = {
        "has_tools": has_tools,
        "show_schema": show_schema,
        "schema": schema,
        "schema_fence": "```",
        "can_fail": can_fail,
    }
    assert render("system", context) == pystache("system", context)
