"""A job's end: its commit (fenced, tried through a Redis blip), or its release on drain.

A blip does not discard a paid answer: the last write is retried with backoff while the
heartbeats go on, until Redis answers or the lease is long gone (then the reaper runs the
job again, and a late write still records the paid turn).
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable

from app import metrics
from app.core.turn.conversation import TranscriptEntry
from app.core.wire import codes
from app.core.wire.envelope import CANCELLED_BY_CLIENT, Envelope
from app.core.wire.record import Rejection, Spend, TurnRecord
from app.settings import Settings
from app.store import Claim, Leases, StoreUnavailable, Written
from app.worker.bookkeeping import Bookkeeping, ended
from app.worker.job import Job
from app.worker.progress import ProgressWriter

log = logging.getLogger("app.worker")


class Committer:
    """Writes a job's end. ``room``: the worker's free slots now."""

    def __init__(
        self,
        store: Leases,
        settings: Settings,
        books: Bookkeeping,
        progress: ProgressWriter,
        room: Callable[[], int],
    ) -> None:
        self.store = store
        self.settings = settings
        self.books = books
        self.progress = progress
        self.room = room

    async def commit(
        self,
        job: Job,
        envelope: Envelope,
        history: tuple[Rejection, ...],
        transcript: tuple[TranscriptEntry, ...],
    ) -> None:
        """Commit the end, with whatever the outbox still holds, in one fenced script."""
        claim = job.claim
        turn, events = await self.progress.last(job)
        envelope = envelope.with_earlier(earlier(claim))

        def complete() -> Awaitable[Written]:  # the store's coroutine, with no other around it
            return self.store.complete(
                claim,
                envelope=envelope,
                history=history,
                transcript=transcript,
                turn=turn,
                events=events,
                room=self.room() + 1,  # this job's slot too
            )

        written, tries = await self.settle(job, "commit", complete)
        self.books.catch_up()
        if written is None:
            if job.span is not None:
                job.span.stopped("commit-failed")
            return
        if written is Written.ENDED and job.turns:
            # Ended first, most likely cancelled as the answer came: the cancel bills it.
            await self.spend(job, as_cancelled(envelope), job.turns)
        committed = written is Written.OURS
        if not committed and tries > 1:
            # An earlier try may have committed and lost only its reply.
            committed = await self._committed(job, envelope)
        duration_s = time.monotonic() - job.started
        if job.span is not None:
            job.span.ended(envelope, committed=committed)
        if not committed:
            metrics.STALE_COMMITS.inc()
            log.warning(
                "job %s: stale commit refused (lease lost or job cancelled; attempt %d, %.3fs)",
                job.id,
                claim.attempt,
                duration_s,
            )
            return
        ended(job.id, envelope, duration_s)

    async def settle(
        self, job: Job, what: str, write: Callable[[], Awaitable[Written]]
    ) -> tuple[Written | None, int]:
        """The job's last write (commit or pause), tried through a blip: ``(reply, tries)``.

        ``(None, tries)`` when it gave up: the lease runs out and the job runs again.
        """
        give_up = time.monotonic() + 2 * self.settings.lease_ms / 1000
        wait_s = 0.1
        tries = 0
        while True:
            tries += 1
            try:
                return await write(), tries
            except (StoreUnavailable, OSError) as exc:
                self.books.catch_up()
                if time.monotonic() + wait_s > give_up:
                    # The lease runs out and the reaper requeues the job: it is not lost.
                    log.error("job %s: %s failed, the job will be run again: %r", job.id, what, exc)
                    return None, tries
                log.warning("job %s: %s failed (%r), retrying in %.1fs", job.id, what, exc, wait_s)
                await asyncio.sleep(wait_s)
                wait_s = min(wait_s * 2, 2.0)

    async def _committed(self, job: Job, envelope: Envelope) -> bool:
        """Whether the job already holds exactly this result (best effort)."""
        try:
            view = await self.store.result_of(job.id)
        except Exception:
            return False
        return view is not None and view.terminal and view.result == envelope

    async def spend(self, job: Job, envelope: Envelope, turns: tuple[TurnRecord, ...]) -> None:
        """Bill a job cancelled under this claim with what its run spent (once; nothing for a
        job that ended otherwise)."""
        claim = job.claim
        # A resumed run's turns begin with those before its pause: stored under their claim.
        made = turns if claim.checkpoint is None else turns[len(claim.checkpoint.turns) :]
        records = tuple(turn.model_copy(update={"job_attempt": claim.attempt}) for turn in made)

        def spend() -> Awaitable[int]:
            return self.store.spend(claim, envelope=envelope, turns=records)

        try:
            added = await spend()
        except (StoreUnavailable, OSError) as exc:  # once more: the script is idempotent
            log.warning("job %s: recording the cancelled job's spend failed (%r)", job.id, exc)
            try:
                added = await spend()
            except (StoreUnavailable, OSError):
                return
        if added > 0:
            log.info("job %s: cancelled; %d model call(s) of its run billed", job.id, added)

    async def release(self, job: Job) -> None:
        """Give the job back to the front of its queue (a drain), its attempt not counted."""
        try:
            released = await self.store.release(job.claim)
        except Exception as exc:
            # The lease runs out and the reaper requeues it (counting an attempt).
            log.warning("job %s: release failed: %r", job.id, exc)
            return
        if released:
            log.info("job %s released to the queue", job.id)


def as_cancelled(envelope: Envelope) -> Envelope:
    """A run's end as a cancel that came first makes it: its calls all counted, all wasted."""
    ex = envelope.execution
    if ex is not None:
        ex = ex.model_copy(update={"wasted_tokens": ex.tokens_used, "wasted_cost": ex.cost})
    return Envelope.failure(
        codes.CANCELLED, CANCELLED_BY_CLIENT, warnings=envelope.warnings, execution=ex
    )


def earlier(claim: Claim) -> Spend | None:
    """What calls outside the loop's own records spent: lost attempts before a pause (the
    checkpoint carries them) and since it (the store's running total)."""
    carried = None if claim.checkpoint is None else claim.checkpoint.earlier
    if carried is None:
        return claim.earlier
    return carried.plus(claim.earlier)
