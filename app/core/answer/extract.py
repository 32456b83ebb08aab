"""Find the JSON answer candidates in a model's raw text.

In order of preference: the whole text when it parses; the contents of
```` ```json ```` (or bare ```` ``` ````) fences; balanced ``{...}``/``[...]``
spans in prose, found by a string-aware scanner (brackets inside strings do not
count). A model may echo an example before its answer, so every candidate is
returned, in order::

    [c.text for c in find_candidates('Sure! {"a": 1} or maybe {"a": 2}')]
    # ['{"a": 1}', '{"a": 2}']

A span that is still open when the text ends (a truncated answer) is a
candidate too, so that its syntax error can be reported; nothing after it is.
"""

from __future__ import annotations

import itertools
import json
import re
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Literal

from app.core.answer.repair import tokens

Origin = Literal["whole", "fence", "prose"]

MAX_CANDIDATES = 16
_JSON_FENCE_TAGS = frozenset({"", "json", "jsonc", "json5", "javascript", "js"})
_FENCE_OPEN = re.compile(r"^[ \t]*```[ \t]*([A-Za-z0-9_+.-]*)[ \t]*\r?$", re.M)
_FENCE_CLOSE = re.compile(r"^[ \t]*```[ \t]*\r?$", re.M)
_OPENER = re.compile(r"[\[{]")
# What may follow an opening bracket for the span to look like JSON (or the text ends there).
_KEY_START = re.compile(r"""\s*(?:["'“}]|[A-Za-z_$][A-Za-z0-9_$]*\s*:|\Z)""")
_ITEM_START = re.compile(r"""\s*(?:[\[{"'“\]\-.0-9]|(?:true|false|null|True|False|None)\b|\Z)""")


@dataclass(frozen=True, slots=True)
class Candidate:
    """A piece of the answer that may hold the JSON value."""

    text: str
    origin: Origin
    note: str | None  # the "extract: ..." warning; None when the candidate is the whole text


def find_candidates(
    text: str,
    *,
    parses: Callable[[str], bool] | None = None,
    limit: int = MAX_CANDIDATES,
) -> list[Candidate]:
    """Every candidate in ``text``, best first; ``parses`` decides whether the whole text is one."""
    whole = text.strip().lstrip("\ufeff").strip()
    if not whole:
        return []
    if (parses or _parses)(whole):
        return [Candidate(whole, "whole", None)]
    found: dict[str, Candidate] = {}
    for candidate in itertools.chain(_fenced(text), _spans(text, whole)):
        if len(found) >= limit:
            break
        found.setdefault(candidate.text.strip(), candidate)
    return list(found.values())


def _parses(text: str) -> bool:
    try:
        json.loads(text)
    except (ValueError, RecursionError):
        return False
    return True


def _fenced(text: str) -> list[Candidate]:
    found: list[Candidate] = []
    position = 0
    while (opening := _FENCE_OPEN.search(text, position)) is not None:
        tag = opening[1]
        start = opening.end() + 1
        closing = _FENCE_CLOSE.search(text, start)
        end = closing.start() if closing else len(text)
        position = closing.end() if closing else len(text)
        body = text[start:end].strip()
        if tag.lower() in _JSON_FENCE_TAGS and body:
            fence = f"```{tag}"
            note = f"extract: took the JSON {_kind(body)} from a {fence} code fence"
            if closing is None:
                note += " that was never closed"
            found.append(Candidate(body, "fence", note))
    return found


def _spans(text: str, whole: str) -> Iterator[Candidate]:
    # A generator, and the prose around a span measured from fixed ends: many spans (most
    # of them repeats) cost their own length each, never the whole text's.
    lead = len(text) - len(text.lstrip())
    tail = len(text.rstrip())
    position = 0
    while (opening := _OPENER.search(text, position)) is not None:
        start = opening.start()
        # Judged by its opening alone, so prose brackets cost nothing to skip: linear overall.
        if not _json_like(text, start):
            position = start + 1
            continue
        end, closed = _span_end(text, start)
        body = text[start:end].rstrip()
        before = max(0, _skip_space_back(text, start, lead) - lead)
        after = max(0, tail - _skip_space(text, end, tail))
        note = None
        if body != whole:
            skipped = []
            if before:
                skipped.append(f"{before} characters before it")
            if after:
                skipped.append(f"{after} after")
            what = f" (ignored {', '.join(skipped)})" if skipped else ""
            note = f"extract: took the JSON {_kind(body)} out of surrounding prose{what}"
        yield Candidate(body, "prose", note)
        if not closed:  # everything after an unclosed span is inside it
            return
        position = end


def _skip_space_back(text: str, index: int, floor: int) -> int:
    while index > floor and text[index - 1].isspace():
        index -= 1
    return index


def _skip_space(text: str, index: int, ceiling: int) -> int:
    while index < ceiling and text[index].isspace():
        index += 1
    return index


def _span_end(text: str, start: int) -> tuple[int, bool]:
    """Where the span opening at ``start`` ends, and whether it closes before the text does."""
    depth = 0
    for token in tokens(text, start):
        if token.kind == "string" and not token.closed:
            return len(text), False
        if token.kind != "punct":
            continue
        char = text[token.start]
        if char in "{[":
            depth += 1
        elif char in "}]":
            depth -= 1
            if depth == 0:
                return token.end, True
    return len(text), False


def _json_like(text: str, start: int) -> bool:
    if text.startswith("{", start):
        return _KEY_START.match(text, start + 1) is not None
    return _ITEM_START.match(text, start + 1) is not None


def _kind(body: str) -> str:
    if body.startswith("{"):
        return "object"
    if body.startswith("["):
        return "array"
    return "value"
