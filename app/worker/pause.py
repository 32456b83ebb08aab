"""Pauses for client tools: a job handed to its client (``requires_action``), and resumed.

The job leaves this worker (lease, slot and all) with the loop's checkpoint; whichever
worker claims it after the client's outputs (or the wait's expiry) resumes it from there.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass
from datetime import UTC, datetime

from app import metrics
from app.core.turn.checkpoint import Checkpoint, RequiredAction, Resume
from app.core.turn.clock import iso
from app.core.wire.envelope import Progress
from app.core.wire.spec import JobSpec
from app.settings import Settings
from app.store import Claim, Leases, Written
from app.worker.bookkeeping import Bookkeeping
from app.worker.commit import Committer, earlier
from app.worker.job import Job
from app.worker.progress import ProgressWriter

log = logging.getLogger("app.worker")


@dataclass(frozen=True, slots=True)
class Paused:
    """A run that stopped for client tools: the job's spec and the loop's checkpoint."""

    spec: JobSpec
    checkpoint: Checkpoint


def resume_of(claim: Claim) -> Resume | None:
    """Where a paused job's run goes on, with the client's outputs (None: a fresh run).

    The wait for the outputs is observed here (``TOOL_WAIT``).
    """
    if claim.checkpoint is None:
        return None
    outputs = claim.outputs
    resume = Resume(
        claim.checkpoint,
        None if outputs is None else outputs.by_call,
        None if outputs is None else outputs.received_ms,
    )
    waited_ms = (
        outputs.received_ms if outputs is not None else int(time.time() * 1000)
    ) - claim.checkpoint.paused_ms
    metrics.TOOL_WAIT.observe(max(0, waited_ms) / 1000)
    return resume


class Pauser:
    """Hands paused jobs to their clients, fenced."""

    def __init__(
        self,
        store: Leases,
        settings: Settings,
        books: Bookkeeping,
        progress: ProgressWriter,
        committer: Committer,
    ) -> None:
        self.store = store
        self.settings = settings
        self.books = books
        self.progress = progress
        self.committer = committer

    async def pause(self, job: Job, paused: Paused) -> None:
        """Put the job in ``requires_action`` with its checkpoint, and say how it went."""
        claim, spec = job.claim, paused.spec
        turn, events = await self.progress.last(job)
        state = paused.checkpoint.model_copy(update={"earlier": earlier(claim)})
        expires_ms = self._expires_ms(spec, state)
        action = RequiredAction.of(state, iso(datetime.fromtimestamp(expires_ms / 1000, tz=UTC)))
        last = state.turns[-1] if state.turns else None
        progress = Progress(
            phase="requires_action",
            turn=None if last is None else last.index,
            type=None if last is None else last.type,
            calls_left=state.work_remaining + state.retry_remaining,
        )

        async def pause() -> Written:
            return await self.store.pause(
                claim,
                state=state,
                action=action,
                expires_ms=expires_ms,
                progress=progress,
                turn=turn,
                events=events,
            )

        written, _ = await self.committer.settle(job, "pause", pause)
        self.books.catch_up()
        _paused(job, action, written)

    def _expires_ms(self, spec: JobSpec, state: Checkpoint) -> int:
        """When the wait for the outputs ends (epoch ms): it counts toward the deadline."""
        timeout_ms = spec.tool_timeout_ms or self.settings.tool_timeout_ms
        expires_ms = state.paused_ms + timeout_ms
        if spec.budget.deadline_ms is not None:
            expires_ms = min(expires_ms, state.started_ms + spec.budget.deadline_ms)
        return expires_ms


def _paused(job: Job, action: RequiredAction, written: Written | None) -> None:
    """The pause's span, metric and log line."""
    if job.span is not None:
        if written is Written.OURS:
            job.span.paused(len(action.tool_calls))
        else:
            job.span.stopped("pause-failed" if written is None else "stale")
    if written is Written.OURS:
        metrics.JOBS_PAUSED.inc()
        log.info(
            "job %s requires_action: %d tool call(s) for the client, until %s",
            job.id,
            len(action.tool_calls),
            action.expires_at,
        )
    elif written is not None:
        metrics.STALE_COMMITS.inc()
        log.warning("job %s: stale pause refused (lease lost or job cancelled)", job.id)
