"""A cut-off answer that was looping when the output limit cut it: more room buys more loop.

    looping('{"values": [1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14,')   # True
    looping('{"a": "x", "b": [{"s": ":", "n": 1}, {"s": ":", "n": 1}, {"s": ":", "n": 1}')
    # True: the same part over and over
    looping('{"name": "Alice Moreau", "bio": "Born in Lyon, she')           # False

The test is on the answer's tail with every run of digits read as one digit, so a model
that counts (``1, 2, 3, ...``) loops as surely as one that copies the same item again: the
tail is one short unit repeated at least ``MIN_REPEATS`` times and covers at least a third
of the answer. A long answer that is merely cut short does not loop.
"""

from __future__ import annotations

import re
from typing import Final

MIN_REPEATS: Final = 3
# A longer repeating unit is not a loop a short re-ask can break; it is not looked for.
MAX_UNIT_CHARS: Final = 160
# Only the end of an answer is read: a loop that reached the limit fills it.
TAIL_CHARS: Final = 4000
_DIGITS = re.compile(r"[0-9]+")


def looping(text: str) -> bool:
    """Whether ``text`` ends in a loop (see the module docstring)."""
    tail = _DIGITS.sub("0", text[-TAIL_CHARS:])
    n = len(tail)
    if n < 2 * MIN_REPEATS:
        return False
    for unit in range(1, min(MAX_UNIT_CHARS, n // MIN_REPEATS) + 1):
        run = unit  # the periodic suffix: its last ``unit`` characters, and as far back as
        while run < n and tail[n - 1 - run] == tail[n - 1 - run + unit]:  # they repeat
            run += 1
        if run >= MIN_REPEATS * unit and run * 3 >= n:
            return True
    return False
