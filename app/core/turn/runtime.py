"""What the loop needs from outside: a model client, a clock, optional hooks.

result = await run_job(spec, Runtime(client=router, tracer=tracer))
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from app.core.answer.finding import Finding
from app.core.answer.validators import Validator
from app.core.turn.clock import Clock, SystemClock
from app.core.turn.model import ModelClient
from app.core.turn.tools import Tool
from app.core.wire.envelope import Envelope
from app.core.wire.events import Tracer
from app.core.wire.partial import PartialEvent
from app.core.wire.record import TurnRecord
from app.core.wire.spec import ValidatorSpec

# A webhook validator's call: (spec, candidate, attempt) → its finding, or
# ValidatorUnavailable. The worker's goes through the outbound guard.
WebhookCheck = Callable[[ValidatorSpec, Any, int], Awaitable[Finding]]
# What a run had spent when its task was cancelled: the cancelled envelope (its execution
# counting every call, the one cut short among them) and the run's turn records. Called
# from the cancelled task as it unwinds, so it must not block.
Stopped = Callable[[Envelope, tuple[TurnRecord, ...]], None]
# Where a streaming job's partials go (``app.core.turn.streaming``): called as they come,
# from inside the model call, so it must not block.
PartialSink = Callable[[PartialEvent], None]


@dataclass(frozen=True, slots=True)
class Runtime:
    """The loop's outside; ``cancelled`` is polled before each call.

    ``validators`` run after the job's own; ``webhook`` calls a webhook validator;
    ``partials`` gets a streaming job's partial answers (``app.core.turn.streaming``).
    """

    client: ModelClient
    clock: Clock = field(default_factory=SystemClock)
    tracer: Tracer | None = None
    tools: Sequence[Tool] = ()
    validators: Sequence[Validator] = ()
    cancelled: Callable[[], bool] | None = None
    webhook: WebhookCheck | None = None
    # Set for a job that streams: its checked partials, at most one per interval.
    partials: PartialSink | None = None
    partial_interval_s: float = 0.05
    # Told what the run spent when its task is cancelled (a job cancelled mid-call bills it).
    stopped: Stopped | None = None
