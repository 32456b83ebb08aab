"""How sure the model was of its answer's values, from the provider's token log-probabilities.

    confidence('{"city": "Lyon", "n": 2}', (('{"', -0.01), ('city', -0.02), ('":', 0.0),
               (' "', -0.01), ('Ly', -0.9), ('on', -0.05), ('",', 0.0), (' "n', 0.0),
               ('":', 0.0), (' 2', -0.3), ('}', 0.0)))
    # 0.62: the least sure value ("Lyon", exp((-0.9 - 0.05 - ...) / its tokens))

Only the tokens of the answer's values count (strings that are not keys, numbers, true,
false, null): the keys and punctuation a grammar forces say nothing. Each value's
confidence is the geometric mean of its tokens' probabilities; the answer's is its least
sure value's. ``None`` when the tokens do not spell the answer (a provider that returned
something else) or it holds no value: then there is no honest number to give.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Final

MAX_CHARS: Final = 262_144  # longer answers are not scanned


def confidence(content: str, tokens: Sequence[tuple[str, float]]) -> float | None:
    """The least sure value's geometric-mean token probability (see the module docstring)."""
    if not tokens or len(content) > MAX_CHARS:
        return None
    text = "".join(token for token, _ in tokens)
    if content.strip() not in text:
        return None
    spans = value_spans(text)
    if not spans:
        return None
    sums = [0.0] * len(spans)
    counts = [0] * len(spans)
    at = 0
    index = 0
    for token, logprob in tokens:
        start, end = at, at + len(token)
        at = end
        while index < len(spans) and spans[index][1] <= start:
            index += 1
        probe = index
        while probe < len(spans) and spans[probe][0] < end:
            if end > spans[probe][0] and start < spans[probe][1]:
                sums[probe] += logprob
                counts[probe] += 1
            probe += 1
    means = [math.exp(total / count) for total, count in zip(sums, counts, strict=True) if count]
    return round(min(means), 4) if means else None


def value_spans(text: str) -> list[tuple[int, int]]:
    """Where the values of the JSON in ``text`` are: strings that are not keys (their inner
    text), numbers and literals, in order. A scan, not a parse: it never fails."""
    spans: list[tuple[int, int]] = []
    i, n = 0, len(text)
    while i < n:
        char = text[i]
        if char == '"':
            j = i + 1
            while j < n and text[j] != '"':
                j += 2 if text[j] == "\\" else 1
            k = j + 1
            while k < n and text[k] in " \t\r\n":
                k += 1
            if not (k < n and text[k] == ":"):  # a key is followed by a colon
                spans.append((i + 1, min(j, n)))
            i = j + 1
        elif char in "-0123456789tfn":
            j = i
            while j < n and (text[j].isalnum() or text[j] in "+-."):
                j += 1
            spans.append((i, j))
            i = j
        else:
            i += 1
    return spans
