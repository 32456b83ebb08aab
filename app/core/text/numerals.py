"""Numerals in text: the numbers a written number can mean, and a JSON number's value.

    [(n.start, n.end, n.values) for n in numerals("Total: 1,234.50, SKU-7, -3")]
    # [(7, 15, {Decimal("1234.50")}), (21, 22, {Decimal("7")}), (24, 26, {Decimal("-3")})]
    index = numeral_index("Total: 1,234.50")   # every reading -> its first (start, end)
    index[value_of(1234.5)]                    # (7, 15): 1234.5 == 1234.50

A numeral is a run of digits (any script's decimal digits) with single ``.`` or ``,`` between
groups. It reads as every number one of two conventions allows: ``.`` decimal with ``,``
thousands, or ``,`` decimal with ``.`` thousands (thousands groups of three digits after a
first group of one to three), so ``1,234`` is 1234 or 1.234 and ``45,00`` is 45. A run no
convention reads (``12.03.2024``) is read as its digit groups, each an integer of its own.
A ``-`` or ``−`` right before it is a sign unless a letter or digit comes before that
(``SKU-7`` is 7). Digits right after a letter are part of a name, not a numeral (``alice88``,
``v2``); letters after them are fine (``3kg``). Numerals longer than ``MAX_NUMERAL_CHARS``
are not read.
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterator
from dataclasses import dataclass
from decimal import Decimal
from typing import Any, Final

from app.core.schema.steps import charge

MAX_NUMERAL_CHARS: Final = 64
_NUMERAL: Final = re.compile(r"\d+(?:[.,]\d+)*")
_GROUP: Final = re.compile(r"\d+")
_MINUS: Final = "-\u2212"


@dataclass(frozen=True, slots=True)
class Numeral:
    start: int
    end: int  # exclusive; the sign, when there is one, is inside
    values: frozenset[Decimal]


def numerals(text: str, start: int = 0, end: int | None = None) -> Iterator[Numeral]:
    """Every numeral of ``text`` (of ``text[start:end]``), in order."""
    for found in _NUMERAL.finditer(text, start, len(text) if end is None else end):
        start, end = found.span()
        written = found.group()
        if end - start > MAX_NUMERAL_CHARS or (start > 0 and text[start - 1].isalpha()):
            continue
        negative = (
            start > 0 and text[start - 1] in _MINUS and (start < 2 or not text[start - 2].isalnum())
        )
        begin = start - 1 if negative else start
        values = readings(written)
        if values:
            yield Numeral(begin, end, frozenset(-v if negative else v for v in values))
            continue
        for group in _GROUP.finditer(written):
            a, b = group.span()
            sign = negative and a == 0
            value = Decimal(group.group())
            yield Numeral(
                begin if a == 0 else start + a, start + b, frozenset({-value if sign else value})
            )


def numeral_index(text: str) -> dict[Decimal | int, tuple[int, int]]:
    """Every number the numerals of ``text`` mean, with the first numeral meaning it.

    One step of the work budget per numeral. Plain digit runs are keyed by ``int``, which
    hashes and compares equal to the same ``Decimal``.
    """
    index: dict[Decimal | int, tuple[int, int]] = {}
    count = 0
    for found in _NUMERAL.finditer(text):
        count += 1
        if count % 64 == 0:
            charge(64)
        written = found.group()
        if written.isdigit():
            start, end = found.span()
            if end - start > MAX_NUMERAL_CHARS or (start > 0 and text[start - 1].isalpha()):
                continue
            negative = (
                start > 0
                and text[start - 1] in _MINUS
                and (start < 2 or not text[start - 2].isalnum())
            )
            plain = int(written)
            index.setdefault(-plain if negative else plain, (start - negative, end))
            continue
        for numeral in numerals(text, found.start(), found.end()):
            for value in numeral.values:
                index.setdefault(value, (numeral.start, numeral.end))
    charge(count % 64)
    return index


def readings(written: str) -> set[Decimal]:
    """The numbers ``written`` (digits and separators, no sign) can mean."""
    separators = [c for c in written if c in ".,"]
    if not separators:
        return {Decimal(written)}
    values: set[Decimal] = set()
    for point, thousands in ((".", ","), (",", ".")):
        if separators.count(point) > 1 or (point in separators and separators[-1] != point):
            continue
        whole, _, fraction = written.rpartition(point) if point in separators else (written, "", "")
        groups = whole.split(thousands)
        if len(groups) > 1 and not (
            1 <= len(groups[0]) <= 3 and all(len(g) == 3 for g in groups[1:])
        ):
            continue
        values.add(Decimal("".join(groups) + (f".{fraction}" if fraction else "")))
    return values


def value_of(number: Any) -> Decimal | None:
    """A JSON number's exact value (a float by its shortest repr); ``None`` for anything else,
    booleans and non-finite floats included."""
    if isinstance(number, bool):
        return None
    if isinstance(number, int):
        return Decimal(number)
    if isinstance(number, float) and math.isfinite(number):
        return Decimal(repr(number))
    return None
