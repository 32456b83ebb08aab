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
from typing import Final

from fastapi import APIRouter, Request
from fastapi.responses import Response, StreamingResponse
from pydantic import ValidationError
from sse_starlette import EventSourceResponse
from starlette.responses import JSONResponse

from app import metrics
from app.api.chat.call import checked_call, toolbox_of
from app.api.chat.completion import Answer, chunks, completion, message_of, role_chunk, usage_of
from app.api.chat.conversation import as_messages
from app.api.chat.errors import ChatError
from app.api.chat.images import gather_images
from app.api.chat.jobs import job_answer, job_stream, sse
from app.api.chat.request import ChatRequest
from app.api.events import PING_S
from app.api.resources import BEARER_JSON, Caller
from app.core.turn.model import LLMRequest, ToolCall
from app.core.wire import codes
from app.core.wire.errors import RepromptError
from app.tracecontext import TraceContext

# A plain call's output cap when the request gives none.
DEFAULT_OUTPUT_TOKENS: Final = 1024
# Plain calls with tools: model calls in all when arguments keep failing their schema.
DEFAULT_TOOL_ATTEMPTS: Final = 3
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
        if chat.structured and chat.stream:
            job_id, events = await job_stream(caller, chat, _trace(request))
            return EventSourceResponse(
                events,
                ping=PING_S,
                headers={
                    **_warning(chat),
                    "x-reprompt-job-id": job_id,
                    "cache-control": "no-cache",
                },
            )
        if chat.structured:
            answer = await job_answer(caller, chat, _trace(request))
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
    """A finished answer (a plain call's) as Server-Sent Events, ``data: [DONE]`` last. A
    job's answer streams with its validated partials first: ``app.api.chat.jobs``."""
    yield sse(role_chunk(answer.id, answer.created, answer.model))
    usage = answer.usage if include_usage else None
    for event in chunks(
        answer.id, answer.created, answer.model, answer.message, answer.finish_reason, usage
    ):
        yield sse(event)
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
    toolbox = toolbox_of(chat)
    messages = as_messages(chat, await gather_images(chat, settings, res.outbound))
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


def _headers(answer: Answer, chat: ChatRequest, started: float) -> dict[str, str]:
    elapsed_ms = (time.perf_counter() - started) * 1000
    return {
        **answer.headers,
        "x-reprompt-attempts": str(answer.attempts),
        "x-reprompt-overhead-ms": f"{max(0.0, elapsed_ms - answer.model_ms):.1f}",
        **_warning(chat),
    }


def _warning(chat: ChatRequest) -> dict[str, str]:
    ignored = chat.ignored + (["user"] if chat.user is not None else [])
    return {"x-reprompt-warning": "ignored: " + ", ".join(ignored)} if ignored else {}


def _count(outcome: str) -> None:
    metrics.CHAT_COMPLETIONS.labels(outcome=outcome).inc()


def _trace(request: Request) -> TraceContext | None:
    headers = request.headers
    parents = headers.getlist("traceparent")
    if not parents:
        return None
    return TraceContext.from_headers(parents, headers.getlist("tracestate"))


def _call_id() -> str:
    return secrets.token_hex(12)
