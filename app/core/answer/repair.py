"""Deterministic repairs of almost-JSON text, and schema-guided coercions of parsed values.

Both only ever fix the form of what the model wrote; neither invents data::

    fixed = repair_syntax("{name: 'Ada', tags: ['x',],}")
    fixed.text      # '{"name": "Ada", "tags": ["x"]}'
    fixed.warnings  # ('repair: quoted 2 unquoted object keys (first at line 1, col 2)', ...)

    coerce({"qty": "3"}, Schema({"properties": {"qty": {"type": "integer"}}}))
    # Coerced(value={'qty': 3}, warnings=('repair: coerced $.qty from string "3" to integer',))

Syntax repairs: trailing commas; a missing comma between two values of an array
or between an object's value and the next key (two values side by side have no
other reading, unless both are numbers: ``[1 234]`` may be one number with a
thousands separator); single-quoted strings; curly quotes used as string quotes;
Python ``True``/``False``/``None``; unquoted object keys; ``//``, ``/* */`` and
``#`` comments; raw control characters and invalid escapes inside strings. All
of them act outside strings only (or on a string's escaping), so string content
is never changed. A truncated value (a
missing closing bracket or quote) is *not* completed: the end of the data is
unknown, and guessing it would invent an answer.

Coercions (after parsing, walking the schema through ``properties``,
``patternProperties``, ``additionalProperties``, ``prefixItems``, ``items``,
``$ref`` and ``allOf``): a numeric string where a number or integer is wanted
(``"42"`` → 42, ``"3.50"`` → 3.5; ``"3 units"`` is left for the validator to
report); ``"true"``/``"false"`` where a boolean is wanted; an integral float
where an integer is wanted (3.0 → 3); a lone object where an array is wanted
(wrapped in a list). Under ``anyOf``/``oneOf`` a value is coerced only when
exactly one alternative accepts the result. A one-element list where an
object is wanted is *not* unwrapped: a list may be the model's deliberate
answer of several results, and the schema error says plainly what to change.
"""

from __future__ import annotations

import math
import re
from bisect import bisect_right
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

from app.core.schema.pattern import PatternError, compile_pattern
from app.core.schema.steps import charge
from app.core.schema.validation import Schema, Scope, brief, json_path, json_type

TokenKind = Literal["ws", "string", "comment", "punct", "word", "number", "other"]


@dataclass(frozen=True, slots=True)
class Token:
    """One lexical piece of almost-JSON text: ``text[start:end]``."""

    kind: TokenKind
    start: int
    end: int
    closed: bool = True  # strings and block comments: False when the text ends inside
    quote: str = ""  # strings: the opening quote character


_WS = re.compile(r"[ \t\r\n]+")
_DOUBLE = re.compile(r'"[^"\\]*(?:\\.[^"\\]*)*"', re.S)
_SINGLE = re.compile(r"'[^'\\]*(?:\\.[^'\\]*)*'", re.S)
_CURLY = re.compile(r"“[^“”\n]*[”“]")
_LINE_COMMENT = re.compile(r"(?://|#)[^\n]*")
_BLOCK_COMMENT = re.compile(r"/\*.*?\*/", re.S)
_WORD = re.compile(r"[A-Za-z_$][A-Za-z0-9_$]*")
_NUMBER = re.compile(r"-?\.?\d[0-9A-Za-z_.+-]*")
_PUNCT = frozenset("{}[]:,")
# After one of these (or at the start) a quote opens a string; elsewhere it is a stray apostrophe.
_VALUE_STARTS = frozenset("{[,:")


def tokens(text: str, start: int = 0) -> Iterator[Token]:
    """Lex ``text`` from ``start`` the lenient way the repairs and the extractor both need."""
    i = start
    n = len(text)
    previous = ""  # the last significant character, "" at the start
    while i < n:
        c = text[i]
        token: Token
        if c in " \t\r\n":
            match = _WS.match(text, i)
            assert match is not None
            token = Token("ws", i, match.end())
        elif c == '"':
            match = _DOUBLE.match(text, i)
            token = Token("string", i, match.end() if match else n, match is not None, '"')
        elif (
            c == "'"
            and (previous == "" or previous in _VALUE_STARTS)
            and (match := _SINGLE.match(text, i))
        ):
            token = Token("string", i, match.end(), True, "'")
        elif c == "“" and (match := _CURLY.match(text, i)):
            token = Token("string", i, match.end(), True, "“")
        elif c == "#" or text.startswith("//", i):
            match = _LINE_COMMENT.match(text, i)
            assert match is not None
            token = Token("comment", i, match.end())
        elif text.startswith("/*", i):
            match = _BLOCK_COMMENT.match(text, i)
            token = Token("comment", i, match.end() if match else n, match is not None)
        elif c in _PUNCT:
            token = Token("punct", i, i + 1)
        elif match := _WORD.match(text, i):
            token = Token("word", i, match.end())
        elif match := _NUMBER.match(text, i):
            token = Token("number", i, match.end())
        else:
            token = Token("other", i, i + 1)
        if token.kind not in ("ws", "comment"):
            previous = c if token.kind == "punct" else "v"
        yield token
        i = token.end


@dataclass(frozen=True)
class Repaired:
    """Repaired text, one warning per kind of repair, and a map back to the original text."""

    text: str
    warnings: tuple[str, ...]
    # (position in text, position in the original, whether the piece was copied verbatim)
    _pieces: tuple[tuple[int, int, bool], ...] = field(default=(), repr=False)
    _original_length: int = field(default=0, repr=False)

    def original_position(self, position: int) -> int:
        """Where ``position`` in the repaired text came from in the original text."""
        if position >= len(self.text) or not self._pieces:
            return self._original_length if position >= len(self.text) else position
        index = bisect_right(self._pieces, (position, math.inf, True)) - 1
        out_start, original_start, verbatim = self._pieces[max(index, 0)]
        return original_start + (position - out_start if verbatim else 0)


_PYTHON_LITERALS = {"True": "true", "False": "false", "None": "null"}
_VALID_ESCAPES = frozenset('"\\/bfnrtu')
_HEX4 = re.compile(r"[0-9a-fA-F]{4}")
_NEEDS_FIX = re.compile(r"[\x00-\x1f]|\\[^\"\\/bfnrtu]|\\u(?![0-9a-fA-F]{4})", re.S)
_CONTROL_ESCAPES = {"\n": "\\n", "\r": "\\r", "\t": "\\t", "\b": "\\b", "\f": "\\f"}

# kind → (singular, plural with {n})
_REPAIRS: dict[str, tuple[str, str]] = {
    "comment": ("removed a comment", "removed {n} comments"),
    "trailing_comma": ("removed trailing comma", "removed {n} trailing commas"),
    "single_quotes": (
        "changed a single-quoted string to double quotes",
        "changed {n} single-quoted strings to double quotes",
    ),
    "curly_quotes": (
        "replaced curly quotes “…” with straight double quotes",
        "replaced curly quotes “…” with straight double quotes {n} times",
    ),
    "python_literal": (
        "replaced a Python literal (True/False/None) with JSON true/false/null",
        "replaced {n} Python literals (True/False/None) with JSON true/false/null",
    ),
    "unquoted_key": ("quoted an unquoted object key", "quoted {n} unquoted object keys"),
    "missing_comma": (
        "added a missing comma between two values",
        "added {n} missing commas between values",
    ),
    "control_character": (
        "escaped a raw control character (such as a line break) inside a string",
        "escaped {n} raw control characters (such as line breaks) inside strings",
    ),
    "invalid_escape": (
        "fixed an invalid backslash escape inside a string",
        "fixed {n} invalid backslash escapes inside strings",
    ),
}


class _Writer:
    """Builds the repaired text while remembering where each piece came from."""

    def __init__(self, original: str) -> None:
        self.original = original
        self.parts: list[str] = []
        self.pieces: list[tuple[int, int, bool]] = []
        self.length = 0
        self.found: dict[str, list[int]] = {}

    def copy(self, token: Token) -> None:
        self.emit(self.original[token.start : token.end], token.start, verbatim=True)

    def emit(self, text: str, origin: int, *, verbatim: bool = False) -> None:
        if text:
            self.pieces.append((self.length, origin, verbatim))
            self.parts.append(text)
            self.length += len(text)

    def note(self, kind: str, origin: int, count: int = 1) -> None:
        self.found.setdefault(kind, []).extend([origin] * count)

    def result(self) -> Repaired:
        warnings = []
        for kind, origins in self.found.items():
            one, many = _REPAIRS[kind]
            line, column = line_column(self.original, origins[0])
            if len(origins) == 1:
                warnings.append(f"repair: {one} (line {line}, col {column})")
            else:
                what = many.format(n=len(origins))
                warnings.append(f"repair: {what} (first at line {line}, col {column})")
        return Repaired(
            "".join(self.parts), tuple(warnings), tuple(self.pieces), len(self.original)
        )


def repair_syntax(text: str) -> Repaired:
    """Apply every unambiguous syntax repair to ``text``; warnings say what changed and where."""
    pieces = list(tokens(text))
    following = _following(pieces)
    walk = _SyntaxWalk(text)
    for index, token in enumerate(pieces):
        nxt = following.get(index)
        walk.step(token, text[nxt.start : nxt.end] if nxt is not None else "")
    return walk.out.result()


def _following(pieces: list[Token]) -> dict[int, Token | None]:
    """For each significant token (not whitespace or a comment), the next significant one."""
    significant = [i for i, t in enumerate(pieces) if t.kind not in ("ws", "comment")]
    following: dict[int, Token | None] = {}
    for rank, index in enumerate(significant):
        later = significant[rank + 1] if rank + 1 < len(significant) else None
        following[index] = pieces[later] if later is not None else None
    return following


class _SyntaxWalk:
    """The state of ``repair_syntax`` between tokens: open brackets, and whether a key is due."""

    def __init__(self, text: str) -> None:
        self.text = text
        self.out = _Writer(text)
        self.stack: list[str] = []
        self.expect_key = False
        # The last significant token ended a value inside an array or object (not a key).
        self.after_value = False
        self.after_number = False
        self.last_raw = self.raw_before = ""  # significant tokens as written: latest, one before

    def step(self, token: Token, nxt_raw: str) -> None:
        """Copy or repair one token; ``nxt_raw`` is the next significant token as written."""
        raw = self.text[token.start : token.end]
        if token.kind not in ("ws", "comment"):
            self.last_raw, self.raw_before = raw, self.last_raw
        if token.kind == "ws":
            self.out.copy(token)
            return
        if token.kind == "comment":
            self._comment(token, raw)
            return
        starts_value = token.kind in ("string", "word", "number") or raw in ("{", "[")
        # ``"a": 1 "b": 2`` or ``["x" "y"]``: the comma between them is the only reading.
        # Two numbers are not: ``[1 234]`` may be one number with a thousands separator.
        two_numbers = token.kind == "number" and self.after_number
        if starts_value and self.after_value and token.closed and not two_numbers:
            self.out.note("missing_comma", token.start)
            self.out.emit(",", token.start)
            self.expect_key = self.stack[-1] == "{"
        key = token.kind == "string" and self.expect_key
        if token.kind == "punct":
            self._punct(token, raw, nxt_raw)
        elif token.kind == "string":
            _repair_string(self.out, self.text, token)
            self.expect_key = False
        elif token.kind == "word":
            key = self.expect_key and nxt_raw == ":"
            self._word(token, raw, nxt_raw)
        else:
            self.out.copy(token)
            self.expect_key = False
        ends_value = token.kind in ("string", "word", "number") or raw in ("}", "]")
        self.after_value = ends_value and not key and token.closed and bool(self.stack)
        self.after_number = token.kind == "number"

    def _comment(self, token: Token, raw: str) -> None:
        if not token.closed:  # an unclosed /* swallows the rest: not unambiguous
            self.out.copy(token)
            return
        self.out.note("comment", token.start)
        if raw.startswith("/*"):
            self.out.emit(" ", token.start)  # keeps the tokens on either side apart

    def _punct(self, token: Token, raw: str, nxt_raw: str) -> None:
        # ",}" is a trailing comma; ",,}" or "[,]" is a missing value: not ours to fill.
        if raw == "," and nxt_raw in ("}", "]") and self.raw_before not in ("", ",", "{", "["):
            self.out.note("trailing_comma", token.start)
            return
        self.out.copy(token)
        if raw in "{[":
            self.stack.append(raw)
            self.expect_key = raw == "{"
        elif raw in "}]":
            if self.stack:
                self.stack.pop()
            self.expect_key = False
        elif raw == ",":
            self.expect_key = bool(self.stack) and self.stack[-1] == "{"
        else:
            self.expect_key = False

    def _word(self, token: Token, raw: str, nxt_raw: str) -> None:
        if self.expect_key and nxt_raw == ":":
            self.out.note("unquoted_key", token.start)
            self.out.emit(f'"{raw}"', token.start)
        elif raw in _PYTHON_LITERALS:
            self.out.note("python_literal", token.start)
            self.out.emit(_PYTHON_LITERALS[raw], token.start, verbatim=True)
        else:
            self.out.copy(token)
        self.expect_key = False


def _repair_string(out: _Writer, text: str, token: Token) -> None:
    if not token.closed:  # truncated: the rest of the text is unknown, leave it alone
        out.copy(token)
        return
    body = text[token.start + 1 : token.end - 1]
    if token.quote == '"':
        if not _NEEDS_FIX.search(body):
            out.copy(token)
            return
        out.emit('"' + _escape_body(out, body, token.start + 1, quote='"') + '"', token.start)
        return
    out.note("single_quotes" if token.quote == "'" else "curly_quotes", token.start)
    out.emit('"' + _escape_body(out, body, token.start + 1, quote=token.quote) + '"', token.start)


def _escape_body(out: _Writer, body: str, origin: int, *, quote: str) -> str:
    """Re-escape a string body for a double-quoted JSON string."""
    parts: list[str] = []
    controls = 0
    invalid = 0
    i = 0
    while i < len(body):
        c = body[i]
        if c == "\\" and i + 1 < len(body):
            nxt = body[i + 1]
            if nxt == "u" and _HEX4.match(body, i + 2):
                parts.append(body[i : i + 6])
                i += 6
                continue
            if nxt in _VALID_ESCAPES and nxt != "u":
                parts.append(c + nxt)
            elif nxt == "'":
                parts.append("'")
                invalid += quote != "'"  # \' is the normal escape inside '...'
            else:
                parts.append("\\\\" + nxt if nxt not in "\n\r\t" else "\\\\" + _control(nxt))
                invalid += 1
            i += 2
            continue
        if c == "\\":  # a lone backslash at the very end of the body
            parts.append("\\\\")
            invalid += 1
        elif c == '"':
            parts.append('\\"')  # only reachable for single- and curly-quoted strings
        elif c < " ":
            parts.append(_control(c))
            controls += 1
        else:
            parts.append(c)
        i += 1
    if controls:
        out.note("control_character", origin, controls)
    if invalid:
        out.note("invalid_escape", origin, invalid)
    return "".join(parts)


def _control(c: str) -> str:
    return _CONTROL_ESCAPES.get(c, f"\\u{ord(c):04x}")


def line_column(text: str, position: int) -> tuple[int, int]:
    """1-based line and column of ``position`` in ``text`` (lines end at ``\\n``)."""
    line = text.count("\n", 0, position) + 1
    column = position - (text.rfind("\n", 0, position) + 1) + 1
    return line, column


# -- coercions --------------------------------------------------------------------


@dataclass(frozen=True)
class Coerced:
    """A value after schema-guided coercions, with one warning per coercion."""

    value: Any
    warnings: tuple[str, ...]


_NUMERIC = re.compile(r"[+-]?(?:\d+(?:\.\d*)?|\.\d+)(?:[eE][+-]?\d+)?")
_MAX_COERCION_WARNINGS = 8
_MAX_DEPTH = 64


def coerce(value: Any, schema: Schema) -> Coerced:
    """Coerce ``value`` towards ``schema`` where the intent is unambiguous (see module doc)."""
    notes: list[str] = []
    result = _coerce(value, schema, [schema.root], (), notes, 0)
    if len(notes) > _MAX_COERCION_WARNINGS:
        rest = len(notes) - _MAX_COERCION_WARNINGS
        notes = [*notes[:_MAX_COERCION_WARNINGS], f"repair: ... and {rest} more coercions"]
    return Coerced(result, tuple(notes))


def _coerce(
    value: Any,
    schema: Schema,
    scopes: list[Scope],
    path: tuple[str | int, ...],
    notes: list[str],
    depth: int,
) -> Any:
    if depth > _MAX_DEPTH:
        return value
    unique = {id(s.node): s for scope in scopes for s in scope.flatten()}
    nodes = [s for s in unique.values() if isinstance(s.node, Mapping)]
    charge(len(nodes))
    if not nodes:
        return value
    value = _coerce_shape(value, _wanted_types(nodes), path, notes)
    for node in nodes:
        for keyword in ("anyOf", "oneOf"):
            branches = node.node.get(keyword)
            if isinstance(branches, list) and branches:
                value = _coerce_union(value, schema, node, branches, path, notes, depth)
    if isinstance(value, dict):
        return {
            key: _coerce(item, schema, _property_scopes(nodes, key), (*path, key), notes, depth + 1)
            for key, item in value.items()
        }
    if isinstance(value, list):
        return [
            _coerce(item, schema, _item_scopes(nodes, index), (*path, index), notes, depth + 1)
            for index, item in enumerate(value)
        ]
    return value


def _wanted_types(nodes: list[Scope]) -> set[str] | None:
    wanted: set[str] | None = None
    for scope in nodes:
        declared = scope.node.get("type")
        if declared is None:
            continue
        kinds = {declared} if isinstance(declared, str) else set(declared)
        wanted = kinds if wanted is None else wanted & kinds
    return wanted


def _coerce_shape(
    value: Any, wanted: set[str] | None, path: tuple[str | int, ...], notes: list[str]
) -> Any:
    if not wanted or _has_type(value, wanted):
        return value
    where = json_path(path)
    if isinstance(value, str) and wanted & {"number", "integer"}:
        number = _parse_number(value, integer_only="number" not in wanted)
        if number is not None:
            target = "number" if "number" in wanted else "integer"
            notes.append(f"repair: coerced {where} from string {brief(value)} to {target}")
            return number
    if (
        isinstance(value, str)
        and "boolean" in wanted
        and value.strip().lower() in ("true", "false")
    ):
        notes.append(f"repair: coerced {where} from string {brief(value)} to boolean")
        return value.strip().lower() == "true"
    if isinstance(value, float) and "integer" in wanted and value.is_integer():
        notes.append(f"repair: coerced {where} from number {brief(value)} to integer")
        return int(value)
    if isinstance(value, dict) and "array" in wanted:
        notes.append(f"repair: wrapped the object at {where} in a list")
        return [value]
    return value


def _has_type(value: Any, wanted: set[str]) -> bool:
    kind = json_type(value)
    if kind == "integer":
        return bool(wanted & {"integer", "number"})
    # A float is never taken as an "integer" here (JSON Schema would take 3.0): callers want 3.
    return kind in wanted


def _parse_number(text: str, *, integer_only: bool) -> int | float | None:
    stripped = text.strip()
    if not _NUMERIC.fullmatch(stripped):
        return None
    if re.fullmatch(r"[+-]?\d+", stripped):
        return int(stripped)
    number = float(stripped)
    if not math.isfinite(number):
        return None
    if number.is_integer() and integer_only:
        return int(number)
    return None if integer_only else number


def _coerce_union(
    value: Any,
    schema: Schema,
    node: Scope,
    branches: list[Any],
    path: tuple[str | int, ...],
    notes: list[str],
    depth: int,
) -> Any:
    scopes = [node.enter(branch) for branch in branches]
    if any(schema.is_valid(value, scope) for scope in scopes):
        return value
    accepted: list[tuple[Any, list[str]]] = []
    for scope in scopes:
        trial: list[str] = []
        candidate = _coerce(value, schema, [scope], path, trial, depth + 1)
        if trial and schema.is_valid(candidate, scope):
            accepted.append((candidate, trial))
    if len(accepted) != 1:
        return value
    candidate, trial = accepted[0]
    notes.extend(trial)
    return candidate


def _property_scopes(nodes: list[Scope], key: str) -> list[Scope]:
    found: list[Scope] = []
    for scope in nodes:
        node = scope.node
        properties = node.get("properties")
        matched = False
        if isinstance(properties, Mapping) and key in properties:
            found.append(scope.enter(properties[key]))
            matched = True
        patterns = node.get("patternProperties")
        if isinstance(patterns, Mapping):
            for pattern, sub in patterns.items():
                if _search(pattern, key):
                    found.append(scope.enter(sub))
                    matched = True
        additional = node.get("additionalProperties")
        if not matched and isinstance(additional, Mapping):
            found.append(scope.enter(additional))
    return found


def _item_scopes(nodes: list[Scope], index: int) -> list[Scope]:
    found: list[Scope] = []
    for scope in nodes:
        prefix = scope.node.get("prefixItems")
        prefix = prefix if isinstance(prefix, list) else []
        if index < len(prefix):
            found.append(scope.enter(prefix[index]))
        elif isinstance(scope.node.get("items"), Mapping):
            found.append(scope.enter(scope.node["items"]))
    return found


def _search(pattern: str, text: str) -> bool:
    try:
        compiled = compile_pattern(pattern)
    except PatternError:
        return False
    charge(compiled.cost(text))
    return compiled.search(text)
