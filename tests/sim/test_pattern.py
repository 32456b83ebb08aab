"""Strings the simulator makes for a schema's ``pattern`` match it, and the constructs it
cannot honour give ``None`` (the simulator then falls back)."""

from __future__ import annotations

import random
import re

import pytest

from reprompt_sim.pattern import example

MATCHED = [
    r"^[A-Z]{3}-[0-9]{4}$",
    r"^(AB|CD)-[0-9]{3}[a-z]?$",
    r"^[A-Za-z0-9._%+-]+@[A-Za-z0-9.-]+\.[A-Za-z]{2,}$",
    r"^\+?[1-9]\d{1,14}$",
    r"^#[0-9a-fA-F]{6}$",
    r"^(?:foo|bar)+baz$",
    r"(?P<x>a|b)c",
    r"^[\d\-]{3}$",
    r"^\s*\S+$",
    r"[^abc]{2,5}",
    r"a{,3}b",
    r"x{2,}",
    r"((a|b)(c|d))*e",
    r"a*?b+?c??",
    r"[]a]",
    r"[a-]",
    r"\x41\u0042",
    r"(?i)abc",
    r"(?>ab)c",
    r"\bword\b",
    r"a{}",
    r"a|",
]
REFUSED = [r"(?=a)a", r"(?<!b)a", r"(a)\1", r"a**", r"[z-a]", r"(a", r"a)", r"a{5000}"]


@pytest.mark.parametrize("pattern", MATCHED)
def test_the_string_made_for_a_pattern_matches_it(pattern: str) -> None:
    made = {example(pattern, random.Random(seed)) for seed in range(20)}
    assert None not in made
    assert all(re.search(pattern, text) for text in made if text is not None)


def test_repeats_and_alternatives_vary_with_the_seed() -> None:
    made = {example(r"^(AB|CD)-[0-9]{3}[a-z]?$", random.Random(seed)) for seed in range(20)}
    assert len(made) > 10


@pytest.mark.parametrize("pattern", REFUSED)
def test_a_construct_it_cannot_honour_gives_none(pattern: str) -> None:
    assert example(pattern, random.Random(1)) is None
