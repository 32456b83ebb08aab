"""``GET /v1/jobs/{id}/events``: a job's events as Server-Sent Events.

Every stored event is sent with ``id:`` (its number), ``event:`` (its name:
``job_queued``, ``job_start``, ``turn_start``, ``turn_end``, ``job_requeued``,
``requires_action``, ``tool_outputs_received``, ``tool_outputs``, ``partial``,
``partial_discarded``, ``job_end``) and
``data:`` (JSON). ``Last-Event-ID`` resumes after that id. ``requires_action`` comes as
soon as the job pauses for client tools, and the stream stays open: the resumed run's
events follow once the outputs are posted. The stream ends after ``job_end``; while
nothing happens, ``: ping`` comments keep proxies from closing it::

    curl -N http://127.0.0.1:8080/v1/jobs/$ID/events
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Annotated, Final

from fastapi import APIRouter, Header
from sse_starlette import EventSourceResponse, ServerSentEvent

from app.api.fairness import Held
from app.api.problems import NotFound
from app.api.resources import Authed
from app.api.schemas import problems
from app.core.turn.checkpoint import RequiredAction
from app.core.wire.base import Wire
from app.core.wire.events import (
    JobEnded,
    QueueEvent,
    ToolOutputsEvent,
    ToolsAnswered,
    TurnStarted,
    TurnSummary,
)
from app.core.wire.partial import PartialAnswer, PartialDiscarded
from app.store import Event, JobStore

# The data of each event, by name (documented in openapi.json as ``x-sse-events``). The
# queue's own events (job_queued, job_start, job_requeued) are written by the Lua scripts.
SSE_EVENTS: Final[dict[str, type[Wire]]] = {
    TurnStarted.name: TurnStarted,
    "turn_end": TurnSummary,
    JobEnded.name: JobEnded,
    "job_queued": QueueEvent,
    "job_start": QueueEvent,
    "job_requeued": QueueEvent,
    "requires_action": RequiredAction,
    "tool_outputs_received": ToolOutputsEvent,
    ToolsAnswered.name: ToolsAnswered,
    PartialAnswer.name: PartialAnswer,  # streaming jobs (#31): docs/streaming.md
    PartialDiscarded.name: PartialDiscarded,
}
PING_S: Final = 15
# How long one read blocks before the job is looked at again (it may have expired).
BLOCK_MS: Final = 10_000
BATCH: Final = 100
END: Final = "job_end"

router = APIRouter(tags=["jobs"])

# An event's ``id:``: its number in the job (app/store/reading.py reads it back).
EVENT_ID_PATTERN: Final = r"^[0-9]{1,9}$"
_STREAM_EXAMPLE: Final = (
    "id: 3\nevent: turn_start\n"
    'data: {"turn": 0, "type": "must_return", "attempt": 1, "model": null, …}\n\n'
    "id: 4\nevent: turn_end\n"
    'data: {"turn": 0, "result": "invalid", "errorCode": "llm-invalid-output", …}\n\n'
    "id: 7\nevent: job_end\n"
    'data: {"status": "succeeded", "result": {"status": "success", …}}\n\n'
)


@router.get(
    "/v1/jobs/{job_id}/events",
    summary="Stream a job's events (SSE)",
    response_class=EventSourceResponse,
    responses={
        200: {
            "description": "text/event-stream until job_end.",
            "content": {
                "text/event-stream": {"schema": {"type": "string"}, "example": _STREAM_EXAMPLE}
            },
        },
        **problems(401, 404, 422, 503),
    },
)
async def job_events(
    job_id: str,
    caller: Authed,
    last_event_id: Annotated[
        str | None,
        Header(
            alias="Last-Event-ID",
            max_length=9,
            pattern=EVENT_ID_PATTERN,
            description="Resume after this event id (the `id:` of the last event seen: a "
            "decimal number, 1 to 9 digits).",
        ),
    ] = None,
) -> EventSourceResponse:
    res, tenant = caller.res, caller.tenant
    job = await res.store.get(job_id, tenant=tenant)
    if job is None:
        raise NotFound(f"no job {job_id[:64]!r}")
    # Read the backlog before answering: a malformed Last-Event-ID is still a 422 here.
    backlog = await res.store.events(job.id, after=last_event_id, block_ms=0, count=BATCH)
    held = await res.fairness.hold(tenant)  # 429 now if this tenant holds too many open
    events = stream_events(
        res.store, job.id, tenant, last_event_id, backlog, ended=job.terminal, held=held
    )
    stream = (_sse(event) async for event in events)
    # no-store: a tenant's events are never kept by a cache (older sse-starlette sends
    # no-cache by default).
    return EventSourceResponse(
        holding(held, stream), ping=PING_S, headers={"Cache-Control": "no-store"}
    )


async def holding(
    held: Held, stream: AsyncIterator[ServerSentEvent]
) -> AsyncIterator[ServerSentEvent]:
    """The stream, counted among the tenant's open waits while it runs (a stream never
    started is freed when its lease ends)."""
    try:
        async for event in stream:
            yield event
    finally:
        await held.release()


async def stream_events(
    store: JobStore,
    job_id: str,
    tenant: str,
    after: str | None,
    batch: list[Event],
    *,
    ended: bool,
    held: Held | None = None,
) -> AsyncIterator[Event]:
    """A job's events from ``batch`` on, until ``job_end`` (``app.api.streaming`` reuses it).

    ``ended``: the job was terminal before ``batch`` was read, so nothing follows it;
    ``held``: the stream's open wait, renewed as it goes on.
    """
    while True:
        for event in batch:
            after = event.id
            yield event
            if event.name == END:
                return
        if len(batch) == BATCH:
            batch = await store.events(job_id, after=after, block_ms=0, count=BATCH)
            continue
        if ended:
            return  # resumed past job_end, or job_end was trimmed away
        if held is not None:
            await held.keep()
        batch = await store.events(job_id, after=after, block_ms=BLOCK_MS, count=BATCH)
        if batch:
            continue
        job = await store.get(job_id, tenant=tenant)
        if job is None:
            return  # expired (retention) while we waited
        if job.terminal:
            # Ended between the read and the look: what it wrote last is there now.
            ended = True
            batch = await store.events(job_id, after=after, block_ms=0, count=BATCH)


def _sse(event: Event) -> ServerSentEvent:
    # The JSON as the store holds it: written once by the event's model, never re-encoded.
    return ServerSentEvent(data=event.data, event=event.name, id=event.id)
