"""An incremental JSON reader: an answer fed as it streams, each complete value reported once.

    reader = Reader(max_chars=answer_limit(1024), max_depth=MAX_VALUE_DEPTH)
    reader.feed('Here: {"name": "Ad')      # [Opened(())]
    reader.feed('a", "age": 3')            # [Completed(("name",), "Ada")]
    reader.feed('6}')                      # [Completed(("age",), 36), Completed((), {...})]

A value is complete when nothing after it can change it: a string at its closing quote, a
number or literal at the delimiter after it, an object or array at its closing bracket.
Each character is looked at a bounded number of times (strings are scanned by a compiled
pattern and joined once), so the work is linear in the answer's length whatever the
chunking. Prose or a code fence before the first ``{`` or ``[`` is skipped; anything after
the top-level value closes is ignored. What is not JSON (a trailing comma, a Python
literal, a bad escape), a value nested past ``max_depth`` or an answer past ``max_chars``
stops the reader for good (``stopped`` says why): the whole answer is still checked, and
repaired, as every answer is, once the call ends.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from typing import Any, Final, Literal

Path = tuple[str | int, ...]

# A number or literal longer than this is no number a schema means (and is not JSON).
MAX_SCALAR_CHARS: Final = 400
_SPACE: Final = frozenset(" \t\r\n")
_DELIMITERS: Final = frozenset(",}] \t\r\n")
_STRING_STOP: Final = re.compile(r'["\\]')
_SCALAR_START: Final = frozenset("-0123456789tfn")


@dataclass(frozen=True, slots=True)
class Opened:
    """An object or array began at ``path`` (its value is not complete yet)."""

    path: Path
    kind: Literal["object", "array"]


@dataclass(frozen=True, slots=True)
class Completed:
    """The value at ``path`` is complete (for a container: closed, with all it holds)."""

    path: Path
    value: Any


Event = Opened | Completed
_Expect = Literal["value", "key", "colon", "comma"]


@dataclass(slots=True)
class _Frame:
    container: dict[str, Any] | list[Any]
    path: Path
    key: str | None = None  # an object's key waiting for its value
    first: bool = True  # nothing in it yet (a close may come in place of a value/key)


@dataclass(slots=True)
class Reader:
    """Feed text as it arrives; each call returns the values it completed, in order."""

    max_chars: int
    max_depth: int
    stopped: str | None = None  # why no more values will come; None while reading
    done: bool = False  # the top-level value closed
    chars: int = 0
    _started: bool = False
    _stack: list[_Frame] = field(default_factory=list)
    _expect: _Expect = "value"
    _string: list[str] | None = None  # the raw parts of the string being read
    _escape: bool = False  # the string's last part ended in a backslash
    _is_key: bool = False
    _scalar: list[str] | None = None
    _scalar_len: int = 0

    def feed(self, text: str) -> list[Event]:
        """The values ``text`` completed (nothing once stopped or done)."""
        if self.stopped is not None or self.done or not text:
            return []
        self.chars += len(text)
        if self.chars > self.max_chars:
            self.stopped = f"the answer passed {self.max_chars} characters"
            return []
        events: list[Event] = []
        i, end = 0, len(text)
        if not self._started:
            start = _first_bracket(text)
            if start < 0:
                return events
            self._started = True
            i = start
        while i < end and self.stopped is None and not self.done:
            if self._string is not None:
                i = self._in_string(text, i, events)
            elif self._scalar is not None:
                i = self._in_scalar(text, i, events)
            else:
                i = self._token(text, i, events)
        return events

    # -- the states --------------------------------------------------------------------

    def _in_string(self, text: str, i: int, events: list[Event]) -> int:
        parts = self._string
        assert parts is not None
        if self._escape:  # the character after a backslash, split across chunks
            parts.append(text[i])
            self._escape = False
            i += 1
        while True:
            found = _STRING_STOP.search(text, i)
            if found is None:
                parts.append(text[i:])
                return len(text)
            at = found.start()
            if text[at] == "\\":
                if at + 1 >= len(text):
                    parts.append(text[i:])
                    self._escape = True
                    return len(text)
                parts.append(text[i : at + 2])  # \uXXXX: its hex digits hold no quote
                i = at + 2
                continue
            parts.append(text[i:at])
            self._string = None
            try:
                value = json.loads('"' + "".join(parts) + '"', strict=False)
            except ValueError:
                self.stopped = "a string held an escape JSON does not know"
                return at + 1
            if self._is_key:
                self._stack[-1].key = value
                self._expect = "colon"
            else:
                self._value(value, events)
            return at + 1

    def _in_scalar(self, text: str, i: int, events: list[Event]) -> int:
        parts = self._scalar
        assert parts is not None
        j, end = i, len(text)
        while j < end and text[j] not in _DELIMITERS:
            j += 1
        parts.append(text[i:j])
        self._scalar_len += j - i
        if self._scalar_len > MAX_SCALAR_CHARS:
            self.stopped = f"a number or literal passed {MAX_SCALAR_CHARS} characters"
            return end
        if j == end:
            return end  # the delimiter is still to come
        self._scalar = None
        token = "".join(parts)
        try:
            value = json.loads(token)
        except ValueError:
            self.stopped = f"{token[:20]!r} is not a JSON value"
            return j
        if isinstance(value, str | list | dict):  # json.loads read more than a scalar
            self.stopped = f"{token[:20]!r} is not a JSON value"
            return j
        self._value(value, events)
        return j

    def _token(self, text: str, i: int, events: list[Event]) -> int:
        char = text[i]
        if char in _SPACE:
            return i + 1
        expect = self._expect
        if expect == "value":
            return self._value_token(char, i, events)
        if expect == "key":
            if char == '"':
                self._string, self._is_key = [], True
            elif char == "}" and self._stack[-1].first:
                self._close("}", events)
            else:
                self.stopped = f"expected a key, got {char!r}"
        elif expect == "colon":
            if char == ":":
                self._expect = "value"
            else:
                self.stopped = f"expected ':', got {char!r}"
        elif char == ",":
            frame = self._stack[-1]
            self._expect = "key" if isinstance(frame.container, dict) else "value"
            frame.first = False
        elif char in "}]":
            self._close(char, events)
        else:
            self.stopped = f"expected ',' or a closing bracket, got {char!r}"
        return i + 1

    def _value_token(self, char: str, i: int, events: list[Event]) -> int:
        if char == "{" or char == "[":
            self._open(char, events)
        elif char == '"':
            self._string, self._is_key = [], False
        elif char in _SCALAR_START:
            self._scalar, self._scalar_len = [], 0
            return i  # read from here by _in_scalar
        elif char == "]" and self._stack and self._stack[-1].first:
            self._close("]", events)
        else:
            self.stopped = f"expected a value, got {char!r}"
        return i + 1

    # -- values ------------------------------------------------------------------------

    def _open(self, char: str, events: list[Event]) -> None:
        if len(self._stack) >= self.max_depth:
            self.stopped = f"the answer is nested more than {self.max_depth} levels deep"
            return
        path = self._child_path()
        container: dict[str, Any] | list[Any] = {} if char == "{" else []
        self._stack.append(_Frame(container, path))
        events.append(Opened(path, "object" if char == "{" else "array"))
        self._expect = "key" if char == "{" else "value"

    def _close(self, char: str, events: list[Event]) -> None:
        frame = self._stack[-1]
        if (char == "}") != isinstance(frame.container, dict) or frame.key is not None:
            self.stopped = f"{char!r} does not close what is open"
            return
        self._stack.pop()
        self._value(frame.container, events, path=frame.path)

    def _child_path(self) -> Path:
        if not self._stack:
            return ()
        frame = self._stack[-1]
        if isinstance(frame.container, dict):
            assert frame.key is not None
            return (*frame.path, frame.key)
        return (*frame.path, len(frame.container))

    def _value(self, value: Any, events: list[Event], *, path: Path | None = None) -> None:
        """``value`` is complete: put in its parent, reported, and what may come next."""
        if path is None:
            if not self._stack:  # a bare scalar at the top: not an answer we stream
                self.stopped = "the answer is not an object or array"
                return
            path = self._child_path()
        if self._stack:
            frame = self._stack[-1]
            if isinstance(frame.container, dict):
                assert frame.key is not None
                frame.container[frame.key] = value
                frame.key = None
            else:
                frame.container.append(value)
            frame.first = False
            self._expect = "comma"
        else:
            self.done = True
        events.append(Completed(path, value))


def _first_bracket(text: str) -> int:
    """Where the first ``{`` or ``[`` is in ``text``; -1 without one."""
    brace, bracket = text.find("{"), text.find("[")
    if brace < 0:
        return bracket
    if bracket < 0:
        return brace
    return min(brace, bracket)
