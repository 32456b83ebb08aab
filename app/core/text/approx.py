"""Approximate substring search: the part of a text closest to a pattern, by edit distance.

    best_match("acme corp", "invoice from acme crop, paid")   # Match(distance=2, start=13, end=22)

Myers' bit-parallel algorithm (1999, in Hyyrö's formulation): the pattern is matched whole,
the text at any substring, in ``len(text) * ceil(len(pattern) / 64)`` machine-word
operations; Python integers carry the bit vectors. Each call charges the work budget
(``app.core.schema.steps``) one step per text character per 64 pattern characters.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

from app.core.schema.steps import charge


@dataclass(frozen=True, slots=True)
class Match:
    distance: int  # Levenshtein distance between the pattern and text[start:end]
    start: int
    end: int


def best_match(pattern: str, text: str) -> Match | None:
    """The substring of ``text`` at the least edit distance from ``pattern``.

    ``None`` for an empty pattern or text. Of equally close ones: the first, as long as it
    stays as close ("acme crop", not "acme cr", for "acme corp"), then the shortest.
    """
    if not pattern or not text:
        return None
    best, end = len(pattern) + 1, 0
    for j, score in enumerate(_scores(pattern, text, anchored=False)):
        if score < best:
            best, end = score, j + 1
        elif score == best and end == j:
            end = j + 1
    # The start: the same search backwards from the end, now anchored there.
    lo = max(0, end - len(pattern) - best)
    backwards = text[lo:end][::-1]
    length = end - lo
    for j, score in enumerate(_scores(pattern[::-1], backwards, anchored=True)):
        if score == best:
            length = j + 1
            break
    return Match(best, end - length, end)


def _scores(pattern: str, text: str, *, anchored: bool) -> Iterator[int]:
    """For each end j in ``text``: the least edit distance between ``pattern`` and a
    substring of ``text`` ending at j (``anchored``: the prefix ``text[:j+1]`` itself)."""
    m = len(pattern)
    charge(1 + len(text) * (1 + m // 64))
    mask = (1 << m) - 1
    high = 1 << (m - 1)
    carry = 1 if anchored else 0
    peq: dict[str, int] = {}
    for i, char in enumerate(pattern):
        peq[char] = peq.get(char, 0) | (1 << i)
    pv, mv, score = mask, 0, m
    for char in text:
        eq = peq.get(char, 0)
        xv = eq | mv
        xh = ((((eq & pv) + pv) & mask) ^ pv) | eq
        ph = mv | (~(xh | pv) & mask)
        mh = pv & xh
        if ph & high:
            score += 1
        elif mh & high:
            score -= 1
        ph = ((ph << 1) | carry) & mask
        mh = (mh << 1) & mask
        pv = mh | (~(xv | ph) & mask)
        mv = ph & xv
        yield score
