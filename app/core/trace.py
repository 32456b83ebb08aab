"""Trace events of the turn loop (spec 000 "Tracer Events"), delivered through one callback.

async def on_event(event: TraceEvent) -> None:
    print(event.name, event.data["turn"], event.data["type"])
"""

from __future__ import annotations

import inspect
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any, Literal

EventName = Literal["turn_start", "turn_end"]


@dataclass(frozen=True, slots=True)
class TraceEvent:
    name: EventName
    data: dict[str, Any]


Tracer = Callable[[TraceEvent], Awaitable[None] | None]


async def emit(tracer: Tracer | None, event: TraceEvent) -> None:
    """Deliver to a sync or async callback; no callback, no work."""
    if tracer is None:
        return
    result = tracer(event)
    if inspect.isawaitable(result):
        await result
