"""Numbers written in English words: "twelve", "forty-five", "two thousand and six".

    sorted(word_numbers("a dozen eggs, twelve thousand three hundred forty-five kg"))
    # [Decimal("12"), Decimal("12345")]

Every maximal run of number words is read as one number (``hundred``/``thousand``/
``million`` multiply what comes before); ``a dozen`` and ``dozen`` are 12, ``a couple`` 2,
``half`` is not read. Each word of a run is also read alone ("three hundred" means 300,
and its "three" is 3 too), so a value the text states in part is still found. Linear in
the text; runs are capped at ``MAX_RUN_WORDS`` words.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from decimal import Decimal
from typing import Final

_UNITS: Final = {
    "zero": 0, "one": 1, "two": 2, "three": 3, "four": 4, "five": 5, "six": 6, "seven": 7,
    "eight": 8, "nine": 9, "ten": 10, "eleven": 11, "twelve": 12, "thirteen": 13,
    "fourteen": 14, "fifteen": 15, "sixteen": 16, "seventeen": 17, "eighteen": 18,
    "nineteen": 19, "twenty": 20, "thirty": 30, "forty": 40, "fifty": 50, "sixty": 60,
    "seventy": 70, "eighty": 80, "ninety": 90, "dozen": 12, "single": 1, "once": 1,
    "twice": 2, "couple": 2, "pair": 2, "first": 1, "second": 2, "third": 3, "fourth": 4,
    "fifth": 5,
}  # fmt: skip
_SCALES: Final = {"hundred": 100, "thousand": 1_000, "million": 1_000_000, "billion": 10**9}
_WORD: Final = re.compile(r"[A-Za-z]+")
MAX_RUN_WORDS: Final = 16


def word_numbers(text: str) -> set[Decimal]:
    """Every number the English number words of ``text`` state (see the module docstring)."""
    found: set[Decimal] = set()
    for run in _runs(text):
        found.update(Decimal(_UNITS.get(w, _SCALES.get(w, 0))) for w in run)
        found.add(Decimal(_value(run)))
    return found


def _runs(text: str) -> Iterator[list[str]]:
    run: list[str] = []
    last_end = -1
    for match in _WORD.finditer(text):
        word = match.group().lower()
        joined = last_end >= 0 and text[last_end : match.start()].strip(" -") == ""
        if word in _UNITS or word in _SCALES:
            if run and (not joined or len(run) >= MAX_RUN_WORDS):
                yield run
                run = []
            run.append(word)
            last_end = match.end()
        elif word == "and" and run and joined:
            last_end = match.end()
        elif run:
            yield run
            run = []
            last_end = -1
    if run:
        yield run


def _value(run: list[str]) -> int:
    total = current = 0
    for word in run:
        if word in _UNITS:
            current += _UNITS[word]
        elif word == "hundred":
            current = max(current, 1) * 100
        else:
            total += max(current, 1) * _SCALES[word]
            current = 0
    return total + current
