"""A run's pause for client tools: from its checkpoint to the client's outputs.

checkpoint = checkpoint_of(state, conversation, handled)   # the job waits
conversation = restore(state, checkpoint)                  # another worker goes on
await finish_paused_turn(spec, state, tracer, conversation, resume)  # the outputs
"""

from __future__ import annotations

from dataclasses import replace

from app.core.turn.checkpoint import (
    Checkpoint,
    PendingCall,
    Resume,
    StoredEntry,
    StoredFailure,
    StoredMessage,
)
from app.core.turn.conversation import Conversation
from app.core.turn.model import ToolCall
from app.core.turn.state import RunState, epoch_ms
from app.core.turn.stop import Ended
from app.core.turn.tools import Handled, answered, work_messages
from app.core.wire import codes
from app.core.wire.events import ToolsAnswered, Tracer, emit
from app.core.wire.spec import JobSpec


def checkpoint_of(
    state: RunState, conversation: Conversation, handled: list[Handled]
) -> Checkpoint:
    """Everything the next worker needs to go on."""
    ledger, budget = state.ledger, state.budget
    last = state.last_failure
    return Checkpoint(
        work_remaining=budget.work_remaining,
        retry_remaining=budget.retry_remaining,
        rejected=state.rejected,
        seen=dict(state.seen),
        repeats=state.repeats,
        max_out=state.max_out,
        last_failure=None if last is None else StoredFailure.of(last),
        started_ms=state.started_ms,
        started_at=ledger.started_at,
        paused_ms=epoch_ms(state.clock),
        spend=replace(ledger.spend),
        warnings=tuple(ledger.warnings),
        turns=tuple(ledger.turns),
        history=tuple(ledger.history),
        system=StoredMessage.of(conversation.system),
        task=StoredMessage.of(conversation.task),
        full=conversation.full,
        log=tuple(
            StoredEntry(kind=kind, messages=tuple(StoredMessage.of(m) for m in entry))
            for kind, entry in conversation.log
        ),
        transcript=tuple(StoredMessage.of(m) for m in conversation.transcript),
        pending=tuple(
            PendingCall(
                id=h.call.id,
                name=h.call.name,
                arguments=h.call.arguments,
                parsed=h.arguments,
                record=h.record,
                text=h.text,
            )
            for h in handled
        ),
    )


def restore(state: RunState, checkpoint: Checkpoint) -> Conversation:
    """The state a checkpoint kept, put back; the conversation it had."""
    state.budget.work_remaining = checkpoint.work_remaining
    state.budget.retry_remaining = checkpoint.retry_remaining
    state.rejected = checkpoint.rejected
    state.seen = dict(checkpoint.seen)
    state.repeats = checkpoint.repeats
    state.max_out = checkpoint.max_out
    failure = checkpoint.last_failure
    state.last_failure = None if failure is None else failure.failure()
    ledger, clock = state.ledger, state.clock
    # The job's clock runs on while it waits: its duration and deadline count the wait.
    state.started_ms = checkpoint.started_ms
    ledger.started = clock.monotonic() - (epoch_ms(clock) - state.started_ms) / 1000
    ledger.started_at = checkpoint.started_at
    deadline_ms = state.deadline_ms
    state.deadline = None if deadline_ms is None else ledger.started + deadline_ms / 1000
    ledger.spend = replace(checkpoint.spend)
    ledger.warnings = list(checkpoint.warnings)
    ledger.turns = list(checkpoint.turns)
    ledger.history = list(checkpoint.history)
    conversation = Conversation(
        checkpoint.system.message(), checkpoint.task.message(), full=checkpoint.full
    )
    conversation.log = [
        (entry.kind, tuple(m.message() for m in entry.messages)) for entry in checkpoint.log
    ]
    conversation.transcript = [m.message() for m in checkpoint.transcript]
    return conversation


async def finish_paused_turn(
    spec: JobSpec,
    state: RunState,
    tracer: Tracer | None,
    conversation: Conversation,
    resume: Resume,
) -> None:
    """The paused work turn, completed with the client's outputs (or without them)."""
    checkpoint, outputs = resume.checkpoint, resume.outputs
    if outputs is None and spec.on_tool_timeout == "fail":
        names = ", ".join(call.name for call in checkpoint.waiting)
        raise Ended(
            codes.TOOL_TIMEOUT,
            f"the client posted no outputs for the tool calls ({names}) before "
            "requiredAction.expiresAt",
        )
    handled = [_completed(pending, resume) for pending in checkpoint.pending]
    conversation.add_work(*work_messages(handled))
    if outputs is None:
        # spec 000's must-return: no more work, the next turn must answer.
        state.budget.work_remaining = min(state.budget.work_remaining, 1)
        state.ledger.warn(
            "the client did not answer the tool calls within toolTimeoutMs; "
            "the job went on without them"
        )
    waiting = {call.id for call in checkpoint.waiting}
    answers = tuple(h.record for h in handled if h.call.id in waiting)
    await emit(tracer, ToolsAnswered(calls=answers))


def _completed(pending: PendingCall, resume: Resume) -> Handled:
    """One call of the paused turn: run here already, or answered by the client (or not)."""
    checkpoint, outputs = resume.checkpoint, resume.outputs
    call = ToolCall(pending.id, pending.name, pending.arguments)
    done = Handled(call, pending.record, pending.text, pending.parsed)
    if not done.waiting:
        return done
    if outputs is None:
        why = "the client did not answer this call in time"
        return answered(done, error=why, duration_ms=None)
    output = outputs[pending.id]
    received = resume.received_ms or checkpoint.paused_ms
    waited = max(0, received - checkpoint.paused_ms)
    return answered(done, output=output.output, error=output.error, duration_ms=waited)
