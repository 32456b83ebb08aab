"""``POST /v1/chat/completions``: OpenAI's chat completions, answered by reprompt.

A JSON response format (``json_schema``, strict or not, or ``json_object``) makes the
request a job (``app.api.chat.job``): the worker runs the turn loop, and the answer is the
validated JSON, or an error in OpenAI's shape, never an invalid answer with 200. Without
one it is a plain call of the model from this process (``app.api.chat.call``), its tool
calls' arguments checked and re-asked. Both count against the caller's key like any
``/v1`` request: the bearer key, its rate share, its quotas (jobs), the caps.

Headers of every answer: ``x-reprompt-job-id`` (a job), ``x-reprompt-attempts`` (model
calls), ``x-reprompt-overhead-ms`` (the time not spent in model calls),
``x-reprompt-warning`` (fields sent and ignored).
"""

from __future__ import annotations

import secrets
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Final

from fastapi import APIRouter, Request
from fastapi.responses import Response, StreamingResponse
from pydantic import ValidationError
from pydantic_core import to_json
from starlette.responses import JSONResponse

from app import metrics
from app.api.chat.call import checked_call
from app.api.chat.completion import chunks, completion, message_of, usage_of
from app.api.chat.conversation import as_messages
from app.api.chat.errors import JOB_STATUS, ChatError
from app.api.chat.job import chat_param, job_spec
from app.api.chat.request import ChatRequest
from app.api.limits import stored_spec_json
from app.api.resources import BEARER_JSON, Caller
from app.core.turn.model import LLMRequest, ToolCall, ToolSpec
from app.core.turn.tools import Tool, Toolbox
from app.core.wire import codes
from app.core.wire.errors import InvalidInput, RepromptError
from app.store import JobView
from app.tracecontext import TraceContext

# A plain call's output cap when the request gives none.
DEFAULT_OUTPUT_TOKENS: Final = 1024
# Plain calls with tools: model calls in all when arguments keep failing their schema.
DEFAULT_TOOL_ATTEMPTS: Final = 3
# How long past its deadline a job is waited for before the answer is a 504 (the job goes
# on: GET /v1/jobs/{id}).
GRACE_MS: Final = 5_000
# Fields of OpenAI's request the service cannot honour: a 400 rather than a silent answer
# without them.
REFUSED: Final = {
    "logprobs": "log probabilities are not returned",
    "top_logprobs": "log probabilities are not returned",
    "audio": "audio output is not supported",
    "modalities": "only text output is supported",
    "prediction": "predicted outputs are not supported",
    "functions": "the legacy functions field is not supported; send tools",
    "function_call": "the legacy function_call field is not supported; send tool_choice",
    "web_search_options": "web search is not supported",
}

# OpenAI's error object, as the SDKs read it (``job_id`` and ``cause`` are reprompt's).
ERROR_SCHEMA: Final = {
    "type": "object",
    "required": ["error"],
    "properties": {
        "error": {
            "type": "object",
            "required": ["message", "type", "param", "code"],
            "properties": {
                "message": {"type": "string"},
                "type": {"type": "string"},
                "param": {"type": ["string", "null"]},
                "code": {"type": "string"},
                "job_id": {"type": "string"},
                "cause": {"type": ["string", "null"]},
            },
        }
    },
}

router = APIRouter(tags=["openai"], generate_unique_id_function=lambda route: route.name)


@dataclass(frozen=True, slots=True)
class Answer:
    """What the request is answered with, before it is written as a completion or chunks."""

    id: str
    created: int
    model: str
    message: dict[str, Any]
    finish_reason: str
    usage: dict[str, Any]
    attempts: int
    model_ms: int
    job_id: str | None = None
    headers: dict[str, str] = field(default_factory=dict)


@router.post(
    "/v1/chat/completions",
    summary="OpenAI-compatible chat completions (validated, re-asked structured output)",
    response_description="A chat.completion, or chat.completion.chunk events with stream.",
    openapi_extra={
        "requestBody": {
            "required": True,
            "content": {"application/json": {"schema": {"type": "object"}}},
        },
        "security": [{"bearer": []}],
    },
    responses={
        status: {"description": why, "content": {"application/json": {"schema": ERROR_SCHEMA}}}
        for status, why in {
            400: "The request; `code` is reprompt's (`invalid-input`), `param` the field.",
            401: "No valid API key.",
            404: "No such model (a plain call).",
            413: "The body is larger than the service takes.",
            415: "The body is not `application/json`.",
            422: "The budget was spent without a valid answer; the last diagnosis.",
            429: "Rate limit, quota, or the provider's: Retry-After.",
            500: "A bug: logged.",
            502: "The model provider failed.",
            503: "Not ready.",
            504: "The deadline passed.",
        }.items()
    },
)
async def chat_completions(request: Request) -> Response:
    """Answer the conversation; with a JSON response format, with validated JSON."""
    started = time.perf_counter()
    try:
        caller = await BEARER_JSON(request)
        try:
            chat = ChatRequest.model_validate_json(await request.body())
        except ValidationError as exc:
            raise ChatError.invalid(exc) from None
        _refuse(chat)
        if chat.structured:
            answer = await _job_answer(caller, chat, _trace(request))
        else:
            answer = await _plain_answer(caller, chat)
    except RepromptError as exc:
        _count("error")
        return ChatError.of(exc).response()
    except ChatError as exc:
        _count("error")
        return exc.response()
    _count("ok")
    headers = _headers(answer, chat, started)
    if chat.stream:
        include = chat.stream_options is not None and chat.stream_options.include_usage
        return StreamingResponse(
            answer_events(answer, include_usage=include),
            media_type="text/event-stream",
            headers={**headers, "cache-control": "no-cache"},
        )
    body = completion(
        answer.id, answer.created, answer.model, answer.message, answer.finish_reason, answer.usage
    )
    return JSONResponse(body, headers=headers)


async def answer_events(answer: Answer, *, include_usage: bool) -> AsyncIterator[bytes]:
    """The answer as Server-Sent Events, ``data: [DONE]`` last.

    For now the answer streams once it is valid; validated partials (while the attempt that
    passes is still being written) are to come through this one function.
    """
    usage = answer.usage if include_usage else None
    for event in chunks(
        answer.id, answer.created, answer.model, answer.message, answer.finish_reason, usage
    ):
        yield b"data: " + to_json(event) + b"\n\n"
    yield b"data: [DONE]\n\n"


def _refuse(chat: ChatRequest) -> None:
    extra = chat.model_extra or {}
    for name, why in REFUSED.items():
        value = extra.get(name)
        if not value or (name == "modalities" and value == ["text"]):
            continue
        raise ChatError(400, codes.INVALID_INPUT, f"{name}: {why}", param=name)
    if chat.n is not None and chat.n > 1:
        raise ChatError(
            400,
            codes.INVALID_INPUT,
            "n: one choice per request (reprompt.candidates asks for several answers and "
            "keeps the first valid one)",
            param="n",
        )


async def _job_answer(caller: Caller, chat: ChatRequest, trace: TraceContext | None) -> Answer:
    res, tenant = caller.res, caller.tenant
    _toolbox(chat)  # names unique, tool_choice one of them: named as the request names them
    spec = job_spec(chat)
    router = res.require_router()
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
    stored = stored_spec_json(spec, res.settings)
    deadline_ms: int = stored["budget"]["deadlineMs"]
    give_up = time.monotonic() + (deadline_ms + GRACE_MS) / 1000
    poll_ms = max(res.settings.max_wait_ms, 1000)
    async with res.fairness.waiting(tenant, for_ms=deadline_ms + GRACE_MS):
        job, _ = await res.store.submit(
            tenant=tenant,
            spec=stored,
            idempotency_key=None,
            metadata=dict(spec.metadata),
            model=spec.model or router.default,
            trace=trace,
            wait_ms=min(poll_ms, deadline_ms + GRACE_MS),
        )
        metrics.JOBS_SUBMITTED.inc()
        while not job.terminal and job.status != "requires_action":
            left_ms = int((give_up - time.monotonic()) * 1000)
            if left_ms <= 0:
                raise ChatError(
                    504,
                    codes.DEADLINE_EXCEEDED,
                    f"the job is still running past its deadline: GET /v1/jobs/{job.id}",
                    headers={"x-reprompt-job-id": job.id},
                    extra={"job_id": job.id},
                )
            waited = await res.store.wait(job.id, tenant=tenant, wait_ms=min(poll_ms, left_ms))
            if waited is None:  # pragma: no cover - the job expired while being waited on
                raise ChatError(500, codes.INTERNAL_ERROR, f"the job {job.id} is gone")
            job = waited
        if job.status == "requires_action":
            return await _tool_calls(caller, job)
    return _from_job(job)


async def _tool_calls(caller: Caller, job: JobView) -> Answer:
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
        created=_epoch(job.created_at),
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


def _from_job(job: JobView) -> Answer:
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
        created=_epoch(job.created_at),
        model=(ex.model if ex else None) or job.model or "",
        message=message_of(content),
        finish_reason="stop",
        usage=usage,
        attempts=attempts,
        model_ms=model_ms,
        job_id=job.id,
        headers=headers,
    )


async def _plain_answer(caller: Caller, chat: ChatRequest) -> Answer:
    res = caller.res
    router = res.require_router()
    try:
        router.resolve(chat.model)
    except RepromptError as exc:
        raise ChatError(404, "model_not_found", exc.detail, param="model") from None
    settings = res.settings
    output_tokens = chat.output_tokens or DEFAULT_OUTPUT_TOKENS
    if output_tokens > settings.max_output_tokens:
        raise ChatError(
            400,
            codes.INVALID_INPUT,
            f"max_completion_tokens: at most {settings.max_output_tokens}",
            param="max_completion_tokens",
        )
    options = chat.reprompt
    deadline_ms = min(
        options.deadline_ms or settings.job_default_deadline_ms, settings.max_deadline_ms
    )
    toolbox = _toolbox(chat)
    messages = as_messages(chat)
    text_chars = sum(len(m.content) for m in messages)
    if text_chars > settings.max_task_chars:
        raise ChatError(
            400,
            codes.INVALID_INPUT,
            f"messages: at most {settings.max_task_chars} characters of text",
            param="messages",
        )
    if options.max_cost_usd is not None:
        estimate = router.estimate_cost(chat.model, text_chars // 3 + 16, output_tokens)
        if estimate is not None and estimate > options.max_cost_usd:
            raise ChatError(
                422,
                codes.COST_LIMIT,
                f"the call could cost {estimate:.6f} USD, over reprompt.maxCostUsd",
                param="reprompt.maxCostUsd",
            )
    choice = chat.tool_choice
    request = LLMRequest(
        messages=messages,
        model=chat.model,
        tools=toolbox.specs if toolbox else (),
        tool_choice=choice if isinstance(choice, str) else "required",
        forced_tool=None if isinstance(choice, str) or choice is None else choice.function.name,
        max_output_tokens=output_tokens,
        temperature=chat.temperature,
        seed=chat.seed,
        timeout_s=deadline_ms / 1000,
    )
    attempts = options.max_turns or (DEFAULT_TOOL_ATTEMPTS if toolbox else 1)
    if attempts > settings.max_turns:
        raise ChatError(
            400,
            codes.INVALID_INPUT,
            f"reprompt.maxTurns: at most {settings.max_turns}",
            param="reprompt.maxTurns",
        )
    # A call held open counts as one of the tenant's open waits, as a long-poll does.
    async with res.fairness.waiting(caller.tenant, for_ms=deadline_ms):
        called = await checked_call(router, request, toolbox, attempts=attempts)
    response = called.response
    calls: tuple[ToolCall, ...] = response.tool_calls
    finish = "tool_calls" if calls else response.finish_reason
    if finish == "refusal":
        finish = "stop"
    message = message_of(response.content if not calls else response.content or None, calls)
    if response.refusal:
        message["refusal"] = response.refusal
    return Answer(
        id="chatcmpl-" + _call_id(),
        created=int(time.time()),
        model=response.model,
        message=message,
        finish_reason=finish,
        usage=usage_of(called.input_tokens, called.output_tokens, called.cached_tokens),
        attempts=called.calls,
        model_ms=called.model_ms,
    )


def _toolbox(chat: ChatRequest) -> Toolbox | None:
    choice = chat.tool_choice
    if not chat.tools:
        if choice is not None and choice not in ("auto", "none"):
            raise ChatError(
                400,
                codes.INVALID_INPUT,
                "tool_choice: the request has no tools",
                param="tool_choice",
            )
        return None
    names = [tool.function.name for tool in chat.tools]
    for name in names:
        if names.count(name) > 1:
            raise ChatError(
                400, codes.INVALID_INPUT, f"tools: the name {name!r} is used twice", param="tools"
            )
    if choice is not None and not isinstance(choice, str) and choice.function.name not in names:
        raise ChatError(
            400,
            codes.INVALID_INPUT,
            f"tool_choice: {choice.function.name!r} is not one of the tools",
            param="tool_choice",
        )
    return Toolbox(
        Tool(ToolSpec(t.function.name, t.function.description, t.function.parameters))
        for t in chat.tools
    )


def _headers(answer: Answer, chat: ChatRequest, started: float) -> dict[str, str]:
    elapsed_ms = (time.perf_counter() - started) * 1000
    headers = {
        **answer.headers,
        "x-reprompt-attempts": str(answer.attempts),
        "x-reprompt-overhead-ms": f"{max(0.0, elapsed_ms - answer.model_ms):.1f}",
    }
    ignored = chat.ignored + (["user"] if chat.user is not None else [])
    if ignored:
        headers["x-reprompt-warning"] = "ignored: " + ", ".join(ignored)
    return headers


def _count(outcome: str) -> None:
    metrics.CHAT_COMPLETIONS.labels(outcome=outcome).inc()


def _trace(request: Request) -> TraceContext | None:
    headers = request.headers
    parents = headers.getlist("traceparent")
    if not parents:
        return None
    return TraceContext.from_headers(parents, headers.getlist("tracestate"))


def _epoch(stamp: str) -> int:
    return int(datetime.fromisoformat(stamp.replace("Z", "+00:00")).timestamp())


def _call_id() -> str:
    return secrets.token_hex(12)
