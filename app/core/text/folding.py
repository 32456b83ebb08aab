"""Folded text: a text normalized for matching, every offset of which maps back to the original.

    folded = fold_text("ACME  Corp’s café")
    folded.text                       # "acme corp's cafe\u0301"
    folded.original(0, 9)             # (0, 10): "ACME  Corp", in the original's offsets
    fold(" Acme corp ")               # "acme corp": the same folding, for what is looked for

Folding is, per character: compatibility decomposition (NFKD, the equivalence NFKC uses, but
without composing, so that precomposed and combining forms compare equal and each folded
character still comes from one original character), full case folding, common punctuation
and quote variants unified (curly quotes, guillemets, primes, dashes, minus), a few invisible
characters dropped (soft hyphen, zero-width space and joiners, BOM, variation selectors);
then each run of whitespace becomes one space.

A match in the folded text is only a match of whole original characters: it may not begin
or end inside what one character folded to ("ß" is "ss": "s" alone does not match it), nor
end before a combining mark ("cafe" does not match the "café" of "cafe\u0301").
"""

from __future__ import annotations

import re
import unicodedata
from array import array
from bisect import bisect_right
from dataclasses import dataclass
from functools import lru_cache
from typing import Final

from app.core.schema.steps import charge

# Every character Python (and the `re` module's \s) counts as whitespace.
_WHITESPACE: Final = (
    "\t\n\x0b\x0c\r\x1c\x1d\x1e\x1f \x85\xa0\u1680\u2000\u2001\u2002\u2003\u2004\u2005"
    "\u2006\u2007\u2008\u2009\u200a\u2028\u2029\u202f\u205f\u3000"
)
_QUOTES: Final = {
    "'": "\u2018\u2019\u201a\u201b\u2032\u2035\u2039\u203a\u02bc\uff07",
    '"': "\u201c\u201d\u201e\u201f\u2033\u2036\u00ab\u00bb\uff02",
    "-": "\u2010\u2011\u2012\u2013\u2014\u2015\u2212\ufe58\ufe63\uff0d",
}
# Invisible in print; text copied out of PDFs and chat apps carries them at random.
_DROPPED: Final = "\u00ad\u200b\u200c\u200d\u2060\ufeff\ufe0e\ufe0f"
_TABLE: Final[dict[int, str | None]] = {
    **{ord(c): " " for c in _WHITESPACE},
    **{ord(c): plain for plain, variants in _QUOTES.items() for c in variants},
    **{ord(c): None for c in _DROPPED},
}
_ASCII_TABLE: Final = {k: v for k, v in _TABLE.items() if k < 128}
_NON_ASCII: Final = re.compile(r"[^\x00-\x7f]+")
_HAS_DROPPED: Final = re.compile(f"[{_DROPPED}]")
_SPACES: Final = re.compile(" {2,}")
# A scan at C speed (find, translate, a simple regex) costs one step per this many characters.
SCAN_CHARS_PER_STEP: Final = 1024


def fold(text: str) -> str:
    """``text`` folded, without leading or trailing space: the form a needle is looked for in."""
    return _SPACES.sub(" ", _fold_chars(text)).strip(" ")


def _fold_chars(text: str) -> str:
    decomposed = unicodedata.normalize("NFKD", text)
    return unicodedata.normalize("NFKD", decomposed.casefold()).translate(_TABLE)


@lru_cache(maxsize=4096)
def _fold_char(char: str) -> str:
    return _fold_chars(char)


def is_mark(char: str) -> bool:
    """A combining mark (Mn, Mc, Me): it belongs to the character before it."""
    return unicodedata.category(char).startswith("M")


class _Pieces:
    """Where a folded text is not one-to-one with its source.

    (folded start, folded end, source start, source end) of each stretch folded as a
    whole; between them, positions correspond one to one.
    """

    def __init__(self) -> None:
        self.n0, self.n1 = array("q"), array("q")
        self.o0, self.o1 = array("q"), array("q")

    def add(self, n0: int, n1: int, o0: int, o1: int) -> None:
        self.n0.append(n0)
        self.n1.append(n1)
        self.o0.append(o0)
        self.o1.append(o1)

    def start(self, p: int, *, snap: bool) -> int | None:
        """The source offset of folded position ``p`` as a match's start; ``None`` when it
        falls inside a stretch folded as a whole (``snap``: its start instead)."""
        j = bisect_right(self.n1, p)
        if j < len(self.n1) and self.n0[j] <= p:
            return self.o0[j] if p == self.n0[j] or snap else None
        return p if j == 0 else self.o1[j - 1] + (p - self.n1[j - 1])

    def end(self, p: int, *, snap: bool) -> int | None:
        """The source offset just past folded position ``p - 1``, as a match's end."""
        j = bisect_right(self.n1, p - 1)
        if j < len(self.n1) and self.n0[j] <= p - 1:
            return self.o1[j] if p == self.n1[j] or snap else None
        return p if j == 0 else self.o1[j - 1] + (p - self.n1[j - 1])


@dataclass(frozen=True, slots=True)
class FoldedText:
    text: str
    _chars: _Pieces  # folded characters -> source
    _spaces: _Pieces  # collapsed spaces -> folded characters

    def original(self, start: int, end: int, *, snap: bool = False) -> tuple[int, int] | None:
        """The source span of the folded span ``[start, end)``.

        ``None`` when it cuts a character's folding or ends before a combining mark;
        with ``snap``, widened to whole characters instead.
        """
        text = self.text
        while end < len(text) and is_mark(text[end]):
            if not snap:
                return None
            end += 1
        mid_start = self._spaces.start(start, snap=snap)
        mid_end = self._spaces.end(end, snap=snap)
        if mid_start is None or mid_end is None:
            return None
        first = self._chars.start(mid_start, snap=snap)
        last = self._chars.end(mid_end, snap=snap)
        if first is None or last is None:
            return None
        return first, last


def fold_text(text: str) -> FoldedText:
    """``text`` folded, with the map back to it. Linear: C-speed passes, plus a Python step
    per character only in runs holding characters that fold to more or fewer than one."""
    charge(1 + len(text) // SCAN_CHARS_PER_STEP)
    chars = _Pieces()
    if text.isascii():
        folded = text.lower().translate(_ASCII_TABLE)
    else:
        parts: list[str] = []
        at = done = 0  # folded length so far; source consumed so far
        for run in _NON_ASCII.finditer(text):
            start, end = run.span()
            charge(1)
            if start > done:
                ascii_part = text[done:start].lower().translate(_ASCII_TABLE)
                parts.append(ascii_part)
                at += len(ascii_part)
            chunk = _fold_chars(run.group())
            # Every character folds to at least one unless dropped: equal lengths and none
            # dropped means one to one.
            if len(chunk) == end - start and _HAS_DROPPED.search(run.group()) is None:
                parts.append(chunk)
                at += len(chunk)
            else:
                charge(end - start)
                for i in range(start, end):
                    one = _fold_char(text[i])
                    if len(one) != 1:
                        chars.add(at, at + len(one), i, i + 1)
                    parts.append(one)
                    at += len(one)
            done = end
        if done < len(text):
            parts.append(text[done:].lower().translate(_ASCII_TABLE))
        folded = "".join(parts)
    spaces = _Pieces()
    if "  " in folded:
        charge(1 + len(folded) // SCAN_CHARS_PER_STEP)
        parts = []
        done = 0
        at = 0
        for run in _SPACES.finditer(folded):
            start, end = run.span()
            charge(1)
            parts.append(folded[done:start])
            at += start - done
            spaces.add(at, at + 1, start, end)
            parts.append(" ")
            at += 1
            done = end
        parts.append(folded[done:])
        folded = "".join(parts)
    return FoldedText(folded, chars, spaces)
