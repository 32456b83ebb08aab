"""Every regular expression the product compiles runs in linear time on hostile text.

The audit of issue #10, kept as a test: each module-level ``re.Pattern`` in ``app`` (found
by importing every module, so a new one is covered the day it is added) is run over 100 KB
inputs built to make a backtracking engine work hard: long runs of each character the
pattern mentions, the same runs after an opener (quotes, fences, comments, escapes) and
left unclosed, and two characters alternating. A quadratic pattern takes minutes on these,
a linear one milliseconds: the test runs them all and has no clock of its own (a quadratic
one is stopped by pytest-timeout); bench/hostile_inputs.py measures the slowest run of each.

Why not ask RE2 instead (it accepts only what it runs in linear time)? These patterns run on
Python's ``re``, which backtracks on patterns RE2 accepts (``(a+)+$``): RE2 accepting one
would say nothing of how ``re`` runs it.

Most patterns run with ``search``, ``match``, ``fullmatch`` and ``finditer``. A few are
lexer pieces that the product only ever anchors (``match``/``fullmatch`` at a position it
chose, once per token): an unclosed string is linear to find from its quote, but a
``search`` would retry from every later quote. Those are listed in ``ANCHORED``, run
anchored only, and the test checks the source never searches with them.
"""

from __future__ import annotations

import importlib
import pkgutil
import re
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

import app

SIZE = 100_000
OPENERS = ('"', "'", "“", "/*", "//", "#", "```", "{", "[", "\\", "\\u", "-", ".", ":")
FILLERS = ("a", "0", " ", "\t", "\\", '"', ".", "\n")
ANCHORED = {
    "app.core.answer.extract._ITEM_START",
    "app.core.answer.extract._KEY_START",
    "app.core.answer.repair._BLOCK_COMMENT",
    "app.core.answer.repair._CURLY",
    "app.core.answer.repair._DOUBLE",
    "app.core.answer.repair._SINGLE",
    "app.core.schema.signature._TOKEN",
    "app.tracecontext._VALUE",
}
SEARCHING = (".search(", ".finditer(", ".findall(", ".sub(", ".subn(", ".split(")
# Modules that are entry points, not libraries: importing them runs nothing, but skip them
# so the test never depends on what a command line does at import.
SKIP = {"app.__main__"}


def builtin_patterns() -> list[tuple[str, re.Pattern[str]]]:
    found: dict[int, tuple[str, re.Pattern[str]]] = {}
    for module_info in pkgutil.walk_packages(app.__path__, "app."):
        if module_info.name in SKIP:
            continue
        module = importlib.import_module(module_info.name)
        for name, value in vars(module).items():
            members = list(value) if isinstance(value, tuple | list) else [value]
            for index, member in enumerate(members):
                if isinstance(member, re.Pattern) and isinstance(member.pattern, str):
                    label = name if member is value else f"{name}[{index}]"
                    found.setdefault(id(member), (f"{module_info.name}.{label}", member))
    return sorted(found.values())


def hostile_inputs(pattern: re.Pattern[str]) -> Iterator[str]:
    alphabet = sorted({c for c in pattern.pattern if c.isprintable()} | set(FILLERS))
    for char in alphabet:
        run = char * SIZE
        yield run
        yield run + "\x00"
    for opener in OPENERS:
        for filler in FILLERS:
            yield opener + filler * SIZE
    for first in FILLERS:
        for second in FILLERS:
            if first != second:
                yield (first + second) * (SIZE // 2)


PATTERNS = builtin_patterns()


def test_the_audit_finds_the_patterns_that_read_model_output_and_client_input() -> None:
    names = {name for name, _ in PATTERNS}
    for expected in (
        "app.core.answer.extract._FENCE_OPEN",
        "app.core.answer.repair._DOUBLE",
        "app.core.answer.repair._BLOCK_COMMENT",
        "app.core.answer.verdict._FAIL",
        "app.core.schema.signature._TOKEN",
        "app.core.schema.jsonpath._STEP",
        "app.providers.transport._TOKEN_LIMIT_TEXT",
        "app.providers.transport._KEY_PATTERNS[3]",
    ):
        assert expected in names


def test_anchored_patterns_are_never_searched_with() -> None:
    for name in ANCHORED:
        module, _, attribute = name.rpartition(".")
        source = Path(importlib.import_module(module).__file__ or "").read_text(encoding="utf-8")
        for call in SEARCHING:
            assert attribute + call not in source, f"{name}{call} would be quadratic"


def runs_of(name: str, pattern: re.Pattern[str]) -> list[Callable[[str], object]]:
    """The ways the product may run ``pattern``: anchored only when it is in ``ANCHORED``."""
    runs: list[Callable[[str], object]] = [pattern.match, pattern.fullmatch]
    if name not in ANCHORED:
        runs += [pattern.search, lambda t: sum(1 for _ in pattern.finditer(t))]
    return runs


@pytest.mark.parametrize(("name", "pattern"), PATTERNS, ids=[name for name, _ in PATTERNS])
def test_a_builtin_pattern_is_linear_on_hostile_input(name: str, pattern: re.Pattern[str]) -> None:
    runs = runs_of(name, pattern)
    for text in hostile_inputs(pattern):
        for run in runs:
            run(text)  # milliseconds when linear; minutes when quadratic (pytest-timeout)
