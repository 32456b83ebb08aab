"""Grounded extraction: every value an answer extracts must be found in the job's input.

    check = build(ValidatorSpec(kind="grounded", paths=["$.vendor", "$.lines[*].sku"]),
                  "validators[0]", "Invoice from ACME: H-1 x2, H-2 x1")
    check.check({"vendor": "Acme", "lines": [{"sku": "H-7"}]})
    # (False, '$.lines[0].sku: "H-7" is not in the input; closest: "H-1"')
    value = {"vendor": "Acme", "lines": [{"sku": "H-1"}]}
    check.check(value)   # (True, None)
    check.spans(value)   # (GroundingSpan(path="$.vendor", start=13, end=17),
                         #  GroundingSpan(path="$.lines[0].sku", start=19, end=22))

**What is searched.** A string input is searched as it is: it is the text the model was
shown. A JSON input is searched string by string, each as its decoded text (not its JSON
escapes), never across two strings; object keys are not searched. A span's ``start`` and
``end`` count Unicode code points into the input string, or, for a JSON input, into the
string at the span's ``inputPath``.

**What is checked.** Every string reached by ``paths`` (containers are walked to their
leaves), and with ``numbers: true`` every number; empty strings, booleans and nulls are not.

- ``exact``: the string is a substring of the input (code point for code point);
- ``normalized`` (the default): the same after folding both (``app.core.text.folding``: NFKC
  equivalence, case folding, quote and dash variants, whitespace runs); the span is the
  original text that matched;
- ``fuzzy``: the folded string, or the substring of the folded input closest to it, with a
  similarity ``1 - distance / len(value)`` (Levenshtein, over folded text) of at least
  ``threshold`` (default 0.85). Candidates are windows around exact hits of pieces of the
  value (with k edits allowed, one of k + 1 pieces is intact), at most ``MAX_WINDOWS`` per
  value: a best effort, bounded whatever the input.

A number is found when a numeral of the input means it (``app.core.text.numerals``: 45 is
"45", "45.0" or "45,00"; 1234.5 is "1,234.50") or, in a JSON input, a number equal to it.

**Bounded.** The check charges the work budget (``app.core.schema.steps``) for every scan; it is
granted a step per ``INPUT_CHARS_PER_STEP`` characters of input on top of the answer's own, so
a hostile answer or input ends in ``TooMuchWork`` rather than a busy worker. Folding and the
numeral index are built once per job, on first use. Checks over a large input run in a thread.
"""

from __future__ import annotations

import asyncio
import json
import math
import unicodedata
from array import array
from bisect import bisect_right
from collections.abc import Awaitable, Iterator
from dataclasses import dataclass
from decimal import Decimal
from typing import Any, Final

from app.core.answer.finding import Finding
from app.core.schema import jsonpath
from app.core.schema.steps import charge, grant
from app.core.schema.validation import json_path
from app.core.text.approx import best_match
from app.core.text.folding import SCAN_CHARS_PER_STEP, FoldedText, fold, fold_text
from app.core.text.numerals import numeral_index, value_of
from app.core.wire.envelope import GroundingSpan
from app.core.wire.errors import InvalidInput
from app.core.wire.spec import ValidatorSpec

Path = tuple[str | int, ...]

DEFAULT_MODE: Final = "normalized"
DEFAULT_THRESHOLD: Final = 0.85
# A diagnosis names this many missing values, then says how many more there are.
MAX_LINES: Final = 8
# The closest text is quoted when at least this similar (folded, by edit distance).
CLOSEST_AT_LEAST: Final = 0.5
# Longer values are matched folded only, never approximately.
FUZZY_MAX_CHARS: Final = 2_000
MAX_PIECES: Final = 16
MAX_WINDOWS: Final = 64
WINDOW_CHARS: Final = 50_000  # fewer windows for long values: about this many characters
INPUT_CHARS_PER_STEP: Final = 2
THREAD_ABOVE_CHARS: Final = 65_536
_CACHED: Final = 10_000  # values looked up per job, remembered across its turns
_SEPARATOR: Final = "\x00"  # between the strings of a JSON input: never inside a match
_WIDEN: Final = 24  # a quoted closest text is widened to whole words by at most this


def build(spec: ValidatorSpec, where: str, job_input: Any) -> Grounded:
    """A grounded validator over ``job_input``; a malformed spec, or no input, names
    ``where`` (``validators[i]``) or its field."""
    if spec.paths is None:
        raise InvalidInput(f"{where}.paths: required for kind 'grounded'", field=f"{where}.paths")
    paths = tuple(
        (text, jsonpath.parse(text, field=f"{where}.paths[{i}]"))
        for i, text in enumerate(spec.paths)
    )
    mode = spec.mode or DEFAULT_MODE
    if spec.threshold is not None and mode != "fuzzy":
        raise InvalidInput(
            f"{where}.threshold: applies to mode 'fuzzy' only, not {mode!r}",
            field=f"{where}.threshold",
        )
    if job_input is None:
        raise InvalidInput(
            f"{where}: a grounded check looks for the answer's values in the job's input, "
            "and this job has no input",
            field=where,
        )
    threshold = DEFAULT_THRESHOLD if spec.threshold is None else float(spec.threshold)
    return Grounded(
        paths=tuple(steps for _, steps in paths),
        mode=mode,
        threshold=threshold,
        numbers=spec.numbers,
        message=spec.message,
        job_input=job_input,
    )


@dataclass(frozen=True, slots=True)
class _Hit:
    """Where a value was found: offsets into one string of the input (``string``), or a
    number of a JSON input (``number_at``, offsets into its JSON text)."""

    start: int
    end: int
    string: int = 0
    number_at: Path | None = None


@dataclass(frozen=True, slots=True)
class _Near:
    similarity: float
    hit: _Hit


class Grounded:
    """A ``grounded`` validator: ``check(value)`` its finding, ``spans(value)`` the evidence.

    Called inside an event loop, it checks in a worker thread (an awaitable) when the
    input is large, or not yet measured.
    """

    def __init__(
        self,
        *,
        paths: tuple[tuple[jsonpath.Step, ...], ...],
        mode: str,
        threshold: float,
        numbers: bool,
        message: str | None,
        job_input: Any,
    ) -> None:
        self.paths = paths
        self.mode = mode
        self.threshold = threshold
        self.numbers = numbers
        self.message = message
        self._input = job_input
        self._source: _Source | None = None
        self._found: dict[tuple[str, Any], _Hit | None] = {}
        self._passed: tuple[Any, tuple[GroundingSpan, ...]] | None = None

    def __call__(self, value: Any) -> Finding | Awaitable[Finding]:
        if self._small() or not _in_event_loop():
            return self.check(value)
        return asyncio.to_thread(self.check, value)

    def _small(self) -> bool:
        if self._source is not None:
            return self._source.size <= THREAD_ABOVE_CHARS
        return isinstance(self._input, str) and len(self._input) <= THREAD_ABOVE_CHARS

    def check(self, value: Any) -> Finding:
        """``(True, None)`` when every value is found, else ``(False, diagnosis)``."""
        self._passed = None
        source = self._load()
        grant(source.size // INPUT_CHARS_PER_STEP)
        spans: dict[str, GroundingSpan] = {}
        missing: list[tuple[Path, Any]] = []
        for steps in self.paths:
            for at, leaf in self._leaves(value, steps):
                hit = self._lookup(source, leaf)
                if hit is None:
                    missing.append((at, leaf))
                elif isinstance(hit, _Hit):
                    path = json_path(at)
                    spans[path] = GroundingSpan(
                        path=path, start=hit.start, end=hit.end, input_path=source.path_of(hit)
                    )
        if not missing:
            self._passed = (value, tuple(spans.values()))
            return True, None
        lines = [self._line(source, at, leaf) for at, leaf in missing[:MAX_LINES]]
        if len(missing) > MAX_LINES:
            lines.append(f"... and {len(missing) - MAX_LINES} more")
        detail = "\n".join(lines)
        return False, f"{self.message}:\n{detail}" if self.message else detail

    def spans(self, value: Any) -> tuple[GroundingSpan, ...]:
        """Where the input holds each checked value of ``value`` (checked again unless it is
        the value this validator passed last); empty when it does not pass."""
        if self._passed is None or self._passed[0] is not value:
            self.check(value)
        return () if self._passed is None else self._passed[1]

    def leaf(self, at: Path, value: Any) -> bool | None:
        """Whether one complete value of a streaming answer is in the input (a partial's
        check, ``app.core.answer.partial``); None when this validator does not look at it,
        or cannot say quickly (a large input: the whole answer is checked at the end)."""
        if not any(_under(at, steps) for steps in self.paths):
            return None
        if isinstance(value, dict | list):
            return None  # its leaves were checked one by one as they came
        if not (isinstance(value, str) or (self.numbers and value_of(value) is not None)):
            return None
        if not self._small():
            return False  # not shown early; the check at the end decides
        source = self._load()
        return self._lookup(source, value) is not None

    # -- the values ---------------------------------------------------------------------------

    def _leaves(self, value: Any, steps: tuple[jsonpath.Step, ...]) -> Iterator[tuple[Path, Any]]:
        """The strings (and numbers) at the path, containers walked, in document order."""
        stack = list(reversed(jsonpath.locate(value, steps)))
        while stack:
            at, item = stack.pop()
            charge(1)
            if isinstance(item, dict):
                stack.extend(reversed([((*at, k), v) for k, v in item.items()]))
            elif isinstance(item, list):
                stack.extend(reversed([((*at, i), v) for i, v in enumerate(item)]))
            elif isinstance(item, str) or (self.numbers and value_of(item) is not None):
                yield at, item

    def _lookup(self, source: _Source, leaf: Any) -> _Hit | _Skip | None:
        key = ("s", leaf) if isinstance(leaf, str) else ("n", value_of(leaf))
        if key in self._found:
            return self._found[key]
        if isinstance(leaf, str):
            needle = leaf if self.mode == "exact" else fold(leaf)
            if not needle:
                return _SKIP
            found = self._find(source, needle)
        else:
            number = value_of(leaf)
            assert number is not None  # _leaves yields no other numbers
            found = source.number(number)
        if len(self._found) >= _CACHED:
            self._found.clear()
        self._found[key] = found
        return found

    def _find(self, source: _Source, needle: str) -> _Hit | None:
        if self.mode == "exact":
            return source.exact(needle)
        found = source.folded_exact(needle)
        if found is not None or self.mode != "fuzzy" or len(needle) > FUZZY_MAX_CHARS:
            return found
        edits = math.floor((1 - self.threshold) * len(needle) + 1e-9)
        near = source.nearest(needle, edits) if edits else None
        return near.hit if near is not None and near.similarity >= self.threshold else None

    # -- the diagnosis ------------------------------------------------------------------------

    def _line(self, source: _Source, at: Path, leaf: Any) -> str:
        line = f"{json_path(at)}: {_show(leaf)} is not in the input"
        if not isinstance(leaf, str):
            return line
        needle = fold(leaf)
        if not 2 <= len(needle) <= FUZZY_MAX_CHARS:
            return line
        near = source.nearest(needle, max(1, len(needle) // 2))
        if near is None or near.similarity < CLOSEST_AT_LEAST:
            return line
        line += f"; closest: {_show(source.quote(near.hit))}"
        if self.mode == "fuzzy":
            line += f" ({near.similarity:.0%} similar, {self.threshold:.0%} needed)"
        return line

    def _load(self) -> _Source:
        if self._source is None:
            self._source = _Source(self._input)
        return self._source


class _Skip:
    """A value there is nothing to look for (empty once folded)."""


_SKIP: Final = _Skip()


class _Source:
    """The job's input as searched, folded and indexed on first use.

    Its strings joined by ``_SEPARATOR`` (one for a string input), where each starts and
    its path, and a JSON input's numbers.
    """

    def __init__(self, job_input: Any) -> None:
        self.numbers: dict[Decimal, tuple[Path, int]] = {}
        if isinstance(job_input, str):
            self.text = job_input
            self.starts = array("q", [0])
            self.paths: list[Path] | None = None
        else:
            strings: list[str] = []
            self.paths = []
            stack: list[tuple[Path, Any]] = [((), job_input)]
            while stack:
                at, node = stack.pop()
                if isinstance(node, str):
                    strings.append(node)
                    self.paths.append(at)
                elif isinstance(node, dict):
                    stack.extend(reversed([((*at, k), v) for k, v in node.items()]))
                elif isinstance(node, list):
                    stack.extend(reversed([((*at, i), v) for i, v in enumerate(node)]))
                else:
                    number = value_of(node)
                    if number is not None:
                        self.numbers.setdefault(number, (at, len(json.dumps(node))))
            self.text = _SEPARATOR.join(strings)
            self.starts = array("q")
            at_char = 0
            for string in strings:
                self.starts.append(at_char)
                at_char += len(string) + 1
            if not strings:
                self.starts.append(0)
        self.size = len(self.text) + len(self.numbers)
        self._folded: FoldedText | None = None
        self._numerals: dict[Decimal | int, tuple[int, int]] | None = None

    def place(self, start: int, end: int) -> _Hit | None:
        """``[start, end)`` of the joined text as a span of one input string; ``None`` when
        it crosses from one string to the next."""
        i = bisect_right(self.starts, start) - 1
        first = self.starts[i]
        last = self.starts[i + 1] - 1 if i + 1 < len(self.starts) else len(self.text)
        if end > last:
            return None
        return _Hit(start - first, end - first, i)

    def path_of(self, hit: _Hit) -> str | None:
        """The span's ``inputPath``: none for a string input."""
        if hit.number_at is not None:
            return json_path(hit.number_at)
        return None if self.paths is None else json_path(self.paths[hit.string])

    def quote(self, hit: _Hit) -> str:
        """The text of ``hit`` widened to whole words (by at most ``_WIDEN`` characters a
        side, punctuation the widening reached left out): "QX-17" rather than "QX-1"."""
        text, first = self.text, self.starts[hit.string]
        start, end = first + hit.start, first + hit.end
        lo, hi = start, end
        while lo > first and start - lo < _WIDEN and not _is_break(text[lo - 1]):
            lo -= 1
        while hi < len(text) and hi - end < _WIDEN and not _is_break(text[hi]):
            hi += 1
        while lo < start and _is_punctuation(text[lo]):
            lo += 1
        while hi > end and _is_punctuation(text[hi - 1]):
            hi -= 1
        return text[lo:hi]

    def exact(self, needle: str) -> _Hit | None:
        text, at = self.text, 0
        while True:
            hit = _find(text, needle, at)
            if hit < 0:
                return None
            placed = self.place(hit, hit + len(needle))
            if placed is not None:
                return placed
            at = hit + 1

    def folded_exact(self, needle: str) -> _Hit | None:
        folded = self.folded()
        text, at = folded.text, 0
        while True:
            hit = _find(text, needle, at)
            if hit < 0:
                return None
            span = folded.original(hit, hit + len(needle))
            placed = None if span is None else self.place(*span)
            if placed is not None:
                return placed
            at = hit + 1

    def nearest(self, needle: str, edits: int) -> _Near | None:
        """The closest text to ``needle`` (folded) among windows around exact hits of its
        pieces: with at most ``edits`` edits one of ``edits + 1`` pieces is intact."""
        folded = self.folded()
        text, m = folded.text, len(needle)
        count = max(1, min(edits + 1, MAX_PIECES, m))
        size = m // count
        pieces = [
            (i * size, needle[i * size : (i + 1) * size if i < count - 1 else m])
            for i in range(count)
        ]
        cap = max(2, min(MAX_WINDOWS, WINDOW_CHARS // (m + 2 * edits)))
        windows: list[tuple[int, int]] = []
        after = [0] * count
        live = list(range(count))
        while live and len(windows) < cap:
            for i in list(live):
                offset, piece = pieces[i]
                hit = _find(text, piece, after[i])
                if hit < 0:
                    live.remove(i)
                    continue
                after[i] = hit + 1
                lo = max(hit - offset - edits, 0)
                hi = min(hit - offset + m + edits, len(text))
                # A window stays within the string its hit is in.
                lo = max(lo, text.rfind(_SEPARATOR, lo, hit) + 1)
                end = text.find(_SEPARATOR, hit, hi)
                windows.append((lo, hi if end < 0 else end))
                if len(windows) >= cap:
                    break
        best: tuple[int, int, int] | None = None  # distance, start, end
        for lo, hi in _merged(windows):
            match = best_match(needle, text[lo:hi])
            if match is not None and (best is None or match.distance < best[0]):
                best = (match.distance, lo + match.start, lo + match.end)
        if best is None:
            return None
        span = folded.original(best[1], best[2], snap=True)
        placed = None if span is None else self.place(*span)
        if placed is None:
            return None
        return _Near(max(0.0, 1 - best[0] / m), placed)

    def number(self, number: Decimal) -> _Hit | None:
        if number in self.numbers:
            at, length = self.numbers[number]
            return _Hit(0, length, number_at=at)
        if self._numerals is None:
            charge(1 + len(self.text) // SCAN_CHARS_PER_STEP)
            self._numerals = numeral_index(self.text)
        span = self._numerals.get(number)
        return None if span is None else self.place(*span)

    def folded(self) -> FoldedText:
        if self._folded is None:
            self._folded = fold_text(self.text)
        return self._folded


def _under(at: Path, steps: tuple[jsonpath.Step, ...]) -> bool:
    """Whether the concrete path ``at`` is at or below a value ``steps`` reaches (a negative
    index is taken to reach any element: such a value is held back rather than missed)."""
    if len(at) < len(steps):
        return False
    for step, part in zip(steps, at, strict=False):
        if step is None:
            continue
        if isinstance(step, int):
            if not isinstance(part, int) or (step >= 0 and step != part):
                return False
        elif step != part:
            return False
    return True


def _in_event_loop() -> bool:
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return False
    return True


def _is_break(char: str) -> bool:
    return char.isspace() or char == _SEPARATOR


def _is_punctuation(char: str) -> bool:
    return unicodedata.category(char).startswith("P")


def _find(text: str, needle: str, at: int) -> int:
    """``text.find(needle, at)``, charged for the characters it scanned."""
    hit = text.find(needle, at)
    scanned = (len(text) if hit < 0 else hit + len(needle)) - at
    charge(1 + scanned // SCAN_CHARS_PER_STEP)
    return hit


def _merged(windows: list[tuple[int, int]]) -> list[tuple[int, int]]:
    merged: list[tuple[int, int]] = []
    for lo, hi in sorted(windows):
        if merged and lo <= merged[-1][1]:
            merged[-1] = (merged[-1][0], max(merged[-1][1], hi))
        else:
            merged.append((lo, hi))
    return merged


def _show(value: Any) -> str:
    text = json.dumps(value, ensure_ascii=False)
    return text if len(text) <= 60 else text[:57] + "..."
