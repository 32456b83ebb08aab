"""A streaming job's partials on their way to its events: written as soon as they come.

The loop hands each ``partial``/``partial_discarded`` to ``Partials.sink(job)`` from inside
the model call; it joins the job's outbox (after the ``turn_start`` already there, so the
events keep their order) and a write starts at once, or right after the one under way. A
partial still waiting when a newer one of the same turn comes is replaced by it (each
carries the whole answer so far): a fast model costs a write per Redis round trip, not
one per value.
"""

from __future__ import annotations

import asyncio
import logging
import time

from app import metrics
from app.core.turn.runtime import PartialSink
from app.core.wire.events import TurnStarted
from app.core.wire.partial import PartialAnswer, PartialDiscarded, PartialEvent
from app.worker.job import Job
from app.worker.progress import ProgressWriter

log = logging.getLogger("app.worker")


class Partials:
    """Streams each job's partials into its events through ``progress``."""

    def __init__(self, progress: ProgressWriter) -> None:
        self.progress = progress
        self._pumps: dict[str, asyncio.Task[None]] = {}
        # Per job: the turn whose first partial is still to be written, and when its call
        # began (monotonic), for the time-to-first-partial histogram.
        self._first: dict[str, tuple[int, float, str]] = {}
        self._seen: dict[str, int] = {}  # per job: the last turn a partial was noted for

    def sink(self, job: Job) -> PartialSink:
        """The loop's ``Runtime.partials`` for ``job``."""

        def take(event: PartialEvent) -> None:
            self._note(job, event)

        return take

    def _note(self, job: Job, event: PartialEvent) -> None:
        events = job.events
        if isinstance(event, PartialAnswer):
            metrics.STREAM_PARTIALS.labels("partial").inc()
            if self._seen.get(job.id) != event.turn:
                self._seen[job.id] = event.turn
                model = _model(job)
                metrics.STREAM_FIRST_FIELD.labels(model).observe(event.elapsed_ms / 1000)
                began = time.monotonic() - event.elapsed_ms / 1000
                self._first[job.id] = (event.turn, began, model)
            last = events[-1][1] if events else None
            if isinstance(last, PartialAnswer) and last.turn == event.turn:
                events[-1] = (event.name, event)  # the newer one says all the older did
            else:
                events.append((event.name, event))
        else:
            metrics.STREAM_PARTIALS.labels("discarded").inc()
            events.append((PartialDiscarded.name, event))
        if job.id not in self._pumps and not job.committing:
            self._pumps[job.id] = asyncio.create_task(self._pump(job))

    async def _pump(self, job: Job) -> None:
        """Write the job's outbox until nothing is left, one write at a time."""
        try:
            while job.pending and job.progress is not None and not job.committing:
                if job.stopped is not None:
                    return
                writing = self.progress.flush_soon(job)
                if writing is None:
                    return
                await asyncio.gather(writing, return_exceptions=True)
                first = self._first.pop(job.id, None)
                if first is not None:
                    _, began, model = first
                    metrics.STREAM_FIRST_PARTIAL.labels(model).observe(time.monotonic() - began)
        except Exception:  # best effort, as every progress write: the commit carries the rest
            log.warning("job %s: writing partials failed", job.id, exc_info=True)
        finally:
            self._pumps.pop(job.id, None)

    def forget(self, job: Job) -> None:
        """The job ended here: nothing more to note for it."""
        self._first.pop(job.id, None)
        self._seen.pop(job.id, None)


def _model(job: Job) -> str:
    """The configured model (or route) of the job's current call: a bounded label."""
    progress = job.progress
    if isinstance(progress, TurnStarted) and progress.model:
        return progress.model
    return "default"
