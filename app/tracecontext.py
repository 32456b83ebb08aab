"""A client's W3C trace context (``traceparent``, ``tracestate``), checked and bounded.

    trace = TraceContext.from_headers(request.headers.getlist("traceparent"),
                                      request.headers.getlist("tracestate"))
    trace.traceparent if trace else None      # "00-<trace id>-<parent id>-<flags>"

The API keeps it with the job (``JobStore.submit(trace=...)``) and the worker's job span
becomes a child of the client's span (``app.tracing``). Whatever does not follow the W3C
grammar is dropped, never an error: a bad ``traceparent`` means no parent, a bad
``tracestate`` means none (W3C Trace Context, "Processing model"). Nothing here needs
OpenTelemetry.
"""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Final

# A traceparent of version 00 is exactly this long; a later version may add fields after
# it, and we read no more than MAX_TRACEPARENT characters of one.
TRACEPARENT_CHARS: Final = 55
MAX_TRACEPARENT: Final = 256
# W3C: at most 32 list members; a vendor SHOULD pass on at least 512 characters. Longer
# (summed over repeated headers) is dropped whole rather than cut.
MAX_TRACESTATE: Final = 512
MAX_TRACESTATE_MEMBERS: Final = 32

_TRACEPARENT: Final = re.compile(
    r"(?P<version>[0-9a-f]{2})-(?P<trace>[0-9a-f]{32})-(?P<parent>[0-9a-f]{16})-"
    r"(?P<flags>[0-9a-f]{2})"
)
_KEY: Final = re.compile(
    r"[a-z][_0-9a-z\-*/]{0,255}|[a-z0-9][_0-9a-z\-*/]{0,240}@[a-z][_0-9a-z\-*/]{0,13}"
)
_VALUE: Final = re.compile(r"[\x20-\x2b\x2d-\x3c\x3e-\x7e]{0,255}[\x21-\x2b\x2d-\x3c\x3e-\x7e]")


@dataclass(frozen=True, slots=True)
class TraceContext:
    """A valid ``traceparent`` (normalised to version 00) and its ``tracestate``, if any."""

    traceparent: str
    tracestate: str | None = None

    @property
    def trace_id(self) -> str:
        return self.traceparent[3:35]

    @property
    def parent_id(self) -> str:
        return self.traceparent[36:52]

    @classmethod
    def from_headers(
        cls, traceparent: Sequence[str], tracestate: Sequence[str] = ()
    ) -> TraceContext | None:
        """The context of a request's headers, or ``None`` without a valid ``traceparent``.

        Each header comes with every value it was sent with.
        """
        if len(traceparent) != 1:  # none, or repeated: W3C says there is no parent
            return None
        parent = parse_traceparent(traceparent[0])
        if parent is None:
            return None
        return cls(parent, parse_tracestate(tracestate))

    def dumps(self) -> str:
        """As the store keeps it (the job's ``trace`` field)."""
        return json.dumps({"traceparent": self.traceparent, "tracestate": self.tracestate})

    @classmethod
    def loads(cls, raw: str | bytes | None) -> TraceContext | None:
        """What ``dumps`` wrote, checked again; ``None`` for nothing or anything else."""
        if not raw:
            return None
        try:
            stored = json.loads(raw)
        except ValueError:
            return None
        if not isinstance(stored, dict):
            return None
        parent, state = stored.get("traceparent"), stored.get("tracestate")
        if not isinstance(parent, str) or parse_traceparent(parent) != parent:
            return None
        return cls(parent, parse_tracestate([state]) if isinstance(state, str) else None)


def parse_traceparent(value: str) -> str | None:
    """``value`` as a version-00 ``traceparent``, or ``None`` when it is not a valid one."""
    if len(value) > MAX_TRACEPARENT:
        return None
    value = value.strip(" \t")
    match = _TRACEPARENT.match(value)
    if match is None:
        return None
    version = match["version"]
    if version == "ff":
        return None
    if version == "00" and len(value) != TRACEPARENT_CHARS:
        return None
    # A later version: the first four fields as version 00 reads them, then "-" or the end.
    if len(value) > TRACEPARENT_CHARS and value[TRACEPARENT_CHARS] != "-":
        return None
    trace, parent = match["trace"], match["parent"]
    if trace == "0" * 32 or parent == "0" * 16:
        return None
    return f"00-{trace}-{parent}-{match['flags']}"


def parse_tracestate(values: Sequence[str]) -> str | None:
    """The list members of every ``tracestate`` value, joined, or ``None``.

    ``None`` too when any member is malformed, a key repeats, or it is too long (W3C: drop it).
    """
    if sum(len(v) + 1 for v in values) > MAX_TRACESTATE + 1:
        return None
    members: list[str] = []
    keys: set[str] = set()
    for value in values:
        for item in value.split(","):
            member = item.strip(" \t")
            if not member:
                continue
            key, eq, val = member.partition("=")
            if not eq or not _KEY.fullmatch(key) or not _VALUE.fullmatch(val) or key in keys:
                return None
            keys.add(key)
            members.append(member)
    if not members or len(members) > MAX_TRACESTATE_MEMBERS:
        return None
    return ",".join(members)
