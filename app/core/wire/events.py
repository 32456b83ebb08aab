"""What the turn loop reports as it goes (spec 000 "Tracer Events"): typed, one callback.

    async def on_event(event: LoopEvent) -> None:
        if isinstance(event, TurnEnded):
            print(event.record.outcome, event.calls_left)

``TurnStarted`` is also the data of the job's ``turn_start`` SSE event; ``TurnEnded``
carries the whole ``TurnRecord`` (stored with the job) and ``summary()``, the data of the
``turn_end`` event.
"""

from __future__ import annotations

import inspect
from collections.abc import Awaitable, Callable
from typing import ClassVar, Literal

from pydantic import Field

from app.core.wire.base import Wire
from app.core.wire.envelope import Envelope, JobStatus
from app.core.wire.record import Outcome, ToolCallRecord, TurnRecord, TurnType


class TurnStarted(Wire):
    """A model call is about to be made."""

    name: ClassVar[Literal["turn_start"]] = "turn_start"

    turn: int
    type: TurnType
    tools_count: int
    attempt: int
    remaining: int = Field(description="Correction turns left.")
    work_remaining: int
    model: str | None
    escalated: bool
    simplified: bool


class TurnSummary(Wire):
    """A model call ended: the data of the ``turn_end`` event (the record goes to the job)."""

    turn: int
    type: TurnType
    result: Outcome
    error_code: str | None
    diagnosis: str | None
    attempt: int
    remaining: int = Field(description="Correction turns left.")
    calls_left: int
    input_tokens: int
    output_tokens: int
    cost_usd: float | None
    latency_ms: int
    model: str | None
    provider: str | None


class TurnEnded(Wire):
    """A model call ended: its record, and what the budget has left."""

    name: ClassVar[Literal["turn_end"]] = "turn_end"

    record: TurnRecord
    remaining: int
    calls_left: int

    def summary(self) -> TurnSummary:
        record = self.record
        return TurnSummary(
            turn=record.index,
            type=record.type,
            result=record.outcome,
            error_code=record.error_code,
            diagnosis=record.diagnosis,
            attempt=record.attempt,
            remaining=self.remaining,
            calls_left=self.calls_left,
            input_tokens=record.usage.input_tokens,
            output_tokens=record.usage.output_tokens,
            cost_usd=record.cost_usd,
            latency_ms=record.latency_ms,
            model=record.model,
            provider=record.provider,
        )


class ToolsAnswered(Wire):
    """A paused job goes on: how each client tool call was answered (or timed out)."""

    name: ClassVar[Literal["tool_outputs"]] = "tool_outputs"

    calls: tuple[ToolCallRecord, ...]


LoopEvent = TurnStarted | TurnEnded | ToolsAnswered
Tracer = Callable[[LoopEvent], Awaitable[None] | None]


async def emit(tracer: Tracer | None, event: LoopEvent) -> None:
    """Deliver to a sync or async callback; no callback, no work."""
    if tracer is None:
        return
    result = tracer(event)
    if result is not None and inspect.isawaitable(result):
        await result


class ToolOutputsEvent(Wire):
    """The data of ``tool_outputs_received``: the client answered these calls; the job is
    queued to go on."""

    tool_call_ids: tuple[str, ...]


class JobEnded(Wire):
    """The data of the ``job_end`` event, always a job's last: its final state and result."""

    name: ClassVar[Literal["job_end"]] = "job_end"

    status: JobStatus
    result: Envelope


class QueueEvent(Wire):
    """The data of ``job_queued`` (``status``), ``job_start`` and ``job_requeued`` (written
    by the store's scripts): which claim of the job it is, and why it went back."""

    status: Literal["queued"] | None = None
    attempt: int | None = None
    reason: Literal["lease-expired", "released", "tool-timeout"] | None = None
