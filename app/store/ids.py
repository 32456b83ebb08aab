"""Job ids: ``job_`` + 26 base32 characters, sortable by creation time, not guessable.

job_id = new_job_id()      # "job_01jd8x..."
is_job_id(job_id)          # True
"""

from __future__ import annotations

import re
import secrets
import threading
import time
from typing import Final

JOB_ID_PATTERN: Final = re.compile(r"^job_[0-7][0-9a-hjkmnp-tv-z]{25}$")
# Crockford's base32, lower case: its characters sort in the order of their values.
_ALPHABET: Final = "0123456789abcdefghjkmnpqrstvwxyz"


class _JobIds:
    """48 bits of ms time, 72 random bits, 8 bits of shard number (ULID-like).

    Ids sort by creation time (the list index relies on it) and cannot be guessed. Within one
    millisecond of one process they still increase: the random part grows by a random step
    (up to 2**40) instead of being drawn afresh, so it stays unpredictable.
    """

    _RANDOM_BITS: Final = 72
    _SHARD_BITS: Final = 8

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._last_ms = -1
        self._last_random = 0

    def __call__(self, now_ms: int | None = None, *, shard: int = 0) -> str:
        ms = (int(time.time() * 1000) if now_ms is None else now_ms) & (2**48 - 1)
        with self._lock:
            if ms <= self._last_ms:
                ms = self._last_ms
                random = self._last_random + 1 + secrets.randbits(40)
                if random >= 2**self._RANDOM_BITS:  # practically never: borrow the next ms
                    ms, random = ms + 1, secrets.randbits(self._RANDOM_BITS)
            else:
                random = secrets.randbits(self._RANDOM_BITS)
            self._last_ms, self._last_random = ms, random
        return "job_" + _base32(
            (((ms << self._RANDOM_BITS) | random) << self._SHARD_BITS) | (shard & 0xFF)
        )


new_job_id = _JobIds()


def is_job_id(value: str) -> bool:
    return bool(JOB_ID_PATTERN.match(value))


def shard_of(job_id: str) -> int:
    """The shard number a job id carries (its last 8 bits): the last two characters hold
    them (5 bits each), the ones before only bits 10 and up. Every character after
    ``job_`` must be base32 (``ValueError`` otherwise)."""
    digits = job_id[4:]
    if not _DIGITS.issuperset(digits):
        raise ValueError(f"not a job id: {job_id[:40]!r}")
    value = 0
    for char in digits[-2:]:
        value = value * 32 + _VALUES[char]
    return value & 0xFF


_VALUES: Final = {char: value for value, char in enumerate(_ALPHABET)}
_DIGITS: Final = frozenset(_ALPHABET)


def id_floor(ms: int) -> str:
    """The smallest job id of millisecond ``ms``: ids below it were created before."""
    return "job_" + _base32((ms & (2**48 - 1)) << 80)


# Every pair of base32 characters (10 bits) by value: 13 lookups write an id's 26.
_PAIRS: Final = tuple(a + b for a in _ALPHABET for b in _ALPHABET)


def _base32(n: int) -> str:
    """The 130-bit ``n`` as 26 base32 characters, most significant first."""
    pairs = _PAIRS
    return "".join(
        [
            pairs[(n >> 120) & 1023],
            pairs[(n >> 110) & 1023],
            pairs[(n >> 100) & 1023],
            pairs[(n >> 90) & 1023],
            pairs[(n >> 80) & 1023],
            pairs[(n >> 70) & 1023],
            pairs[(n >> 60) & 1023],
            pairs[(n >> 50) & 1023],
            pairs[(n >> 40) & 1023],
            pairs[(n >> 30) & 1023],
            pairs[(n >> 20) & 1023],
            pairs[(n >> 10) & 1023],
            pairs[n & 1023],
        ]
    )
