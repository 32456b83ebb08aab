"""A running job's progress: the loop's events, written once a phase has lasted a while.

A job's events, turn record and progress wait in the job (``Job.events``, ``turn``,
``progress``) and are written once it has stayed ``FLUSH_AFTER_S`` in one phase (a model
call, a tool call), with the next write, or with the commit. So a watcher sees a call in
flight within that much of its start, and a job whose every phase is shorter costs no
progress write at all.
"""

from __future__ import annotations

import asyncio
import functools
import logging
from collections.abc import Awaitable, Callable
from typing import Final

from app import metrics
from app.core.wire.base import Wire
from app.core.wire.envelope import Progress
from app.core.wire.events import LoopEvent, ToolsAnswered, TurnEnded, TurnStarted
from app.core.wire.record import TurnRecord
from app.store import Leases, Written
from app.worker.bookkeeping import Bookkeeping, count_turn
from app.worker.job import Job, LeaseLost

log = logging.getLogger("app.worker")

# How long a job stays in one phase with something unwritten before it is written.
FLUSH_AFTER_S: Final = 1.0
# Progress writes in flight at once, for all jobs together: a burst (hundreds of jobs whose
# calls all outlast FLUSH_AFTER_S) must not take the pool from the heartbeats and commits;
# the rest wait their turn, or go with the commit if it comes first.
FLUSHES_AT_ONCE: Final = 16
# Progress writes that fail for a transport reason are tried this many times in all.
WRITE_TRIES: Final = 3


class ProgressWriter:
    """Mirrors the loop's events into each job's outbox, the metrics and the trace."""

    def __init__(self, store: Leases, books: Bookkeeping) -> None:
        self.store = store
        self.books = books
        self._flushes = asyncio.Semaphore(FLUSHES_AT_ONCE)

    def trace(self, job: Job, event: LoopEvent) -> Awaitable[None] | None:
        """The loop's tracer for ``job``: done here (None), or the coroutine to await.

        A coroutine only for a turn's end while the turn before waits to be written: it
        writes that one first.
        """
        if job.span is not None:
            job.span.on_event(event)
        if isinstance(event, TurnEnded):
            # The call was made and paid for, whoever owns the job now: counted once the
            # job waits (the commit's reply, the next model call's answer).
            self.books.owe(job.id, functools.partial(count_turn, event))
            if job.turn is not None:  # one record per write: flush the one before
                return self._flushed_then(job, event)
        self._note(job, event)
        return None

    async def _flushed_then(self, job: Job, event: TurnEnded) -> None:
        await self.flush(job)
        self._note(job, event)

    def _note(self, job: Job, event: LoopEvent) -> None:
        """Put ``event`` in the job's outbox, due once this new phase has lasted."""
        if isinstance(event, ToolsAnswered):
            self.books.owe(job.id, functools.partial(metrics.record_tool_calls, event.calls))
            job.events.append((event.name, event))
        elif isinstance(event, TurnEnded):
            job.turn = event.record.model_copy(update={"job_attempt": job.claim.attempt})
            job.events.append((event.name, event.summary()))
            job.progress = event
        else:
            job.events.append((event.name, event))
            job.progress = event
        # One timer per job, moved on lazily when it fires early.
        loop = asyncio.get_running_loop()
        job.flush_at = loop.time() + FLUSH_AFTER_S
        if job.flush is None:
            job.flush = loop.call_at(job.flush_at, self._flush_soon, job)
        if job.stopped is not None:
            raise LeaseLost(job.id)

    def _flush_soon(self, job: Job) -> None:
        loop = asyncio.get_running_loop()
        if loop.time() < job.flush_at:  # an event came since: its phase has not lasted
            job.flush = loop.call_at(job.flush_at, self._flush_soon, job)
            return
        job.flush = None
        if job.pending and not job.committing and job.flushing is None:
            job.flushing = asyncio.create_task(self._flush_in_background(job))

    def flush_soon(self, job: Job) -> asyncio.Task[None] | None:
        """Write the outbox now, in the background (a streamed partial must not wait for
        the phase to last); the write already under way, if one is; None while committing."""
        if job.committing:
            return None
        if job.flushing is None and job.pending:
            job.flushing = asyncio.create_task(self._flush_in_background(job))
        return job.flushing

    async def _flush_in_background(self, job: Job) -> None:
        try:
            async with self._flushes:
                job.writing = True
                await self.flush(job)
        finally:
            job.flushing = None
            job.writing = False

    async def flush(self, job: Job) -> None:
        """Write the outbox: the pending turn record, events and progress, in one script."""
        if job.flush is not None:
            job.flush.cancel()
            job.flush = None
        if not job.pending or job.progress is None:
            return
        turn, events, progress = job.turn, job.events, progress_of(job.progress)
        job.turn, job.events = None, []
        claim = job.claim
        written = await self._retrying(
            job,
            "progress",
            lambda: self.store.write(claim, progress=progress, turn=turn, events=events),
        )
        self.books.catch_up()
        if written is None or written is Written.OURS:
            return  # given up on a transport error: progress is best effort
        if job.stopped is None:  # else we already know why, and stop anyway
            metrics.STALE_COMMITS.inc()
            log.warning(
                "job %s: stale write refused (lease lost or job cancelled); dropping the job",
                job.id,
            )
            job.stop("lease-lost")

    async def _retrying(
        self, job: Job, what: str, call: Callable[[], Awaitable[Written]]
    ) -> Written | None:
        """The reply of a progress write, tried ``WRITE_TRIES`` times; None if all failed."""
        for attempt in range(1, WRITE_TRIES + 1):
            try:
                return await call()
            except Exception as exc:
                self.books.catch_up()
                if attempt == WRITE_TRIES:
                    log.warning("job %s: %s failed %d times: %r", job.id, what, attempt, exc)
                    return None
                await asyncio.sleep(0.2 * attempt)
        raise AssertionError("unreachable")  # pragma: no cover

    async def last(self, job: Job) -> tuple[TurnRecord | None, list[tuple[str, Wire]]]:
        """Stop flushing the outbox and take what it holds: it goes with the last write."""
        job.committing = True
        if job.flush is not None:
            job.flush.cancel()
            job.flush = None
        if job.flushing is not None:
            if not job.writing:  # still waiting for its turn: the last write carries it
                job.flushing.cancel()
            await asyncio.gather(job.flushing, return_exceptions=True)
        turn, events = job.turn, job.events
        job.turn, job.events = None, []
        return turn, events


def progress_of(event: TurnStarted | TurnEnded) -> Progress:
    """What the in-progress envelope shows after ``event``."""
    if isinstance(event, TurnEnded):
        record = event.record
        return Progress(
            phase="turn-done",
            turn=record.index,
            type=record.type,
            attempt=record.attempt,
            remaining=event.remaining,
            calls_left=event.calls_left,
            last_outcome=record.outcome,
            last_error=record.error_code,
        )
    return Progress(
        phase="model-call",
        turn=event.turn,
        type=event.type,
        attempt=event.attempt,
        remaining=event.remaining,
        model=event.model,
    )
