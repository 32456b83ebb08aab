"""A paused job's loop state, so another worker can go on where this one stopped.

When the model calls a client tool, the loop stops with a ``Checkpoint``: the budget left,
what was spent, the conversation so far and the calls waiting for the client. The store
keeps it with the job (``requires_action``); the worker that claims the job next resumes
from it with the client's outputs (``Resume``). It is the loop's private format: versioned,
read back only by the loop.

    result = await run_job(spec, runtime)            # result.paused is a Checkpoint
    later = await run_job(spec, runtime, resume=Resume(result.paused, outputs))
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Literal

from pydantic import Field

from app.core.answer.feedback import Failure
from app.core.turn.ledger import Spend as LedgerSpend
from app.core.turn.model import Message, Role, ToolCall
from app.core.wire.base import Wire
from app.core.wire.record import Outcome, Rejection, Spend, ToolCallRecord, TurnRecord


class StoredCall(Wire):
    id: str
    name: str
    arguments: str


class StoredMessage(Wire):
    role: Role
    content: str
    tool_calls: tuple[StoredCall, ...] = ()
    tool_call_id: str | None = None
    name: str | None = None

    @classmethod
    def of(cls, message: Message) -> StoredMessage:
        return cls(
            role=message.role,
            content=message.content,
            tool_calls=tuple(
                StoredCall(id=c.id, name=c.name, arguments=c.arguments) for c in message.tool_calls
            ),
            tool_call_id=message.tool_call_id,
            name=message.name,
        )

    def message(self) -> Message:
        return Message(
            self.role,
            self.content,
            tool_calls=tuple(ToolCall(c.id, c.name, c.arguments) for c in self.tool_calls),
            tool_call_id=self.tool_call_id,
            name=self.name,
        )


class StoredEntry(Wire):
    kind: Literal["work", "failure"]
    messages: tuple[StoredMessage, ...]


class StoredFailure(Wire):
    outcome: Outcome
    code: str
    diagnosis: str
    excerpt: str | None = None
    show_example: bool = False

    @classmethod
    def of(cls, failure: Failure) -> StoredFailure:
        return cls(
            outcome=failure.outcome,
            code=failure.code,
            diagnosis=failure.diagnosis,
            excerpt=failure.excerpt,
            show_example=failure.show_example,
        )

    def failure(self) -> Failure:
        return Failure(self.outcome, self.code, self.diagnosis, self.excerpt, self.show_example)


class PendingCall(Wire):
    """A call of the paused work turn: answered already (``text``), or the client's."""

    id: str
    name: str
    arguments: str
    parsed: Any = None
    record: ToolCallRecord
    text: str | None = None


class Checkpoint(Wire):
    version: Literal[1] = 1
    work_remaining: int
    retry_remaining: int
    rejected: int
    max_out: int
    last_failure: StoredFailure | None
    started_ms: int  # wall clock (epoch ms) when the job's first run began
    started_at: str
    paused_ms: int
    spend: LedgerSpend  # the ledger's own dataclass: pydantic reads and writes it as is
    warnings: tuple[str, ...]
    turns: tuple[TurnRecord, ...]
    history: tuple[Rejection, ...]
    system: StoredMessage
    task: StoredMessage
    full: bool
    log: tuple[StoredEntry, ...]
    transcript: tuple[StoredMessage, ...]
    pending: tuple[PendingCall, ...]
    # What lost attempts before the pause spent (their calls are not in ``turns``).
    earlier: Spend | None = None
    # Rejected answers seen so far (digest → turn) and how many came back again.
    seen: dict[str, int] = Field(default_factory=dict)
    repeats: int = 0

    @property
    def waiting(self) -> tuple[PendingCall, ...]:
        """The calls the client must answer."""
        return tuple(call for call in self.pending if call.text is None)


class ToolOutput(Wire):
    """The client's answer to one call: ``output`` (any JSON), or ``error`` when its tool
    failed (the model reads it as a tool error)."""

    tool_call_id: str
    output: Any = None
    error: str | None = None


@dataclass(frozen=True, slots=True)
class Resume:
    """Go on from ``checkpoint`` with the client's ``outputs`` (by call id).

    ``outputs`` None: without them (the wait timed out and the job said to go on in
    must-return mode). ``received_ms``: when they came (epoch).
    """

    checkpoint: Checkpoint
    outputs: Mapping[str, ToolOutput] | None
    received_ms: int | None = None


class ActionCall(Wire):
    """A tool call the client must run: ``arguments`` as the model sent them, parsed."""

    id: str
    name: str
    arguments: Any


class RequiredAction(Wire):
    """What a job in ``requires_action`` waits for: an output for each call, by
    ``expiresAt`` (then the job fails ``tool-timeout`` or goes on, as it asked)."""

    tool_calls: tuple[ActionCall, ...]
    expires_at: str

    @classmethod
    def of(cls, checkpoint: Checkpoint, expires_at: str) -> RequiredAction:
        calls = tuple(
            ActionCall(id=c.id, name=c.name, arguments=c.parsed) for c in checkpoint.waiting
        )
        return cls(tool_calls=calls, expires_at=expires_at)
