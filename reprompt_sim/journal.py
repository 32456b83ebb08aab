"""The server's record of recent chat requests, for tests to read back (``GET /sim/requests``).

Bounded: only the last ``JOURNAL_SIZE`` requests are kept, oldest forgotten first::

    journal = Journal()
    journal.add(Entry(api="openai", attempt=1, outcome="call", tools_offered=("lookup",),
                      output_tool="final_answer", tool_choice="required", messages=1))
    journal.entries()   # [{"seq": 1, "api": "openai", "attempt": 1, ...}]
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass
from typing import Any, Final

JOURNAL_SIZE: Final = 1000
RECENT_MESSAGE_CHARS: Final = 16_000


@dataclass(frozen=True, slots=True)
class Entry:
    """One request the simulator parsed: what it was offered and what it did.

    ``tools_offered`` are the client tools (all but the output tool); ``tool_choice`` is the
    request's value as sent; ``messages`` counts the request's ``messages`` array.
    """

    api: str
    attempt: int
    outcome: str
    tools_offered: tuple[str, ...]
    output_tool: str | None
    tool_choice: Any
    messages: int
    schema_keys: tuple[str, ...] = ()  # the top-level properties of the schema it answered
    n: int = 1  # answers asked for
    # The texts of the messages after the model's last turn (each at most
    # RECENT_MESSAGE_CHARS): what a test reads to see the exact re-ask or tool result the
    # model was given.
    recent: tuple[str, ...] = ()
    # Each image the request carried, in order: its media type, or "url" (#34).
    images: tuple[str, ...] = ()


class Journal:
    """The last ``size`` entries, each numbered in arrival order (``seq``, from 1)."""

    def __init__(self, size: int = JOURNAL_SIZE) -> None:
        self._entries: deque[tuple[int, Entry]] = deque(maxlen=size)
        self._seq = 0

    def add(self, entry: Entry) -> None:
        self._seq += 1
        self._entries.append((self._seq, entry))

    def entries(self) -> list[dict[str, Any]]:
        """The kept entries, oldest first, in the JSON shape ``GET /sim/requests`` returns."""
        return [
            {
                "seq": seq,
                "api": e.api,
                "attempt": e.attempt,
                "outcome": e.outcome,
                "toolsOffered": list(e.tools_offered),
                "outputTool": e.output_tool,
                "toolChoice": e.tool_choice,
                "messages": e.messages,
                "schemaKeys": list(e.schema_keys),
                "n": e.n,
                "recentMessages": list(e.recent),
                "images": list(e.images),
            }
            for seq, e in self._entries
        ]

    def clear(self) -> None:
        """Forget every entry; numbering goes on."""
        self._entries.clear()
