"""Client regular expressions (JSON Schema ``pattern``, ``patternProperties``,
``format: regex``, the ``regex`` validator), run in linear time by RE2.

The one module that imports ``re2`` (google-re2). A pattern is written in ECMA-262 syntax,
as JSON Schema says; it is translated to RE2's syntax once, compiled once and cached::

    compiled = compile_pattern("^[A-Z]{3}$")     # raises PatternError naming what is wrong
    compiled.search("USD")                      # True
    compiled.search("x" * 1_000_000)            # linear in the text, whatever the pattern

RE2 never backtracks, so it cannot run the features that need backtracking; these are
refused with ``UnsupportedPattern`` (a ``PatternError``) that says which one:
lookahead ``(?=…)``/``(?!…)``, lookbehind ``(?<=…)``/``(?<!…)``, backreferences ``\\1``
and ``\\k<name>``, atomic groups ``(?>…)``, and conditionals ``(?(…)…)``.

Semantics are ECMA-262's where they differ from RE2's: ``\\s`` (outside a ``[...]`` class
and inside one) is ECMA's whitespace (ASCII whitespace including ``\\v``, U+00A0, U+FEFF,
the Unicode space separators, U+2028 and U+2029) and ``\\S`` outside a class its complement;
``.`` excludes every ECMA line terminator (``\\n``, ``\\r``, U+2028, U+2029). ``\\d``, ``\\w``
and ``\\b`` are ASCII in both. ``$`` is the end of the text (never "before a final newline",
as in Python). ``\\uXXXX``, ``\\u{X…}`` and ``\\cX`` are translated; ``(?<name>…)`` is a named
group. One deviation remains: ``\\S`` inside a class is RE2's (anything but ASCII
whitespace).
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache
from typing import Any, Final

import re2

# The longest pattern a client may send; real schema patterns are far shorter.
MAX_PATTERN_CHARS: Final = 4096
# RE2's memory budget per pattern (its default): bounds the compiled program and the DFA cache.
_MAX_MEM: Final = 8 << 20
# RE2 does the work of a match in about (text bytes x program size) steps at worst (its
# NFA); ``cost`` reports that, divided by this, so callers can charge it to a work budget.
COST_DIVISOR: Final = 256

_ECMA_SPACE: Final = (
    r"\t\n\x0B\f\r \x{A0}\x{1680}\x{2000}-\x{200A}\x{2028}\x{2029}\x{202F}\x{205F}\x{3000}\x{FEFF}"
)
_ECMA_DOT: Final = r"[^\n\r\x{2028}\x{2029}]"
_SIMPLE_ESCAPES: Final = {"d", "D", "w", "W", "f", "n", "r", "t"}
_CONTROL: Final = frozenset("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz")
_HEX: Final = frozenset("0123456789abcdefABCDEF")


class PatternError(ValueError):
    """A pattern that cannot be used: ``reason`` says why, in one line."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


class UnsupportedPattern(PatternError):
    """A valid ECMA-262 pattern that uses a feature RE2 cannot run in linear time."""


@dataclass(frozen=True, slots=True)
class Pattern:
    """A compiled client pattern: ``search`` like JSON Schema's ``pattern`` (unanchored)."""

    source: str
    program_size: int
    _regexp: Any  # re2._Regexp

    def search(self, text: str) -> bool:
        try:
            return self._regexp.search(text) is not None
        except UnicodeEncodeError:
            # RE2 matches UTF-8; a lone surrogate has none. Answers with one are refused
            # before they get here; this keeps any other caller from crashing.
            clean = text.encode("utf-8", "replace").decode("utf-8")
            return self._regexp.search(clean) is not None

    def cost(self, text: str) -> int:
        """The worst-case work of ``search(text)``, in budget steps (see ``COST_DIVISOR``)."""
        return 1 + len(text) * self.program_size // COST_DIVISOR


def compile_pattern(source: str) -> Pattern:
    """The compiled pattern, from a cache; ``PatternError`` says what is wrong with it."""
    compiled, error = _compiled(source)
    if error is not None:
        raise error
    assert compiled is not None
    return compiled


def check_pattern(source: str) -> None:
    """Raise ``PatternError`` unless ``source`` compiles (same cache as ``compile_pattern``)."""
    compile_pattern(source)


def is_regex(text: str) -> bool:
    """``format: regex``: whether ``text`` is an ECMA-262 pattern. A valid pattern that uses
    a feature RE2 refuses still counts; the check never runs a backtracking engine."""
    if len(text) > MAX_PATTERN_CHARS:
        return False  # not worth compiling; no schema of ours could use it either
    try:
        _compile(text)
    except UnsupportedPattern:
        return True
    except PatternError:
        return False
    return True


@lru_cache(maxsize=2048)
def _compiled(source: str) -> tuple[Pattern | None, PatternError | None]:
    try:
        return _compile(source), None
    except PatternError as exc:
        return None, exc


def _compile(source: str) -> Pattern:
    if len(source) > MAX_PATTERN_CHARS:
        raise PatternError(f"the pattern is longer than {MAX_PATTERN_CHARS} characters")
    translated = translate(source)
    options = re2.Options()
    options.log_errors = False
    options.max_mem = _MAX_MEM
    try:
        regexp = re2.compile(translated, options)
    except re2.error as exc:
        raise PatternError(_re2_reason(exc)) from None
    except UnicodeEncodeError:
        raise PatternError("the pattern holds an unpaired surrogate") from None
    return Pattern(source, int(regexp.programsize), regexp)


def _re2_reason(exc: Exception) -> str:
    raw = exc.args[0] if exc.args else str(exc)
    text = raw.decode("utf-8", "replace") if isinstance(raw, bytes) else str(raw)
    if "pattern too large" in text:
        return "the pattern is too large to run in linear time (its compiled form passes 8 MiB)"
    return f"not a valid pattern: {text}"


def translate(source: str) -> str:
    """``source`` (ECMA-262) in RE2's syntax; ``PatternError`` for what cannot be translated."""
    return _Translator(source).run()


class _Translator:
    """One pass over the pattern, tracking only whether it is inside a ``[...]`` class."""

    def __init__(self, source: str) -> None:
        self.source = source
        self.out: list[str] = []
        self.i = 0
        self.in_class = False

    def run(self) -> str:
        source = self.source
        while self.i < len(source):
            char = source[self.i]
            if char == "\\":
                self._escape()
            elif self.in_class:
                self._class_char(char)
            else:
                self._char(char)
        return "".join(self.out)

    def _char(self, char: str) -> None:
        source, i = self.source, self.i
        if char == "[":
            if source.startswith("[^]", i):
                self.out.append(r"(?s:.)")  # ECMA: any character at all
                self.i += 3
                return
            if source.startswith("[]", i):
                self.out.append(r"[^\x00-\x{10FFFF}]")  # ECMA: nothing at all
                self.i += 2
                return
            self.in_class = True
            self.out.append("[^" if source.startswith("[^", i) else "[")
            self.i += 2 if source.startswith("[^", i) else 1
            return
        if char == "(" and source.startswith("(?", i):
            self._group()
            return
        self.out.append(_ECMA_DOT if char == "." else char)
        self.i += 1

    def _class_char(self, char: str) -> None:
        if char == "]":
            self.in_class = False
        elif char == "[":
            char = r"\["  # ECMA: a literal; RE2 would read [:alpha:]
        self.out.append(char)
        self.i += 1

    def _group(self) -> None:
        rest = self.source[self.i + 2 : self.i + 4]
        if rest.startswith(("=", "!")):
            raise UnsupportedPattern("lookahead (?=…) and (?!…) are not supported")
        if rest.startswith(("<=", "<!")):
            raise UnsupportedPattern("lookbehind (?<=…) and (?<!…) are not supported")
        if rest.startswith(">"):
            raise UnsupportedPattern("atomic groups (?>…) are not supported")
        if rest.startswith("("):
            raise UnsupportedPattern("conditionals (?(…)…) are not supported")
        if rest.startswith("P="):
            raise UnsupportedPattern("backreferences (?P=name) are not supported")
        if rest.startswith("<"):
            self.out.append("(?P<")  # ECMA's named group, in RE2's spelling
            self.i += 3
            return
        self.out.append("(?")
        self.i += 2

    def _escape(self) -> None:
        source = self.source
        if self.i + 1 >= len(source):
            raise PatternError("the pattern ends with a lone backslash")
        letter = source[self.i + 1]
        self.i += 2
        if letter in _SIMPLE_ESCAPES or letter in "pP":
            self.out.append("\\" + letter)  # \p{Greek}, \pL: RE2 checks the name
        elif letter in "sSbBv":
            self.out.append(self._class_escape(letter))
        elif letter.isdigit():
            self._digit(letter)
        elif letter == "k" and source.startswith("<", self.i):
            raise UnsupportedPattern("backreferences \\k<name> are not supported")
        elif letter == "c":
            self._control()
        elif letter == "x":
            self._hex(2)
        elif letter == "u":
            self._unicode()
        elif letter.isascii() and letter.isalnum():
            raise PatternError(f"unknown escape \\{letter}")
        else:
            self.out.append(_literal(letter))

    def _class_escape(self, letter: str) -> str:
        """``\\s``, ``\\S``, ``\\b``, ``\\B``, ``\\v`` with ECMA's meaning."""
        if letter == "s":
            return _ECMA_SPACE if self.in_class else f"[{_ECMA_SPACE}]"
        if letter == "S":
            return r"\S" if self.in_class else f"[^{_ECMA_SPACE}]"
        if letter == "v":
            return r"\x0B"
        # Inside a class ECMA's \b is a backspace; RE2 knows no such escape there.
        return r"\x08" if self.in_class and letter == "b" else "\\" + letter

    def _digit(self, digit: str) -> None:
        if digit != "0":
            raise UnsupportedPattern(f"backreferences (\\{digit}) are not supported")
        if self.source[self.i : self.i + 1].isdigit():
            raise UnsupportedPattern("octal escapes (\\0 followed by a digit) are not supported")
        self.out.append(r"\x00")

    def _control(self) -> None:
        letter = self.source[self.i : self.i + 1]
        if not letter or letter not in _CONTROL:
            raise PatternError("\\c must be followed by a letter")
        self.out.append(f"\\x{{{ord(letter) % 32:X}}}")
        self.i += 1

    def _hex(self, width: int) -> None:
        digits = self.source[self.i : self.i + width]
        if len(digits) != width or not set(digits) <= _HEX:
            raise PatternError(f"\\x needs {width} hex digits")
        self.out.append(f"\\x{{{digits}}}")
        self.i += width

    def _unicode(self) -> None:
        source = self.source
        if source.startswith("{", self.i):
            end = source.find("}", self.i)
            digits = source[self.i + 1 : end] if end != -1 else ""
            if not digits or len(digits) > 6 or not set(digits) <= _HEX:
                raise PatternError("\\u{…} needs 1 to 6 hex digits")
            point = int(digits, 16)
            self.i = end + 1
        else:
            point = self._hex4()
            if 0xD800 <= point < 0xDC00 and source.startswith("\\u", self.i):
                self.i += 2
                low = self._hex4()
                if not 0xDC00 <= low < 0xE000:
                    raise PatternError("\\u escapes hold an unpaired surrogate")
                point = 0x10000 + ((point - 0xD800) << 10) + (low - 0xDC00)
        if point > 0x10FFFF or 0xD800 <= point < 0xE000:
            raise PatternError("\\u escape is not a Unicode scalar value (unpaired surrogate?)")
        self.out.append(f"\\x{{{point:X}}}")

    def _hex4(self) -> int:
        digits = self.source[self.i : self.i + 4]
        if len(digits) != 4 or not set(digits) <= _HEX:
            raise PatternError("\\u needs 4 hex digits (or \\u{…})")
        self.i += 4
        return int(digits, 16)


def _literal(char: str) -> str:
    """An escaped character that stands for itself (``\\.``, ``\\/``, ``\\-``)."""
    if char.isascii() and not char.isalnum():
        return "\\" + char
    return f"\\x{{{ord(char):X}}}"
