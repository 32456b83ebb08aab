"""Check a model's answer against a JSON Schema: extract, repair, parse, coerce, validate.

The turn loop's one entry point::

    checked = check_answer(content, schema)
    if checked.ok:
        use(checked.value)              # checked.warnings says what was repaired
    elif checked.kind == "syntax":
        checked.syntax.line, checked.syntax.column, checked.syntax.excerpt
    else:                               # "schema" or "empty"
        checked.errors                  # ('$.qty: expected integer, got string "3 units"',)

With ``strict=True`` nothing is repaired or coerced (extraction from fences and
prose still happens): the JSON must be right as written.

The work is bounded: the whole check (every candidate's repair, coercion and schema
check) shares a budget of ``steps_for(len(text))`` steps (``app.core.schema.steps``); past
it, or nested too deep for the validator, the answer is rejected with ``kind == "limit"``.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

from app.core.answer.extract import Candidate, find_candidates
from app.core.answer.repair import coerce, line_column, repair_syntax, tokens
from app.core.schema.steps import TooMuchWork, steps_for, tentatively, work_budget
from app.core.schema.validation import Schema, cap_errors
from app.core.schema.validation import compiled as compiled_schema
from app.core.text.unicode import surrogate_at, surrogate_path

DiagnosisKind = Literal["empty", "syntax", "schema", "limit"]

EMPTY_ANSWER = "the answer was empty"
NO_JSON = "the answer contained no JSON value"
MAX_VALUE_DEPTH = 100

# A high surrogate escape not followed by a low one, or a low one on its own.
_LONE_SURROGATE = re.compile(
    r"\\u[dD][89abAB][0-9a-fA-F]{2}(?!\\u[dD][c-fC-F][0-9a-fA-F]{2})"
    r"|(?<!\\u[dD][89abAB][0-9a-fA-F]{2})\\u[dD][c-fC-F][0-9a-fA-F]{2}"
)
_EXCERPT_WIDTH = 60
_EXCERPT_LONG_LINE = 80


@dataclass(frozen=True)
class SyntaxProblem:
    """Where a candidate stops being JSON, relative to the candidate text."""

    line: int  # 1-based
    column: int  # 1-based
    message: str  # e.g. "Expecting ',' delimiter"
    excerpt: str  # the offending line (windowed) and a caret line under the column


@dataclass(frozen=True)
class Checked:
    """The verdict on one answer; see the module docstring."""

    ok: bool
    value: Any
    warnings: tuple[str, ...]
    kind: DiagnosisKind | None
    errors: tuple[str, ...]
    syntax: SyntaxProblem | None
    candidate: str | None


def check_answer(
    text: str,
    schema: Mapping[str, Any],
    *,
    strict: bool = False,
    max_errors: int = 8,
    prompt: str = "",
    allow_echo: bool = True,
) -> Checked:
    """Pick the answer's JSON value and check it against ``schema`` (already checked).

    The first valid candidate wins; else the diagnosis is about the most plausible one:
    a kind the schema's root allows, then parsing, then the fewest errors, then the last.
    A candidate copied from ``prompt`` wins only when none else is valid (never without
    ``allow_echo``): base models echo their prompt.
    """
    steps = steps_for(len(text))
    try:
        with work_budget(steps):
            return _check_answer(
                text,
                schema,
                strict=strict,
                max_errors=max_errors,
                prompt=prompt,
                allow_echo=allow_echo,
            )
    except (TooMuchWork, RecursionError):
        return Checked(False, None, (), "limit", (too_complex(steps),), None, None)


def too_complex(steps: int) -> str:
    return (
        f"checking the answer against the schema needed more than {steps} steps "
        "(the service's limit for an answer of this size)"
    )


def _check_answer(
    text: str,
    schema: Mapping[str, Any],
    *,
    strict: bool,
    max_errors: int,
    prompt: str,
    allow_echo: bool,
) -> Checked:
    if not text.strip():
        return Checked(False, None, (), "empty", (EMPTY_ANSWER,), None, None)
    compiled = compiled_schema(schema)
    attempts: dict[str, _Attempt] = {}

    def attempt(candidate: Candidate) -> _Attempt:
        if candidate.text not in attempts:
            attempts[candidate.text] = _check(candidate, compiled, strict=strict)
        return attempts[candidate.text]

    candidates = find_candidates(
        text, parses=lambda whole: attempt(Candidate(whole, "whole", None)).parsed
    )
    echoed = _echoes(candidates, prompt)
    if echoed and not allow_echo:
        candidates = [c for c in candidates if c.text not in echoed]
    if not candidates:
        return Checked(False, None, (), "empty", (NO_JSON,), None, None)
    tried = [(candidate, attempt(candidate)) for candidate in candidates]
    valid = [(c, a) for c, a in tried if a.parsed and not a.errors]
    if valid:
        return _accepted(valid, echoed)
    return _rejected(tried, compiled, echoed, max_errors)


def _accepted(valid: list[tuple[Candidate, _Attempt]], echoed: set[str]) -> Checked:
    """The first valid candidate, preferring what the model wrote itself."""
    # Stable sort: answers the model wrote itself before values it copied from the prompt.
    valid.sort(key=lambda pair: pair[0].text in echoed)
    candidate, chosen = valid[0]
    warnings = [*_notes(candidate), *chosen.warnings]
    if echoed:
        warnings.append(
            f"extract: skipped {len(echoed)} JSON value(s) copied from the prompt"
            if candidate.text not in echoed
            else "extract: the answer is a JSON value that also appears in the prompt"
        )
    distinct = 1 if len(valid) == 1 else _distinct([a.value for _, a in valid])
    if distinct > 1:
        warnings.append(
            f"extract: the answer holds {distinct} different JSON values that match the "
            "schema; took the first"
        )
    return Checked(True, chosen.value, tuple(warnings), None, (), None, candidate.text)


def _rejected(
    tried: list[tuple[Candidate, _Attempt]], schema: Schema, echoed: set[str], max_errors: int
) -> Checked:
    """The diagnosis of the most plausible candidate (see ``check_answer``)."""
    roots = _root_types(schema)
    _, (candidate, chosen) = max(
        enumerate(tried),
        key=lambda item: (
            item[1][0].text not in echoed,
            _plausible(item[1][0].text, roots),
            item[1][1].parsed,
            -len(item[1][1].errors),
            item[0],
        ),
    )
    notes = (*_notes(candidate), *chosen.warnings)
    if chosen.parsed:
        errors = tuple(cap_errors(chosen.errors, max_errors, complete=chosen.complete))
        return Checked(False, chosen.value, notes, "schema", errors, None, candidate.text)
    problem = chosen.syntax
    assert problem is not None
    headline = f"line {problem.line}, column {problem.column}: {problem.message}"
    return Checked(False, None, notes, "syntax", (headline,), problem, candidate.text)


def _echoes(candidates: list[Candidate], prompt: str) -> set[str]:
    """Candidates that appear in the prompt, compared with whitespace collapsed."""
    if not prompt:
        return set()
    echoed: set[str] = set()
    flat: str | None = None
    for candidate in candidates:
        words = candidate.text.split()
        # A candidate in the prompt has each of its words in it: most answers' longest word
        # is not, and the prompt is never flattened for them.
        if words and max(words, key=len) not in prompt:
            continue
        if flat is None:
            flat = " ".join(prompt.split())
        if " ".join(words) in flat:
            echoed.add(candidate.text)
    return echoed


@dataclass
class _Attempt:
    parsed: bool
    value: Any = None
    warnings: list[str] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)
    syntax: SyntaxProblem | None = None
    complete: bool = True  # False when there were too many errors to list them all


def _check(candidate: Candidate, schema: Schema, *, strict: bool) -> _Attempt:
    text = candidate.text
    try:
        value, whole_floats = _loads(text)
    except _NotJson as first:
        if strict:
            return _Attempt(False, syntax=_problem(text, first.position, first.message))
        repaired = repair_syntax(text)
        if repaired.text == text:
            return _Attempt(False, syntax=_problem(text, first.position, first.message))
        try:
            value, whole_floats = _loads(repaired.text)
        except _NotJson as second:
            # Report the first problem the repairs could not fix, placed in the model's own text.
            message = second.message
            position = repaired.original_position(second.position)
            problem = _problem(text, position, message, hint_text=repaired.text, at=second.position)
            return _Attempt(False, warnings=list(repaired.warnings), syntax=problem)
        warnings = list(repaired.warnings)
    else:
        warnings = []
    # The common answer: valid as written. A value the schema takes as it is has nothing to
    # coerce (every coercion turns a value of a type the schema refuses into one it takes)
    # except a float with no fraction where an integer is wanted (3.0, which JSON Schema
    # takes as an integer and the coercion turns into 3): without one, the one schema check
    # says all, and an invalid value goes the full way, charged as if this had not been.
    if (strict or not whole_floats) and tentatively(lambda: schema.is_valid(value)):
        return _Attempt(True, value, warnings)
    if not strict:
        coerced = coerce(value, schema)
        value = coerced.value
        warnings.extend(coerced.warnings)
    errors, complete = schema.error_lines(value)
    return _Attempt(True, value, warnings, errors, complete=complete)


class _NotJson(Exception):
    def __init__(self, message: str, position: int) -> None:
        super().__init__(message)
        self.message = message
        self.position = position


class _Constant(Exception):
    def __init__(self, name: str) -> None:
        super().__init__(name)
        self.name = name


def _reject_constant(name: str) -> Any:
    raise _Constant(name)


def _loads(text: str) -> tuple[Any, bool]:
    """Strict JSON: no NaN or Infinity, and a bounded nesting depth. With the value, whether
    it holds a float with no fraction (``3.0``)."""
    whole_floats = False

    def number(literal: str) -> float:
        nonlocal whole_floats
        parsed = float(literal)
        whole_floats = whole_floats or parsed.is_integer()
        return parsed

    try:
        value = json.loads(text, parse_constant=_reject_constant, parse_float=number)
    except json.JSONDecodeError as exc:
        raise _NotJson(exc.msg, exc.pos) from None
    except _Constant as exc:
        raise _NotJson(
            f"{exc.name} is not valid JSON (use a number or null)", _word_at(text, exc.name)
        ) from None
    except RecursionError:
        raise _NotJson(f"the value is nested more than {MAX_VALUE_DEPTH} levels deep", 0) from None
    # Each level opens with a bracket of the text (and a text with few brackets, most
    # answers, has no deep value); a surrogate in a value is in the text or comes from a
    # \u escape in it.
    deep = text.count("{") + text.count("[") > MAX_VALUE_DEPTH
    if deep and _depth(value) > MAX_VALUE_DEPTH:
        raise _NotJson(f"the value is nested more than {MAX_VALUE_DEPTH} levels deep", 0)
    if ("\\u" in text or surrogate_at(text) is not None) and surrogate_path(value) is not None:
        # "\ud800" parses to text no UTF-8 store, engine or client can take.
        escape = _LONE_SURROGATE.search(text)
        raise _NotJson(
            "a \\u escape is an unpaired UTF-16 surrogate, which is not valid Unicode text "
            "(write the character itself, or a high and low surrogate pair)",
            escape.start() if escape else 0,
        )
    return value, whole_floats


def _word_at(text: str, name: str) -> int:
    word = name.lstrip("-")
    for token in tokens(text):
        if token.kind == "word" and text[token.start : token.end] == word:
            negative = token.start > 0 and text[token.start - 1] == "-"
            return token.start - 1 if negative else token.start
    return 0


def _depth(value: Any) -> int:
    deepest = 0
    stack: list[tuple[Any, int]] = [(value, 1)]
    while stack:
        node, depth = stack.pop()
        if isinstance(node, dict):
            stack.extend((child, depth + 1) for child in node.values())
        elif isinstance(node, list):
            stack.extend((child, depth + 1) for child in node)
        else:
            continue
        deepest = max(deepest, depth)
        if deepest > MAX_VALUE_DEPTH:
            break
    return deepest


def _problem(
    text: str, position: int, message: str, *, hint_text: str | None = None, at: int | None = None
) -> SyntaxProblem:
    hint = _hint(
        hint_text if hint_text is not None else text,
        at if at is not None else position,
        message,
    )
    line, column = line_column(text, position)
    full = f"{message} ({hint})" if hint else message
    return SyntaxProblem(line, column, full, _excerpt(text, position, line))


def _hint(text: str, position: int, message: str) -> str | None:
    """A plain-words reason for the commonest JSON mistakes, or None."""
    if position >= len(text.rstrip()):
        return "the text ends before the JSON value is complete"
    char = text[position]
    before = text[:position].rstrip()[-1:]
    word = text[position:].split(None, 1)[0] if text[position:].split() else ""
    if char == "," and before in (",", "[", "{"):
        return "a value is missing before this comma"
    if char in "}]" and before == ",":
        return f"remove the trailing comma before '{char}'"
    if char == "'":
        return "JSON strings and keys need double quotes"
    if char in "“”‘’":
        return 'use straight double quotes (") instead of curly quotes'
    for literal, fix in (("True", "true"), ("False", "false"), ("None", "null")):
        if word.startswith(literal):
            return f"write {fix}, not {literal}"
    if char == "#" or text.startswith(("//", "/*"), position):
        return "JSON does not allow comments"
    if message.startswith(("Expecting property name", "Expecting value")) and (
        char.isalpha() or char in "_$"
    ):
        return "object keys and strings must be double-quoted"
    return None


def _excerpt(text: str, position: int, line: int) -> str:
    start = text.rfind("\n", 0, position) + 1
    end = text.find("\n", start)
    row = text[start : end if end != -1 else len(text)].rstrip("\r")
    offset = position - start
    if len(row) > _EXCERPT_LONG_LINE:
        left = max(0, min(offset - _EXCERPT_WIDTH // 2, len(row) - _EXCERPT_WIDTH))
        right = min(len(row), left + _EXCERPT_WIDTH)
        shown = ("…" if left else "") + row[left:right] + ("…" if right < len(row) else "")
        offset = offset - left + (1 if left else 0)
    else:
        shown = row
    # One character per column, so the caret stays under the right one.
    shown = "".join(" " if c < " " else c for c in shown)
    gutter = str(line)
    return f"  {gutter} | {shown}\n  {' ' * len(gutter)} | {' ' * offset}^"


def _notes(candidate: Candidate) -> list[str]:
    return [candidate.note] if candidate.note else []


def _distinct(values: list[Any]) -> int:
    return len({json.dumps(value, sort_keys=True) for value in values})


def _root_types(schema: Schema) -> set[str] | None:
    wanted: set[str] | None = None
    for scope in schema.root.flatten():
        declared = scope.node.get("type") if isinstance(scope.node, Mapping) else None
        if declared is None:
            continue
        kinds = {declared} if isinstance(declared, str) else set(declared)
        wanted = kinds if wanted is None else wanted & kinds
    return wanted


def _plausible(text: str, roots: set[str] | None) -> bool:
    """Could this candidate be the answer at all, judging by its first character?"""
    if roots is None:
        return True
    if text.startswith("{"):
        return bool(roots & {"object", "array"})  # a lone object may be wrapped into a list
    if text.startswith("["):
        return "array" in roots
    return bool(roots - {"object", "array"})
