"""The turn record: one per model call, kept in the ledger, announced to the tracer."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TypedDict, Unpack

from app.core.answer.feedback import quote
from app.core.turn.model import LLMResponse
from app.core.turn.request import Call
from app.core.turn.state import RunState
from app.core.wire.events import Tracer, TurnEnded, emit
from app.core.wire.record import Outcome, TokenUsage, ToolCallRecord, TurnRecord


@dataclass(frozen=True, slots=True)
class Best:
    """Best-of-N on a turn record: how many answers came back, which one was kept."""

    answers: int
    chosen: int


@dataclass(frozen=True, slots=True)
class Answered:
    """A call's kept answer, as recorded: ``merged`` is a field-level answer's whole value."""

    call: Call
    response: LLMResponse
    content: str
    merged: str | None
    best: Best | None


class Extras(TypedDict, total=False):
    """What a turn record may say besides its outcome (``Recorder.note``'s keywords)."""

    answer: str | None
    calls: tuple[str, ...]
    details: tuple[ToolCallRecord, ...]
    warnings: tuple[str, ...]
    repeat_of: int | None
    best: Best | None


class Recorder:
    """``await record(call, response, outcome, code, diagnosis, answer=...)`` after a call."""

    def __init__(self, state: RunState, tracer: Tracer | None) -> None:
        self.state = state
        self.tracer = tracer

    async def __call__(
        self,
        call: Call,
        response: LLMResponse | None,
        outcome: Outcome,
        code: str | None = None,
        diagnosis: str | None = None,
        **extras: Unpack[Extras],
    ) -> None:
        record = self.note(call, response, outcome, code, diagnosis, **extras)
        budget = self.state.budget
        ended = TurnEnded(
            record=record, remaining=budget.retry_remaining, calls_left=budget.calls_left
        )
        await emit(self.tracer, ended)

    def note(
        self,
        call: Call,
        response: LLMResponse | None,
        outcome: Outcome,
        code: str | None = None,
        diagnosis: str | None = None,
        *,
        answer: str | None = None,
        calls: tuple[str, ...] = (),
        details: tuple[ToolCallRecord, ...] = (),
        warnings: tuple[str, ...] = (),
        repeat_of: int | None = None,
        best: Best | None = None,
    ) -> TurnRecord:
        """The record, kept in the ledger and not announced (``__call__`` announces it)."""
        state = self.state
        record = TurnRecord(
            index=call.index,
            type=call.type,
            outcome=outcome,
            attempt=call.attempt,
            error_code=code,
            diagnosis=diagnosis,
            usage=TokenUsage.of(None if response is None else response.usage),
            cost_usd=None if response is None else response.cost_usd,
            latency_ms=int((state.clock.monotonic() - call.began) * 1000),
            provider=None if response is None else response.provider,
            model=None if response is None else response.model,
            finish_reason=None if response is None else response.finish_reason,
            max_output_tokens=call.request.max_output_tokens,
            prompt_tokens_estimate=call.prompt_tokens,
            message_count=len(call.request.messages),
            tools_offered=len(call.request.tools),
            tool_calls=calls,
            tool_call_details=details,
            transport_retries=0 if response is None else response.transport_retries,
            transport_wait_ms=0 if response is None else response.transport_wait_ms,
            escalated=call.escalated,
            simplified=call.simplified,
            warnings=warnings,
            answer=None if answer is None else quote(answer),
            repeat_of=repeat_of,
            patch=None if call.patch is None else call.patch.pointers,
            candidates=None if best is None else best.answers,
            chosen=None if best is None else best.chosen,
            started_at=call.started_at,
        )
        state.ledger.turns.append(record)
        return record
