"""A claimed job this worker runs: its claim, its task, and what is not written yet."""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass, field
from typing import Final, Literal

from app.core.wire.base import Wire
from app.core.wire.envelope import Envelope
from app.core.wire.events import TurnEnded, TurnStarted
from app.core.wire.record import TurnRecord
from app.store import Claim
from app.tracing import JobSpan

# How often a stopped job's task is cancelled again until the cancellation lands.
RECANCEL_S: Final = 0.1

StopReason = Literal["cancelled", "lease-lost", "drain"]


class LeaseLost(Exception):
    """A fenced write was refused: the job is no longer ours (lease lost or cancelled)."""


@dataclass(eq=False, slots=True)
class Job:
    """A claimed job this worker is running."""

    claim: Claim
    started: float = field(default_factory=time.monotonic)
    last_beat: float = field(default_factory=time.monotonic)
    task: asyncio.Task[None] | None = None
    stopped: StopReason | None = None  # why the worker stopped it, if it did
    unwinding: bool = False  # the stop reached the task
    committing: bool = False
    # What is not written yet: events, the last turn's record, the latest progress.
    events: list[tuple[str, Wire]] = field(default_factory=list)
    turn: TurnRecord | None = None
    # The event the in-progress envelope's progress comes from: made into a Progress only
    # when written, since most jobs' progress goes with the commit and is never shown.
    progress: TurnStarted | TurnEnded | None = None
    flush: asyncio.TimerHandle | None = None
    flush_at: float = 0.0  # loop time: written then unless another event comes first
    flushing: asyncio.Task[None] | None = None
    writing: bool = False  # the background flush has its turn and is writing
    span: JobSpan | None = None  # with traces on: this claim's span
    # What the run had spent when its task was cancelled (``Runtime.stopped``), and the
    # turns of a run that ended: a cancel that came first is billed from them (#31).
    cut: tuple[Envelope, tuple[TurnRecord, ...]] | None = None
    turns: tuple[TurnRecord, ...] = ()

    @property
    def id(self) -> str:
        return self.claim.job_id

    @property
    def pending(self) -> bool:
        return bool(self.events) or self.turn is not None

    def stop(self, why: StopReason) -> bool:
        """Cancel the job's task (aborting its model call); False if it was stopping already.

        Also False while it commits: the fenced commit settles it, and a heartbeat that
        raced a successful commit must not turn it into a lost job.
        """
        if self.stopped is not None or self.committing or self.task is None or self.task.done():
            return False
        self.stopped = why
        self._cancel()
        return True

    def _cancel(self) -> None:
        # Again and again until the task unwinds: on Python 3.11, asyncio.wait_for (which
        # redis-py uses) drops a cancellation that arrives as its inner call completes.
        if self.task is None or self.task.done() or self.unwinding:
            return
        self.task.cancel()
        asyncio.get_running_loop().call_later(RECANCEL_S, self._cancel)
