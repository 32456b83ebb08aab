"""Seeded chance: every random choice the simulator makes derives from the seed and a key.

Python's ``hash`` is salted per process, so keys go through SHA-256 instead::

    roll(7, digest, "fix") < 0.8          # the same on every run
    rng(7, "instance", task).randint(1, 9)
"""

from __future__ import annotations

import hashlib
import random


def digest(*parts: object) -> str:
    """A stable hex digest of ``parts`` (their ``repr``), for keys and ids."""
    h = hashlib.sha256()
    for part in parts:
        h.update(repr(part).encode())
        h.update(b"\x1f")
    return h.hexdigest()


def roll(seed: int, *key: object) -> float:
    """A uniform number in [0, 1) fixed by ``seed`` and ``key``."""
    return int(digest(seed, *key)[:16], 16) / 2**64


def rng(seed: int, *key: object) -> random.Random:
    """A ``random.Random`` whose whole sequence is fixed by ``seed`` and ``key``."""
    return random.Random(int(digest(seed, *key)[:16], 16))


def pick_weighted(weights: dict[str, float], r: float) -> str | None:
    """Walk ``weights`` in order with ``r`` in [0, 1); ``None`` when ``r`` lands past their sum."""
    edge = 0.0
    for name, weight in weights.items():
        edge += weight
        if r < edge:
            return name
    return None
