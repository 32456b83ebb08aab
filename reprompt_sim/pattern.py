"""Strings that match a regular expression, for JSON Schema ``pattern``.

Parses the common subset of regex syntax (literals and escapes, ``.``, classes, groups,
``|``, quantifiers, anchors) and builds a string from the tree::

    example("^[A-Z]{3}-\\d{4}$", random.Random(1))   # e.g. "QXT-0472"

Returns ``None`` for constructs it cannot honour (look-arounds, back-references, inline
flags); the caller then falls back and lets validation decide. Every string returned has
been checked with ``re.search``.
"""

from __future__ import annotations

import random
import re
import string
from dataclasses import dataclass
from typing import Final

_CATEGORIES: Final = {
    "d": string.digits,
    "D": string.ascii_letters,
    "w": string.ascii_letters + string.digits + "_",
    "W": " -.,;",
    "s": " ",
    "S": string.ascii_letters + string.digits,
}
_CONTROLS: Final = {"n": "\n", "t": "\t", "r": "\r", "f": "\f", "v": "\v", "a": "\a"}
_ANCHORS: Final = frozenset("bBAZ")
_PRINTABLE: Final = string.ascii_letters + string.digits
_UNBOUNDED_EXTRA: Final = 3
_RANGE_MAX: Final = 200  # characters of one class range offered, from its low end
_REPEAT_MAX: Final = 1000  # a larger least count is not honoured
_FLAGS: Final = re.compile(r"[aiLmsux]+(-[imsx]+)?[:)]|-[imsx]+:")
_BOUND: Final = re.compile(r"\{\d*(,\d*)?\}")


class _Unsupported(Exception):
    pass


@dataclass(frozen=True, slots=True)
class _Literal:
    char: str


@dataclass(frozen=True, slots=True)
class _Class:
    choices: tuple[str, ...]


@dataclass(frozen=True, slots=True)
class _Repeat:
    low: int
    high: int | None  # None: unbounded
    body: tuple[_Node, ...]


@dataclass(frozen=True, slots=True)
class _Branch:
    options: tuple[tuple[_Node, ...], ...]


@dataclass(frozen=True, slots=True)
class _Anchor:
    pass


_Node = _Literal | _Class | _Repeat | _Branch | _Anchor | tuple["_Node", ...]


def example(pattern: str, rnd: random.Random) -> str | None:
    """A string that ``re.search(pattern, ...)`` accepts, or ``None`` if none was found."""
    try:
        candidate = _emit(_Parser(pattern).parse(), rnd)
        return candidate if re.search(pattern, candidate) else None
    except (_Unsupported, re.error, RecursionError):
        return None


def _emit(nodes: tuple[_Node, ...], rnd: random.Random) -> str:
    return "".join(_emit_one(node, rnd) for node in nodes)


def _emit_one(node: _Node, rnd: random.Random) -> str:
    if isinstance(node, _Literal):
        return node.char
    if isinstance(node, _Class):
        return rnd.choice(node.choices)
    if isinstance(node, _Repeat):
        top = node.low + _UNBOUNDED_EXTRA if node.high is None else node.high
        count = rnd.randint(node.low, max(node.low, min(top, node.low + _UNBOUNDED_EXTRA)))
        return "".join(_emit(node.body, rnd) for _ in range(count))
    if isinstance(node, _Branch):
        return _emit(rnd.choice(node.options), rnd)
    if isinstance(node, _Anchor):
        return ""
    return _emit(node, rnd)  # a group


class _Parser:
    """Recursive descent over one pattern; raises ``_Unsupported`` where it gives up."""

    def __init__(self, pattern: str) -> None:
        self.text = pattern
        self.at = 0

    def parse(self) -> tuple[_Node, ...]:
        tree = self._alternation()
        if self.at != len(self.text):  # an unbalanced ")"
            raise _Unsupported("unbalanced parenthesis")
        return tree

    def _peek(self, ahead: int = 0) -> str:
        index = self.at + ahead
        return self.text[index] if index < len(self.text) else ""

    def _take(self) -> str:
        char = self._peek()
        if not char:
            raise _Unsupported("unexpected end")
        self.at += 1
        return char

    def _alternation(self) -> tuple[_Node, ...]:
        options = [self._sequence()]
        while self._peek() == "|":
            self.at += 1
            options.append(self._sequence())
        if len(options) == 1:
            return options[0]
        return (_Branch(tuple(options)),)

    def _sequence(self) -> tuple[_Node, ...]:
        nodes: list[_Node] = []
        while self._peek() not in ("", "|", ")"):
            atom = self._atom()
            nodes.append(self._quantified(atom))
        return tuple(nodes)

    def _atom(self) -> _Node:
        char = self._take()
        if char == "(":
            return self._group()
        if char == "[":
            return self._class()
        if char == ".":
            return _Class(tuple(_PRINTABLE))
        if char in "^$":
            return _Anchor()
        if char == "\\":
            return self._escape(in_class=False)
        if char in "*+?" or (char == "{" and self._bound_ahead(self.at - 1)):
            raise _Unsupported("nothing to repeat")
        return _Literal(char)

    def _group(self) -> _Node:
        if self._peek() == "?":
            self.at += 1
            flags = _FLAGS.match(self.text, self.at)
            if flags is not None:  # (?i) or (?i:...): the flags are re.search's to apply
                self.at = flags.end()
                if self.text[self.at - 1] == ")":
                    return ()
            else:
                kind = self._take()
                if kind == "P" and self._peek() == "<":
                    self.at += 1
                    self._name()
                elif kind == "<" and self._peek() not in ("=", "!"):
                    self._name()
                elif kind not in (":", ">"):  # look-arounds, comments, (?P=name)
                    raise _Unsupported(f"(?{kind}")
        body = self._alternation()
        if self._take() != ")":
            raise _Unsupported("unbalanced parenthesis")
        return body

    def _name(self) -> None:
        end = self.text.find(">", self.at)
        if end < 0:
            raise _Unsupported("unterminated group name")
        self.at = end + 1

    def _escape(self, *, in_class: bool) -> _Node:
        char = self._take()
        if char in _CATEGORIES:
            return _Class(tuple(_CATEGORIES[char]))
        if char in _CONTROLS:
            return _Literal(_CONTROLS[char])
        if char in "xuU":
            width = {"x": 2, "u": 4, "U": 8}[char]
            digits = self.text[self.at : self.at + width]
            if len(digits) != width or not all(d in string.hexdigits for d in digits):
                raise _Unsupported(f"\\{char}")
            self.at += width
            return _Literal(chr(int(digits, 16)))
        if char in _ANCHORS and not in_class:
            return _Anchor()
        if char.isalnum():  # back-references, \0, \N{...}, \b in a class, unknown letters
            raise _Unsupported(f"\\{char}")
        return _Literal(char)

    def _class(self) -> _Node:
        negate = self._peek() == "^"
        if negate:
            self.at += 1
        # (whether the item is one plain character, the characters it offers)
        items: list[tuple[bool, tuple[str, ...]]] = []
        first = True
        while True:
            char = self._take()
            if char == "]" and not first:
                break
            first = False
            if char == "\\":
                escaped = self._escape(in_class=True)
                if isinstance(escaped, _Class):
                    items.append((False, escaped.choices))
                    continue
                assert isinstance(escaped, _Literal)
                char = escaped.char
            if self._peek() == "-" and self._peek(1) not in ("]", ""):
                self.at += 1
                items.append((False, self._range(char)))
            else:
                items.append((True, (char,)))
        items = list(dict.fromkeys(items))  # the same item twice counts once
        choices = [choice for _, item in items for choice in item]
        if negate:
            excluded = set(choices)
            choices = [c for c in _PRINTABLE if c not in excluded]
        elif len(items) == 1 and items[0][0]:
            return _Literal(choices[0])
        if not choices:
            raise _Unsupported("empty class")
        return _Class(tuple(choices))

    def _range(self, low: str) -> tuple[str, ...]:
        high = self._take()
        if high == "\\":
            escaped = self._escape(in_class=True)
            if not isinstance(escaped, _Literal):
                raise _Unsupported("a range to a category")
            high = escaped.char
        if ord(high) < ord(low):
            raise _Unsupported("bad character range")
        top = min(ord(high), ord(low) + _RANGE_MAX)
        return tuple(chr(c) for c in range(ord(low), top + 1))

    def _bound_ahead(self, start: int) -> bool:
        """Whether ``{n}``, ``{n,}``, ``{,m}`` or ``{n,m}`` starts at ``start``."""
        bound = _BOUND.match(self.text, start)
        return bound is not None and bound.group() != "{}"

    def _quantified(self, atom: _Node) -> _Node:
        char = self._peek()
        if char in ("*", "+", "?"):
            self.at += 1
            low, high = {"*": (0, None), "+": (1, None), "?": (0, 1)}[char]
        elif char == "{" and self._bound_ahead(self.at):
            end = self.text.index("}", self.at)
            low_text, comma, high_text = self.text[self.at + 1 : end].partition(",")
            self.at = end + 1
            low = int(low_text or 0)
            high = (int(high_text) if high_text else None) if comma else low
            if high is not None and high < low:
                raise _Unsupported("min repeat greater than max repeat")
            if low > _REPEAT_MAX:
                raise _Unsupported("a repeat too large to write out")
        else:
            return atom
        if self._peek() in ("?", "+"):  # lazy or possessive: the same strings match
            self.at += 1
        if self._peek() in ("*", "+", "?") or (self._peek() == "{" and self._bound_ahead(self.at)):
            raise _Unsupported("multiple repeat")
        body = atom if isinstance(atom, tuple) else (atom,)
        return _Repeat(low, high, body)
