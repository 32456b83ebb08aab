"""One run's state: what a job's turns have spent, seen and decided so far.

What a pause keeps in its checkpoint (``app.core.turn.pause``); everything else a run
holds is rebuilt from the spec.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Sequence
from dataclasses import dataclass, field

from app.core.answer.feedback import Failure
from app.core.answer.patch import Patch
from app.core.answer.verdict import unfenced
from app.core.turn.budget import TurnBudget
from app.core.turn.clock import Clock
from app.core.turn.ledger import Ledger
from app.core.turn.model import LLMResponse, Message, ToolCall
from app.core.turn.stop import Ended
from app.core.wire import codes
from app.core.wire.spec import JobSpec


@dataclass(slots=True)
class RunState:
    budget: TurnBudget
    ledger: Ledger
    clock: Clock
    deadline_ms: int | None  # the job's budget.deadlineMs
    deadline: float | None  # on the clock's monotonic scale
    started_ms: int  # epoch ms: a resumed job's clock counts the wait
    max_out: int  # the output limit of the next call (grows after a cut-off answer)
    rejected: int = 0
    last_failure: Failure | None = None
    seen: dict[str, int] = field(default_factory=dict)  # rejected answers: digest → turn
    repeats: int = 0
    # The next re-ask asks for only these parts of the last candidate (None: whole).
    patch: Patch | None = None
    # The compact profile's re-ask: one fresh user turn sent alone (None: the conversation).
    fresh: Message | None = None
    # Once an answer ran away in a loop: the arrays a schema grammar allows (None: any).
    max_items: int | None = None
    failed_validator: int | None = None  # which validator rejected the last answer

    @classmethod
    def start(cls, spec: JobSpec, clock: Clock) -> RunState:
        budget = TurnBudget(spec.budget.max_turns, spec.budget.return_retries)
        ledger = Ledger(clock)
        deadline_ms = spec.budget.deadline_ms
        return cls(
            budget=budget,
            ledger=ledger,
            clock=clock,
            deadline_ms=deadline_ms,
            deadline=None if deadline_ms is None else ledger.started + deadline_ms / 1000,
            started_ms=epoch_ms(clock),
            max_out=spec.max_output_tokens,
        )

    def past_deadline(self, slack_s: float = 0.05) -> bool:
        return self.deadline is not None and self.clock.monotonic() >= self.deadline - slack_s

    def time_left(self) -> float | None:
        """Seconds to the deadline (None: no deadline); past it, the job ends."""
        if self.deadline is None:
            return None
        left = self.deadline - self.clock.monotonic()
        if left <= 0:
            raise Ended(codes.DEADLINE_EXCEEDED, f"deadlineMs {self.deadline_ms} passed")
        return left

    def repeat_of(self, response: LLMResponse, turn: int, patch: Patch | None) -> int | None:
        """The earlier turn whose rejected answer this one repeats; None for a new one.

        A new answer is remembered. A field-level answer repeats only one for the same parts.
        """
        scope = "" if patch is None else "\n".join(patch.pointers)
        digest = answer_digest(response.content or "", response.tool_calls, scope=scope)
        earlier = self.seen.get(digest)
        if earlier is None:
            self.seen[digest] = turn
            return None
        self.repeats += 1
        return earlier


def answer_digest(content: str, tool_calls: Sequence[ToolCall] = (), *, scope: str = "") -> str:
    """A digest that two answers share when they say the same.

    Their JSON value however written (spacing, key order, a fence), else their text with
    whitespace runs folded; and their tool calls.
    """
    text = unfenced(content).strip()
    try:
        canonical = json.dumps(json.loads(text), sort_keys=True, separators=(",", ":"))
    except (ValueError, RecursionError):
        canonical = " ".join(text.split())
    calls = "\n".join(f"{c.name}({c.arguments})" for c in tool_calls)
    digest = hashlib.sha256(canonical.encode("utf-8", "replace"))
    digest.update(b"\0" + calls.encode("utf-8", "replace"))
    if scope:  # a field-level answer: the same value for other parts is another answer
        digest.update(b"\0patch\0" + scope.encode("utf-8", "replace"))
    return digest.hexdigest()[:32]


def epoch_ms(clock: Clock) -> int:
    return int(clock.now().timestamp() * 1000)
