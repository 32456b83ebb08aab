"""A chat request with a JSON response format as a job: submitted, then waited for or
streamed.

    answer = await job_answer(caller, chat, trace)           # the finished job's Answer
    job_id, events = await job_stream(caller, chat, trace)   # its chunks, as SSE events

Both raise ``ChatError`` before the job is queued (the request, a cap, the key's limits).
A job that ends in error is a ``ChatError`` too: the response's status, or, once a stream
has begun, an error event (``data: {"error": {...}}``, which the SDKs raise). A job that
pauses on client tools ends there: its calls go back to the caller as ``tool_calls``.

The stream sends the role first, then each validated partial and each discarded one as a
chunk with no delta and reprompt's event under ``reprompt`` (content an SDK shows cannot be
taken back, and only the whole answer is validated), then the content once the job has
succeeded (docs/openai-compatible.md#streaming).
"""

from __future__ import annotations

import asyncio
import json
import logging
import time
from collections.abc import AsyncGenerator, AsyncIterator
from datetime import datetime
from typing import Any, Final, cast

from pydantic_core import to_json
from sse_starlette import ServerSentEvent

from app import metrics
from app.api.chat.call import toolbox_of
from app.api.chat.completion import (
    Answer,
    chunks,
    extension_chunk,
    message_of,
    role_chunk,
    usage_of,
)
from app.api.chat.errors import JOB_STATUS, ChatError
from app.api.chat.images import gather_images
from app.api.chat.job import chat_param, job_spec
from app.api.chat.request import ChatRequest
from app.api.fairness import Held
from app.api.limits import stored_spec_json
from app.api.resources import Caller
from app.api.streaming import job_events
from app.core.turn.model import ToolCall
from app.core.wire import codes
from app.core.wire.errors import InvalidInput
from app.core.wire.partial import PartialAnswer, PartialDiscarded
from app.core.wire.spec import JobSpec
from app.store import Event, JobView
from app.tracecontext import TraceContext

log = logging.getLogger(__name__)

# How long past its deadline a job is waited for before the answer is a 504 (the job goes
# on: GET /v1/jobs/{id}).
GRACE_MS: Final = 5_000
# The job's events passed on to the caller as reprompt's extension chunks.
_PARTIALS: Final = frozenset({PartialAnswer.name, PartialDiscarded.name})
# Cancellations started as a client left a stream, kept until done.
_leaving: set[asyncio.Task[None]] = set()


async def job_answer(caller: Caller, chat: ChatRequest, trace: TraceContext | None) -> Answer:
    """The job's answer once it has ended (or paused on tools)."""
    res, tenant = caller.res, caller.tenant
    spec, stored, deadline_ms = await _prepared(caller, chat)
    give_up = time.monotonic() + (deadline_ms + GRACE_MS) / 1000
    poll_ms = max(res.settings.max_wait_ms, 1000)
    async with res.fairness.waiting(tenant, for_ms=deadline_ms + GRACE_MS):
        job = await _submit(
            caller, spec, stored, trace, wait_ms=min(poll_ms, deadline_ms + GRACE_MS)
        )
        while not job.terminal and job.status != "requires_action":
            left_ms = int((give_up - time.monotonic()) * 1000)
            if left_ms <= 0:
                raise _late(job.id)
            waited = await res.store.wait(job.id, tenant=tenant, wait_ms=min(poll_ms, left_ms))
            if waited is None:  # pragma: no cover - the job expired while being waited on
                raise ChatError(500, codes.INTERNAL_ERROR, f"the job {job.id} is gone")
            job = waited
        if job.status == "requires_action":
            return await tool_calls(caller, job)
    return from_job(job)


async def job_stream(
    caller: Caller, chat: ChatRequest, trace: TraceContext | None
) -> tuple[str, AsyncIterator[ServerSentEvent]]:
    """Queue the job now; its id and its chunks as Server-Sent Events, ``data: [DONE]``
    last (an error event instead when it fails). Leaving early cancels the job (the
    response, an ``EventSourceResponse``, hears the client leave while nothing is sent)."""
    res, tenant = caller.res, caller.tenant
    spec, stored, deadline_ms = await _prepared(caller, chat)
    held = await res.fairness.hold(tenant)  # 429 now if the key holds too many open
    try:
        job = await _submit(caller, spec, stored, trace, wait_ms=0)
    except BaseException:
        await held.release()
        raise
    include = chat.stream_options is not None and chat.stream_options.include_usage
    give_up = time.monotonic() + (deadline_ms + GRACE_MS) / 1000
    return job.id, _streamed(caller, job, chat.model, held, give_up, include_usage=include)


async def _streamed(
    caller: Caller,
    job: JobView,
    model: str,
    held: Held,
    give_up: float,
    *,
    include_usage: bool,
) -> AsyncIterator[ServerSentEvent]:
    res, tenant = caller.res, caller.tenant
    created = epoch(job.created_at)
    ended = False
    # An async generator (closed below, so its read of Redis stops with the stream).
    events = cast(AsyncGenerator[Event], job_events(res.store, job.id, tenant, held=held))
    try:
        yield _event(role_chunk(job.id, created, model))
        while True:
            left = give_up - time.monotonic()
            if left <= 0:
                raise _late(job.id)
            try:
                async with asyncio.timeout(left):  # around the read only, never a yield
                    event = await anext(events)
            except StopAsyncIteration:
                break
            except TimeoutError:
                raise _late(job.id) from None
            if event.name in _PARTIALS:
                reprompt = {"event": event.name, **json.loads(event.data)}
                yield _event(extension_chunk(job.id, created, model, reprompt))
            elif event.name in ("requires_action", "job_end"):
                break
        view = await res.store.get(job.id, tenant=tenant)
        if view is None:  # pragma: no cover - the job expired while being streamed
            raise ChatError(500, codes.INTERNAL_ERROR, f"the job {job.id} is gone")
        if view.status == "requires_action":
            answer = await tool_calls(caller, view)
        else:
            answer = from_job(view)
        ended = True
        usage = answer.usage if include_usage else None
        for chunk in chunks(
            answer.id, answer.created, answer.model, answer.message, answer.finish_reason, usage
        ):
            yield _event(chunk)
        yield ServerSentEvent(data="[DONE]")
        metrics.CHAT_COMPLETIONS.labels(outcome="ok").inc()
    except ChatError as exc:
        ended = ended or exc.status != 504  # past the deadline the job goes on, as without stream
        metrics.CHAT_COMPLETIONS.labels(outcome="error").inc()
        yield _event(exc.body())
    finally:
        # In a task of its own: when the client has left, this one is cancelled, and every
        # await here would be too.
        task = asyncio.get_running_loop().create_task(_after(caller, job.id, held, not ended))
        _leaving.add(task)
        task.add_done_callback(_leaving.discard)
        await events.aclose()


async def _after(caller: Caller, job_id: str, held: Held, cancel: bool) -> None:
    """Free the open wait; ``cancel``: the client left before the end, nobody waits for the
    answer, so the job stops (its model call is closed)."""
    await held.release()
    if not cancel:
        return
    try:
        await caller.res.store.cancel(job_id, tenant=caller.tenant)
    except Exception:
        log.warning("job %s: cancelling after the client left failed", job_id, exc_info=True)


async def _prepared(caller: Caller, chat: ChatRequest) -> tuple[JobSpec, dict[str, Any], int]:
    """The job, admitted for the caller; as stored; its deadline in ms."""
    toolbox_of(chat)  # names unique, tool_choice one of them: named as the request names them
    res = caller.res
    spec = job_spec(chat, await gather_images(chat, res.settings, res.outbound))
    try:
        caller.admit(spec)
    except InvalidInput as exc:
        first = exc.errors[0]
        field = first.field or ""
        if field == "model":
            raise ChatError(404, "model_not_found", first.detail, param="model") from None
        raise ChatError(
            400,
            exc.code,
            f"{chat_param(field)}: {first.detail}",
            param=chat_param(field) if field else None,
        ) from None
    stored = stored_spec_json(spec, caller.res.settings)
    deadline_ms: int = stored["budget"]["deadlineMs"]
    return spec, stored, deadline_ms


async def _submit(
    caller: Caller,
    spec: JobSpec,
    stored: dict[str, Any],
    trace: TraceContext | None,
    *,
    wait_ms: int,
) -> JobView:
    res = caller.res
    job, _ = await res.store.submit(
        tenant=caller.tenant,
        spec=stored,
        idempotency_key=None,
        metadata=dict(spec.metadata),
        model=spec.model or res.require_router().default,
        trace=trace,
        wait_ms=wait_ms,
    )
    metrics.JOBS_SUBMITTED.inc()
    return job


async def tool_calls(caller: Caller, job: JobView) -> Answer:
    """The model called tools (arguments checked by the job): they go back to the caller,
    who sends the results in its next request, a new job. This one ends here: cancelled,
    its record showing the calls."""
    action = job.required_action
    assert action is not None
    calls = tuple(
        ToolCall(call.id, call.name, to_json(call.arguments).decode()) for call in action.tool_calls
    )
    ended = await caller.res.store.cancel(job.id, tenant=caller.tenant)
    turns = (ended or job).turns
    return Answer(
        id=job.id,
        created=epoch(job.created_at),
        model=next((t.model for t in reversed(turns) if t.model), None) or job.model or "",
        message=message_of(None, calls),
        finish_reason="tool_calls",
        usage=usage_of(
            sum(t.usage.input_tokens for t in turns),
            sum(t.usage.output_tokens for t in turns),
            sum(t.usage.cached_input_tokens for t in turns),
        ),
        attempts=len(turns),
        model_ms=sum(t.latency_ms for t in turns),
        job_id=job.id,
        headers={"x-reprompt-job-id": job.id},
    )


def from_job(job: JobView) -> Answer:
    """The finished job as the answer; its error as a ``ChatError``."""
    envelope = job.result
    ex = envelope.execution
    attempts = ex.llm_calls if ex is not None else len(job.turns)
    model_ms = sum(turn.latency_ms for turn in job.turns)
    headers = {"x-reprompt-job-id": job.id}
    if envelope.status != codes.RESULT_SUCCESS:
        code = envelope.error or codes.INTERNAL_ERROR
        status = JOB_STATUS.get(code, 500)
        retry_after = None
        if status == 429:
            retry_after = max(1.0, codes.backoff_delay_ms(code, 0) / 1000)
        raise ChatError(
            status,
            code,
            envelope.detail or code,
            retry_after_s=retry_after,
            # The job has made its attempts: an SDK's own retry would spend the budget again.
            headers={**headers, "x-reprompt-attempts": str(attempts), "x-should-retry": "false"},
            extra={"job_id": job.id, "cause": envelope.cause},
        )
    usage = usage_of(
        ex.input_tokens if ex else 0,
        ex.output_tokens if ex else 0,
        ex.cached_input_tokens if ex else 0,
    )
    content = to_json(envelope.data).decode()
    return Answer(
        id=job.id,
        created=epoch(job.created_at),
        model=(ex.model if ex else None) or job.model or "",
        message=message_of(content),
        finish_reason="stop",
        usage=usage,
        attempts=attempts,
        model_ms=model_ms,
        job_id=job.id,
        headers=headers,
    )


def sse(event: dict[str, Any]) -> bytes:
    return b"data: " + to_json(event) + b"\n\n"


def _event(data: dict[str, Any]) -> ServerSentEvent:
    return ServerSentEvent(data=to_json(data).decode())


def epoch(stamp: str) -> int:
    return int(datetime.fromisoformat(stamp.replace("Z", "+00:00")).timestamp())


def _late(job_id: str) -> ChatError:
    return ChatError(
        504,
        codes.DEADLINE_EXCEEDED,
        f"the job is still running past its deadline: GET /v1/jobs/{job_id}",
        headers={"x-reprompt-job-id": job_id},
        extra={"job_id": job_id},
    )
