"""A job's answer as it is written: the streaming side of ``/v1/generate``, and the one
piece any front door can reuse.

    async for event in job_events(store, job_id, tenant):   # Event(id, name, data)
        ...   # job_queued, job_start, turn_start, partial, partial_discarded, turn_end, job_end

``job_events`` yields a job's stored events from its first (or after ``after``) until
``job_end``, waiting on Redis for each next one; a ``partial`` event's data is a
``PartialAnswer`` (answer so far, complete and checked values only), a
``partial_discarded`` says that the partials of that turn do not stand. ``stream_job``
answers a request with them as Server-Sent Events and cancels the job when the client
leaves before ``job_end`` (the worker closes the model call at once).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator
from typing import Final

from fastapi import Request
from sse_starlette import EventSourceResponse, ServerSentEvent

from app.api.events import BATCH, END, PING_S, holding, stream_events
from app.api.fairness import Held
from app.api.resources import Caller
from app.store import Event, JobStore, JobView

log = logging.getLogger(__name__)

EVENT_STREAM: Final = "text/event-stream"
# Cancellations started as a client left, kept until done (a task nobody holds may vanish).
_leaving: set[asyncio.Task[object]] = set()


def wants_events(request: Request) -> bool:
    """Whether the client asked for Server-Sent Events (``Accept: text/event-stream``)."""
    return any(EVENT_STREAM in value for value in request.headers.getlist("accept"))


async def job_events(
    store: JobStore, job_id: str, tenant: str, *, after: str | None = None, held: Held | None = None
) -> AsyncIterator[Event]:
    """The job's events after ``after`` (all of them: None) until ``job_end``, as they come;
    ``held``: the caller's open wait, renewed while it waits."""
    backlog = await store.events(job_id, after=after, block_ms=0, count=BATCH)
    job = await store.get(job_id, tenant=tenant)
    ended = job is None or job.terminal
    async for event in stream_events(store, job_id, tenant, after, backlog, ended=ended, held=held):
        yield event


async def stream_job(caller: Caller, job: JobView) -> EventSourceResponse:
    """``job``'s events as the response, the job cancelled if the client leaves early."""
    res, tenant = caller.res, caller.tenant
    held = await res.fairness.hold(tenant)  # 429 now if this tenant holds too many open
    events = _until_left(res.store, job.id, tenant, held)
    return EventSourceResponse(
        holding(held, events),
        ping=PING_S,
        headers={"Cache-Control": "no-store", "Location": f"/v1/jobs/{job.id}"},
    )


async def _until_left(
    store: JobStore, job_id: str, tenant: str, held: Held
) -> AsyncIterator[ServerSentEvent]:
    ended = False
    try:
        async for event in job_events(store, job_id, tenant, held=held):
            yield ServerSentEvent(data=event.data, event=event.name, id=event.id)
            if event.name == END:
                ended = True
    finally:
        if not ended:
            # The client left (or the stream broke) before the end: nobody waits for the
            # answer any more, so the job stops and its model call is closed.
            task: asyncio.Task[object] = asyncio.get_running_loop().create_task(
                _cancel(store, job_id, tenant)
            )
            _leaving.add(task)
            task.add_done_callback(_leaving.discard)


async def _cancel(store: JobStore, job_id: str, tenant: str) -> object:
    try:
        return await store.cancel(job_id, tenant=tenant)
    except Exception:
        log.warning("job %s: cancelling after the client left failed", job_id, exc_info=True)
        return None
