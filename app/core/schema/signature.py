"""The compact signature language, compiled to JSON Schema 2020-12 (grammar: docs/signatures.md).

::

    sig = compile_signature("(text :string) -> {vendor :string, total :float, note :string?}")
    sig.input_schema   # {"$schema": ..., "type": "object", "properties": {"text": ...}, ...}
    sig.output_schema  # {"$schema": ..., "type": "object", "required": ["vendor", "total"], ...}

A malformed signature raises ``SignatureError`` with the offset, what would have
fitted there, and an excerpt with a caret under the offending character.
"""

from __future__ import annotations

import difflib
import json
import re
from dataclasses import dataclass
from typing import Any, Final, NamedTuple, NoReturn

from app.core.wire.errors import SignatureError

__all__ = ["MAX_DEPTH", "SCHEMA_DIALECT", "Signature", "compile_signature"]

SCHEMA_DIALECT: Final = "https://json-schema.org/draft/2020-12/schema"
# Recursion guard: signatures arrive over HTTP, and `[[[[...` must not blow the stack.
MAX_DEPTH: Final = 32

_PRIMITIVES: Final[dict[str, dict[str, Any]]] = {
    "string": {"type": "string"},
    "int": {"type": "integer"},
    "float": {"type": "number"},
    "bool": {"type": "boolean"},
    "any": {},
    "map": {"type": "object"},
}
_TYPE_NAMES: Final = (*_PRIMITIVES, "enum")
# Names people reach for from other type systems, and what we spell them as.
_TYPE_HINTS: Final = {
    "integer": "did you mean ':int'?",
    "number": "did you mean ':float'?",
    "double": "did you mean ':float'?",
    "boolean": "did you mean ':bool'?",
    "str": "did you mean ':string'?",
    "object": "did you mean ':map' (any object) or {field :type, ...}?",
    "dict": "did you mean ':map' (any object) or {field :type, ...}?",
    "list": "lists are written [T], e.g. [:string]",
    "array": "lists are written [T], e.g. [:string]",
    "null": "nullable types take a '?' suffix, e.g. :string?",
}
EXPECTED_TYPE: Final = "a type (:string, :int, :float, :bool, :any, :map, :enum[...], [T] or {...})"
EXPECTED_NAME: Final = 'a field name (identifier or "quoted string")'
EXPECTED_ENUM_VALUE: Final = 'an enum value (a word or a "quoted string")'

_IDENT = re.compile(r"[A-Za-z_][A-Za-z0-9_-]*")
_TOKEN = re.compile(
    r"""
      (?P<arrow>->)
    | (?P<punct>[(){}\[\],|?])
    | (?P<string>"(?:[^"\\\n]|\\.)*")
    | (?P<type>:[A-Za-z_][A-Za-z0-9_]*)
    | (?P<word>[A-Za-z0-9_](?:[A-Za-z0-9_.]|-(?!>))*)
    """,
    re.VERBOSE,
)
_EXCERPT_WIDTH = 72


class _Token(NamedTuple):
    kind: str  # "->", a punctuation character, "string", "type", "word", "junk" or "end"
    text: str
    pos: int


@dataclass(frozen=True, slots=True)
class Signature:
    """A compiled signature; ``input_schema`` is None without an input part or for ``()``."""

    source: str
    input_schema: dict[str, Any] | None
    output_schema: dict[str, Any]


def compile_signature(source: str) -> Signature:
    """Compile ``"(a :int) -> {x :string}"`` (or just the output type) to JSON Schemas."""
    return _Parser(source).signature()


class _Parser:
    """Recursive descent over a lazily lexed token stream, emitting schemas as it goes."""

    def __init__(self, source: str) -> None:
        self.source = source
        self.pos = 0  # where the next token starts (before whitespace)
        self.open: list[_Token] = []  # brackets not yet closed, for "unclosed" hints
        self._next: _Token | None = None

    # -- grammar --------------------------------------------------------------

    def signature(self) -> Signature:
        first = self._peek()
        if first.kind == "end":
            self._fail(first, "a signature such as '(text :string) -> {answer :string}'")
        input_schema: dict[str, Any] | None = None
        if first.kind == "(":
            self._advance()
            self.open.append(first)
            properties, required = self._fields(")", depth=1)
            if properties:
                input_schema = _document(_object(properties, required))
            self._expect("->", "'->' between the inputs and the output type")
        else:
            self._accept("->")
        output, _ = self._type(depth=0)
        last = self._peek()
        if last.kind == "->" and first.kind != "(":
            self._fail(last, "end of signature", hint="inputs go in parentheses: (a :int) -> ...")
        if last.kind != "end":
            self._fail(last, "end of signature")
        return Signature(self.source, input_schema, _document(output))

    def _type(self, depth: int) -> tuple[dict[str, Any], bool]:
        """Parse ``T`` or ``T?``; returns the schema and whether it was marked optional."""
        tok = self._peek()
        if tok.kind == "type":
            self._advance()
            name = tok.text[1:]
            if name == "enum":
                schema = self._enum()
            elif name in _PRIMITIVES:
                schema = dict(_PRIMITIVES[name])
            else:
                self._fail(tok, EXPECTED_TYPE, hint=_suggest_type(name))
        elif tok.kind == "[":
            schema = self._list(tok, depth + 1)
        elif tok.kind == "{":
            schema = self._record(tok, depth + 1)
        elif tok.kind == "word":
            self._fail(tok, EXPECTED_TYPE, hint=_suggest_type(tok.text, bare=True))
        elif tok.kind == "?":
            self._fail(tok, EXPECTED_TYPE, hint="'?' goes after the type: note :string?")
        elif tok.kind == "junk" and tok.text == ":":
            self._fail(tok, EXPECTED_TYPE, hint="write the type name right after ':', e.g. :int")
        else:
            self._fail(tok, EXPECTED_TYPE)
        optional = self._accept("?")
        return (_nullable(schema) if optional else schema), optional

    def _list(self, opener: _Token, depth: int) -> dict[str, Any]:
        self._enter(opener, depth)
        items, _ = self._type(depth)
        hint = "a list has one item type" if self._peek().kind == "," else ""
        self._expect("]", "']' to close the list", hint=hint)
        self.open.pop()
        return {"type": "array", "items": items}

    def _record(self, opener: _Token, depth: int) -> dict[str, Any]:
        self._enter(opener, depth)
        properties, required = self._fields("}", depth)
        return _object(properties, required)

    def _fields(self, closer: str, depth: int) -> tuple[dict[str, dict[str, Any]], list[str]]:
        """Parse ``name T ["desc"]`` fields through ``closer``; the opener is already consumed."""
        properties: dict[str, dict[str, Any]] = {}
        required: list[str] = []
        seen: dict[str, int] = {}
        if self._peek().kind == closer:
            if closer == "}":
                self._fail(self._peek(), EXPECTED_NAME, hint="use :map for any object")
            self._advance()
            self.open.pop()
            return properties, required
        while True:
            tok = self._peek()
            if tok.kind == "word" and _IDENT.fullmatch(tok.text):
                name = tok.text
            elif tok.kind == "string":
                name = self._string(tok)
            else:
                self._fail(tok, EXPECTED_NAME)
            if name in seen:
                self._fail(
                    tok,
                    "a field name not already used in this object",
                    got=f"{json.dumps(name)} again (first at position {seen[name]})",
                )
            seen[name] = tok.pos
            self._advance()
            schema, optional = self._type(depth)
            described = self._peek()
            if self._is_description(described):
                self._advance()
                schema = {**schema, "description": self._string(described)}
            properties[name] = schema
            if not optional:
                required.append(name)
            comma = self._accept(",")
            after = self._peek()
            if after.kind == closer:
                self._advance()
                self.open.pop()
                return properties, required
            if not comma and after.kind not in ("word", "string"):
                self._fail(after, f"',' or '{closer}'")

    def _is_description(self, tok: _Token) -> bool:
        """A string after a field's type describes it, unless a type follows: then it is a name."""
        if tok.kind != "string":
            return False
        return self._lex(tok.pos + len(tok.text)).kind not in ("type", "[", "{")

    def _enum(self) -> dict[str, Any]:
        opener = self._expect("[", "'[' after :enum, e.g. :enum[low|high]")
        self.open.append(opener)
        values: list[str] = []
        while True:
            tok = self._peek()
            if tok.kind == "word":
                value = tok.text
            elif tok.kind == "string":
                value = self._string(tok)
            elif tok.kind == "]" and not values:
                self._fail(tok, EXPECTED_ENUM_VALUE, hint="an enum needs at least one value")
            else:
                self._fail(tok, EXPECTED_ENUM_VALUE)
            if value in values:
                self._fail(
                    tok, "a value not already in this enum", got=f"{json.dumps(value)} again"
                )
            values.append(value)
            self._advance()
            if not self._accept("|"):
                break
        hint = "enum values are separated by '|'" if self._peek().kind == "," else ""
        self._expect("]", "'|' or ']'", hint=hint)
        self.open.pop()
        return {"type": "string", "enum": values}

    # -- tokens ---------------------------------------------------------------

    def _peek(self) -> _Token:
        if self._next is None:
            self._next = self._lex(self.pos)
        return self._next

    def _advance(self) -> None:
        tok = self._peek()
        self.pos = tok.pos + len(tok.text)
        self._next = None

    def _accept(self, kind: str) -> bool:
        if self._peek().kind == kind:
            self._advance()
            return True
        return False

    def _expect(self, kind: str, expected: str, *, hint: str = "") -> _Token:
        tok = self._peek()
        if tok.kind != kind:
            self._fail(tok, expected, hint=hint)
        self._advance()
        return tok

    def _enter(self, opener: _Token, depth: int) -> None:
        if depth > MAX_DEPTH:
            self._fail(opener, f"a type nested at most {MAX_DEPTH} levels deep")
        self._advance()
        self.open.append(opener)

    def _lex(self, pos: int) -> _Token:
        text = self.source
        while pos < len(text) and text[pos].isspace():
            pos += 1
        if pos == len(text):
            # Point just past the last real character, not at a trailing newline.
            return _Token("end", "", len(text.rstrip()))
        match = _TOKEN.match(text, pos)
        if match is None:
            if text[pos] == '"':
                cut = "end of line" if "\n" in text[pos:] else "end of signature"
                self._fail(_Token("string", '"', pos), "a closing '\"' for this string", got=cut)
            return _Token("junk", text[pos], pos)
        kind = match.lastgroup or ""
        return _Token(match[0] if kind in ("arrow", "punct") else kind, match[0], pos)

    def _string(self, tok: _Token) -> str:
        try:
            value = json.loads(tok.text, strict=False)
        except json.JSONDecodeError:
            self._fail(tok, 'a valid "quoted string" (JSON escapes only)')
        assert isinstance(value, str)
        return value

    def _fail(
        self, tok: _Token, expected: str, *, got: str | None = None, hint: str = ""
    ) -> NoReturn:
        if got is None:
            got = "end of signature" if tok.kind == "end" else f"'{_clip(tok.text)}'"
        if tok.kind == "end" and self.open:
            where = self.open[-1]
            hint = (
                hint or f"the '{where.text}' at {_locate(self.source, where.pos)} is never closed"
            )
        if not self.source.strip():
            got = "an empty signature"
        message = f"expected {expected}, got {got}"
        if hint:
            message += f"; {hint}"
        detail = (
            f"signature: at {_locate(self.source, tok.pos)}: {message}\n"
            f"{_excerpt(self.source, tok.pos)}"
        )
        raise SignatureError(detail, position=tok.pos, expected=expected, source=self.source)


# -- emitting -----------------------------------------------------------------


def _object(properties: dict[str, dict[str, Any]], required: list[str]) -> dict[str, Any]:
    return {
        "type": "object",
        "properties": properties,
        "required": required,
        "additionalProperties": False,
    }


def _nullable(schema: dict[str, Any]) -> dict[str, Any]:
    """``T?``: T or null. Type lists for scalars; anyOf where keywords would leak to null."""
    kind = schema.get("type")
    if kind is None:  # :any already admits null
        return schema
    if kind == "array" or "properties" in schema:
        return {"anyOf": [schema, {"type": "null"}]}
    nullable = {**schema, "type": [kind, "null"]}
    if "enum" in schema:
        nullable["enum"] = [*schema["enum"], None]
    return nullable


def _document(schema: dict[str, Any]) -> dict[str, Any]:
    return {"$schema": SCHEMA_DIALECT, **schema}


# -- error text ---------------------------------------------------------------


def _suggest_type(name: str, *, bare: bool = False) -> str:
    """The nearest known type for a misspelt ``:name`` (or a bare ``name`` missing its colon)."""
    key = name.lower()
    if bare and key in _TYPE_NAMES:
        return f"did you mean ':{key}'?"
    if key in _TYPE_HINTS:
        return _TYPE_HINTS[key]
    if bare:
        return ""
    close = difflib.get_close_matches(key, _TYPE_NAMES, n=1, cutoff=0.5)
    return f"did you mean ':{close[0]}'?" if close else ""


def _locate(source: str, pos: int) -> str:
    line = source.count("\n", 0, pos) + 1
    col = pos - (source.rfind("\n", 0, pos) + 1) + 1
    return f"position {pos} (line {line}, col {col})"


def _excerpt(source: str, pos: int) -> str:
    """The line holding ``pos``, windowed if long, with a caret under ``pos``."""
    start = source.rfind("\n", 0, pos) + 1
    end = source.find("\n", pos)
    line = source[start : len(source) if end == -1 else end].replace("\t", " ").replace("\r", " ")
    col = pos - start
    left = max(0, min(col - _EXCERPT_WIDTH // 2, len(line) - _EXCERPT_WIDTH))
    right = left + _EXCERPT_WIDTH
    prefix = "…" if left > 0 else ""
    suffix = "…" if right < len(line) else ""
    shown = f"{prefix}{line[left:right]}{suffix}"
    return f"  {shown}\n  {' ' * (len(prefix) + col - left)}^"


def _clip(text: str, width: int = 24) -> str:
    return text if len(text) <= width else text[: width - 1] + "…"
