"""The providers' prompt caches as the simulator keeps them.

::

    cache = PromptCache()
    cache.openai("job-7", segments, prompt_tokens=1500)     # 0 the first time
    cache.openai("job-7", segments, prompt_tokens=1500)     # 1408: 128-token steps
    cache.anthropic(units, prompt_tokens=1500)              # (read, written)

OpenAI caches by itself: under a ``prompt_cache_key`` (or, with ``keyless``, in one
shared namespace), the longest prefix shared with an earlier request is read from the
cache once the prompt has ``OPENAI_MINIMUM`` tokens, in steps of ``OPENAI_STEP``.
Anthropic caches what it is told to: the prefix up to each block marked
``cache_control`` is written at ``ANTHROPIC_MINIMUM`` tokens, and read back by a later
request marking the same prefix or one of the ``LOOKBACK`` blocks before it. Four
characters count as a token; prompts are kept as chained digests, the oldest forgotten
past a bound.
"""

from __future__ import annotations

import hashlib
from collections import OrderedDict
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Final

OPENAI_MINIMUM: Final = 1024
OPENAI_STEP: Final = 128
ANTHROPIC_MINIMUM: Final = 1024
ANTHROPIC_MAX_MARKS: Final = 4
LOOKBACK: Final = 20
_CHUNKS: Final = 262_144  # OpenAI chunk digests remembered, over every key
_PREFIXES: Final = 65_536  # Anthropic prefixes remembered

# One piece of an OpenAI prompt, compared in order: (role or "tools", text).
Segment = tuple[str, str]


@dataclass(frozen=True, slots=True)
class Unit:
    """One block of an Anthropic prompt, in cache order (tools, system, messages):
    ``identity`` is what must repeat, ``chars`` its length, ``marked`` its cache_control."""

    identity: str
    chars: int
    marked: bool = False


class PromptCache:
    def __init__(self, *, keyless: bool = False) -> None:
        self._keyless = keyless
        # OpenAI: per key, the chained digests of every 128-token chunk of prompts seen.
        self._openai: OrderedDict[str, set[bytes]] = OrderedDict()
        self._openai_size = 0
        # Anthropic: the digests of the prefixes written.
        self._anthropic: OrderedDict[str, None] = OrderedDict()

    def openai(self, key: str | None, segments: Sequence[Segment], prompt_tokens: int) -> int:
        """The cached tokens of a request under ``key``; the request is remembered."""
        if not key:
            if not self._keyless:
                return 0
            key = ""  # the namespace every keyless request shares
        chain = _chunk_digests(segments)
        known = self._openai.pop(key, set())
        # Each digest covers its chunk and every chunk before it: the last known one ends
        # the longest prefix seen before.
        matched = next((i + 1 for i in range(len(chain) - 1, -1, -1) if chain[i] in known), 0)
        self._openai_size -= len(known)
        known.update(chain)
        if len(known) > _CHUNKS:  # one key alone past the bound: it starts over
            known = set(chain)
        self._openai[key] = known
        self._openai_size += len(known)
        while self._openai_size > _CHUNKS and len(self._openai) > 1:
            _, oldest = self._openai.popitem(last=False)
            self._openai_size -= len(oldest)
        cached = min(matched * OPENAI_STEP, prompt_tokens // OPENAI_STEP * OPENAI_STEP)
        if prompt_tokens < OPENAI_MINIMUM or cached < OPENAI_MINIMUM:
            return 0
        return cached

    def anthropic(self, units: Sequence[Unit], prompt_tokens: int) -> tuple[int, int]:
        """``(read, written)`` tokens of a request; the prefixes it marks are written."""
        digests: list[str] = []
        ends: list[int] = []  # tokens of the prefix up to and including each unit
        running = hashlib.sha256()
        chars = 0
        for unit in units:
            running.update(unit.identity.encode("utf-8", "replace") + b"\0")
            digests.append(running.hexdigest())
            chars += unit.chars
            ends.append(chars // 4)
        marks = [i for i, unit in enumerate(units) if unit.marked]
        hit = -1
        for mark in marks:
            for i in range(mark, max(mark - LOOKBACK, -1), -1):
                if digests[i] in self._anthropic:
                    hit = max(hit, i)
                    self._anthropic.move_to_end(digests[i])
                    break
        read = min(ends[hit], prompt_tokens) if hit >= 0 else 0
        written_to = -1
        for mark in marks:
            if ends[mark] >= ANTHROPIC_MINIMUM:
                written_to = max(written_to, mark)
                self._anthropic[digests[mark]] = None
                self._anthropic.move_to_end(digests[mark])
        while len(self._anthropic) > _PREFIXES:
            self._anthropic.popitem(last=False)
        written = 0
        if written_to > hit:
            written = max(0, min(ends[written_to], prompt_tokens) - read)
        return read, written


def _chunk_digests(segments: Sequence[Segment]) -> list[bytes]:
    """A digest per whole chunk of ``OPENAI_STEP`` tokens of the prompt, each covering
    everything before it too (so a prompt is remembered in bounded space)."""
    text = "".join(f"{role}\x1f{content}\x1e" for role, content in segments)
    size = OPENAI_STEP * 4
    running = hashlib.sha256()
    out: list[bytes] = []
    for start in range(0, len(text) - size + 1, size):
        running.update(text[start : start + size].encode("utf-8", "surrogatepass"))
        out.append(running.copy().digest()[:16])
    return out
