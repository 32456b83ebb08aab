"""The job endpoints: submit, read (with long-poll), list, cancel, and submit-and-wait.

POST /v1/jobs                 202 + Location (200 on an Idempotency-Key replay)
GET  /v1/jobs/{id}?waitMs=    the job; waits up to waitMs for it to end
GET  /v1/jobs?cursor=&limit=&status=
POST /v1/jobs/{id}/cancel
POST /v1/jobs/{id}/tool-outputs   answer a job's requires_action; it goes on
POST /v1/generate?waitMs=     200 with the finished job, or 202 + Location
"""

from __future__ import annotations

import contextlib
import json
from typing import Annotated, Final, Literal
from urllib.parse import urlencode

from fastapi import APIRouter, Header, Query, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import Response
from pydantic import ValidationError
from pydantic_core import to_json

from app import metrics
from app.api.limits import clamp_wait, stored_spec_json
from app.api.problems import NotFound
from app.api.resources import Authed, AuthedJson, Caller
from app.api.schemas import JOB_EXAMPLES, JobList, ToolOutputsBody, problems
from app.api.streaming import stream_job, wants_events
from app.core.admission.caps import check_data
from app.core.turn.checkpoint import ToolOutput
from app.core.wire.job import Job
from app.core.wire.spec import JobSpec
from app.store import JobView, public_job_json
from app.tracecontext import MAX_TRACESTATE, TraceContext

DEFAULT_GENERATE_WAIT_MS: Final = 30_000
DEFAULT_PAGE: Final = 20
MAX_PAGE: Final = 100
# A list cursor: a job id (30 characters) in URL-safe base64 without padding (listing.py).
CURSOR_PATTERN: Final = r"^[A-Za-z0-9_-]{40}$"
# How soon a client should look again at a job that is not finished.
POLL_AFTER_S: Final = "1"
TRACEPARENT_EXAMPLE: Final = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"


IDEMPOTENCY_KEY_CHARS: Final = 255
IdempotencyKey = Annotated[
    str | None,
    Header(
        alias="Idempotency-Key",
        min_length=1,
        max_length=IDEMPOTENCY_KEY_CHARS,
        description="Same key and same body: the same job, not a second one (for "
        "REPROMPT_IDEMPOTENCY_TTL_S, default 24 h). Same key, different body: 422. "
        "Keys are scoped to the tenant.",
    ),
]
WaitMs = Annotated[
    int,
    Query(
        alias="waitMs",
        ge=0,
        description="Wait up to this long for the job to end (long-poll). Values above "
        "the service's cap (REPROMPT_MAX_WAIT_MS, default 60000) wait only up to the cap.",
    ),
]

# The job's JSON body, read by the handler (``job_spec``), documented as FastAPI documents
# a declared body: the JobSpec component (added by app.api.app) and its examples. W3C trace
# context: read from the request (a header that is not valid is ignored, never a 4xx).
_JOB_INPUTS = {
    "requestBody": {
        "required": True,
        "content": {
            "application/json": {
                "schema": {"$ref": "#/components/schemas/JobSpec"},
                "examples": JOB_EXAMPLES,
            }
        },
    },
    "parameters": [
        {
            "name": "traceparent",
            "in": "header",
            "required": False,
            "description": "W3C trace context: the worker's span of this job is a child of "
            "this span when the service exports traces (docs/tracing.md). Not valid: ignored.",
            "schema": {"type": "string", "example": TRACEPARENT_EXAMPLE},
        },
        {
            "name": "tracestate",
            "in": "header",
            "required": False,
            "description": f"W3C trace context, with a valid traceparent; up to "
            f"{MAX_TRACESTATE} characters. Not valid: ignored.",
            "schema": {"type": "string"},
        },
    ],
}
# The models of the bodies the handlers read themselves, for the OpenAPI components.
BODY_MODELS: Final = (JobSpec,)

_LOCATION = {"Location": {"description": "/v1/jobs/{id}", "schema": {"type": "string"}}}
_RETRY_AFTER = {
    "Retry-After": {"description": "Seconds before polling again.", "schema": {"type": "string"}}
}


# list_jobs writes JobList's fields itself, in this order.
if tuple(JobList.model_fields) != ("jobs", "next"):  # pragma: no cover - a change to JobList
    raise RuntimeError(f"list_jobs writes jobs and next, JobList has {tuple(JobList.model_fields)}")

# The app includes this router first; its operationIds are the handlers' names.
router = APIRouter(tags=["jobs"], generate_unique_id_function=lambda route: route.name)


async def job_spec(request: Request) -> JobSpec:
    """The request's JSON body as a ``JobSpec``, validated straight from its bytes.

    A body that fails that is read again as FastAPI reads a declared body
    (``_as_declared``): the same answer, and a 422 naming the same fields as every other
    route's. (``Bearer(json_body=True)`` has refused a body that is not JSON: 415.)
    """
    body = await request.body()
    if body:
        try:
            return JobSpec.model_validate_json(body)
        except ValidationError:
            pass
    return _as_declared(body)


def _as_declared(body: bytes) -> JobSpec:
    """``body`` as FastAPI reads a declared ``JobSpec`` body: parsed, then validated.

    Its ``RequestValidationError`` when missing, not JSON (where it broke), or when fields
    do not validate.
    """
    if not body:
        missing = {"type": "missing", "loc": ("body",), "msg": "Field required", "input": None}
        raise RequestValidationError([missing])
    try:
        data = json.loads(body)
    except json.JSONDecodeError as exc:
        where = {"type": "json_invalid", "loc": ("body", exc.pos), "msg": "JSON decode error"}
        raise RequestValidationError([{**where, "input": {}, "ctx": {"error": exc.msg}}]) from None
    try:
        return JobSpec.model_validate(data)
    except ValidationError as exc:
        errors = [{**error, "loc": ("body", *error["loc"])} for error in exc.errors()]
        raise RequestValidationError(errors, body=data) from None


@router.post(
    "/v1/jobs",
    status_code=202,
    response_model=Job,
    summary="Submit a job",
    openapi_extra=_JOB_INPUTS,
    responses={
        202: {"description": "Queued.", "headers": {**_LOCATION, **_RETRY_AFTER}},
        200: {
            "model": Job,
            "description": "An Idempotency-Key replay: the job the key already made.",
            "headers": {
                **_LOCATION,
                "Idempotent-Replayed": {
                    "description": "true",
                    "schema": {"type": "string"},
                },
            },
        },
        **problems(401, 413, 415, 422, 429, 503),
    },
)
async def submit_job(
    request: Request, caller: AuthedJson, idempotency_key: IdempotencyKey = None
) -> Response:
    """Queue a job. The signature or schema, validators, model and caps are checked now,
    so a bad job is a 422 naming the field, never a failed job later."""
    spec = await job_spec(request)
    job, created = await submit_spec(caller, spec, idempotency_key, _trace(request))
    if created:
        return _job(job, 202, [_location(job), _RETRY_AFTER_HEADER])
    return _job(job, 200, [_location(job), _REPLAYED_HEADER])


@router.get(
    "/v1/jobs/{job_id}",
    response_model=Job,
    summary="Get a job (long-poll with waitMs)",
    responses=problems(401, 404, 422, 503),
)
async def get_job(job_id: str, caller: Authed, wait_ms: WaitMs = 0) -> Response:
    """The job now, or, with ``waitMs``, as soon as it ends or needs tool outputs
    (``requires_action``), at most ``waitMs`` later."""
    res, tenant = caller.res, caller.tenant
    if wait_ms > 0:
        wait = clamp_wait(wait_ms, res.settings)
        async with res.fairness.waiting(tenant, for_ms=wait):
            job = await res.store.wait(job_id, tenant=tenant, wait_ms=wait)
    else:
        job = await res.store.get(job_id, tenant=tenant)
    if job is None:
        raise _not_found(job_id)
    return _job(job, 200)


@router.get(
    "/v1/jobs",
    response_model=JobList,
    summary="List your jobs, newest first",
    responses={
        200: {
            "headers": {
                "Link": {
                    "description": '<…?cursor=…>; rel="next" when there is a next page',
                    "schema": {"type": "string"},
                }
            }
        },
        **problems(401, 422, 503),
    },
)
async def list_jobs(
    request: Request,
    caller: Authed,
    cursor: Annotated[
        str | None,
        Query(
            pattern=CURSOR_PATTERN,
            description="`next` from the previous page: opaque, 40 URL-safe base64 "
            "characters; only a value this API returned is a cursor (others are a 422).",
        ),
    ] = None,
    limit: Annotated[int, Query(ge=1, le=MAX_PAGE)] = DEFAULT_PAGE,
    status: Annotated[
        Literal["queued", "in_progress", "requires_action", "succeeded", "failed", "cancelled"]
        | None,
        Query(description="Only jobs in this state."),
    ] = None,
) -> Response:
    jobs, next_cursor = await caller.res.store.list(
        tenant=caller.tenant, status=status, cursor=cursor, limit=limit
    )
    headers: dict[str, str] = {}
    if next_cursor is not None:
        query: dict[str, str | int] = {"cursor": next_cursor, "limit": limit}
        if status is not None:
            query["status"] = status
        headers["Link"] = f'<{request.url.path}?{urlencode(query)}>; rel="next"'
    # JobList(jobs=..., next=...) as its model writes it, each job written once (_job).
    body = b'{"jobs":[' + b",".join(public_job_json(job) for job in jobs) + b'],"next":'
    body += to_json(next_cursor) + b"}"
    return Response(body, status_code=200, headers=headers, media_type="application/json")


@router.post(
    "/v1/jobs/{job_id}/cancel",
    response_model=Job,
    summary="Cancel a job",
    responses=problems(401, 404, 503),
)
async def cancel_job(job_id: str, caller: Authed) -> Response:
    """A queued job never starts; a running one stops between turns (its model call in
    flight is aborted) and nothing is committed after. A finished job is returned as is."""
    job = await caller.res.store.cancel(job_id, tenant=caller.tenant)
    if job is None:
        raise _not_found(job_id)
    return _job(job, 200)


@router.post(
    "/v1/jobs/{job_id}/tool-outputs",
    response_model=Job,
    summary="Answer a job's tool calls (requires_action)",
    responses={
        200: {
            "description": "Accepted: the job is queued to go on. The same body again "
            "answers 200 with Idempotent-Replayed: true.",
            "headers": {
                "Idempotent-Replayed": {
                    "description": "true on a repeat",
                    "schema": {"type": "string"},
                }
            },
        },
        **problems(401, 404, 409, 413, 415, 422, 429, 503),
    },
)
async def submit_tool_outputs(job_id: str, caller: AuthedJson, body: ToolOutputsBody) -> Response:
    """Answer every call of ``requiredAction.toolCalls`` once; the job goes on.

    Each has ``output`` (any JSON) or ``error`` (the tool failed; the model reads it).
    """
    res = caller.res
    for i, item in enumerate(body.outputs):
        if item.output is not None:
            check_data(item.output, res.settings, field=f"outputs[{i}].output", cap="tool")
    outputs = [
        ToolOutput(tool_call_id=o.tool_call_id, output=o.output, error=o.error)
        for o in body.outputs
    ]
    job, replayed = await res.store.submit_outputs(job_id, tenant=caller.tenant, outputs=outputs)
    if job is None:
        raise _not_found(job_id)
    return _job(job, 200, [_REPLAYED_HEADER] if replayed else [])


@router.post(
    "/v1/generate",
    response_model=Job,
    summary="Submit a job and wait for it",
    openapi_extra=_JOB_INPUTS,
    responses={
        200: {
            "description": 'The job ended within waitMs; with `"stream": true` or '
            "`Accept: text/event-stream`, its events as Server-Sent Events (partials "
            "included) until job_end.",
            "content": {"text/event-stream": {"schema": {"type": "string"}}},
        },
        202: {
            "model": Job,
            "description": "Still running after waitMs: poll the Location.",
            "headers": {**_LOCATION, **_RETRY_AFTER},
        },
        **problems(401, 413, 415, 422, 429, 503),
    },
)
async def generate(
    request: Request,
    caller: AuthedJson,
    wait_ms: WaitMs = DEFAULT_GENERATE_WAIT_MS,
    idempotency_key: IdempotencyKey = None,
) -> Response:
    """For simple clients: the same job as ``POST /v1/jobs``, answered when it ends.

    Streaming (``"stream": true`` or ``Accept: text/event-stream``): the job's events as
    they come, partial answers included; a client that leaves cancels the job.
    """
    spec = await job_spec(request)
    if spec.stream or wants_events(request):
        spec = spec.model_copy(update={"stream": True})
        job, _ = await submit_spec(caller, spec, idempotency_key, _trace(request))
        return await stream_job(caller, job)
    wait = clamp_wait(wait_ms, caller.res.settings)
    # The store waits as part of the submit (the new job watched from before it is queued:
    # one read for the answer), so a caller at its cap of open waits gets its 429 first.
    fairness = caller.res.fairness
    waiting = fairness.waiting(caller.tenant, for_ms=wait) if wait else contextlib.nullcontext()
    async with waiting:
        job, _ = await submit_spec(caller, spec, idempotency_key, _trace(request), wait)
    if job.terminal:
        return _job(job, 200)
    return _job(job, 202, [_location(job), _RETRY_AFTER_HEADER])


def _trace(request: Request) -> TraceContext | None:
    """The client's W3C trace context, if it sent a valid one."""
    headers = request.headers
    parents = headers.getlist("traceparent")
    if not parents:
        return None
    return TraceContext.from_headers(parents, headers.getlist("tracestate"))


async def submit_spec(
    caller: Caller,
    spec: JobSpec,
    idempotency_key: str | None,
    trace: TraceContext | None = None,
    wait_ms: int = 0,
) -> tuple[JobView, bool]:
    """Admit ``spec`` for ``caller`` and store it as a new job (or the one ``idempotency_key``
    already names); ``created`` is False for a replay."""
    res, tenant = caller.res, caller.tenant
    router = res.require_router()
    caller.admit(spec)
    job, created = await res.store.submit(
        tenant=tenant,
        spec=stored_spec_json(spec, res.settings),  # with the default deadline filled in
        idempotency_key=idempotency_key,
        metadata=dict(spec.metadata),
        model=spec.model or router.default,
        trace=trace,
        wait_ms=wait_ms,
    )
    if created:
        metrics.JOBS_SUBMITTED.inc()
    return job, created


def _job(job: JobView, status: int, headers: list[tuple[bytes, bytes]] | None = None) -> Response:
    """The job as ``respond(public_job(job))`` would answer it, from the store's JSON as is.

    ``headers``: ``_location``, ``_RETRY_AFTER_HEADER``, ``_REPLAYED_HEADER``.
    """
    return JobResponse(public_job_json(job), status, headers or [])


class JobResponse(Response):
    """A job's JSON answer, its raw headers given as Starlette would make them.

    ``Response(body, status, headers, media_type="application/json")``: the given headers,
    then ``content-length`` and ``content-type``.
    """

    media_type = "application/json"

    def __init__(self, body: bytes, status: int, headers: list[tuple[bytes, bytes]]) -> None:
        self.status_code = status
        self.background = None
        self.body = body
        self.raw_headers = [
            *headers,
            (b"content-length", b"%d" % len(body)),
            (b"content-type", b"application/json"),
        ]


_RETRY_AFTER_HEADER: Final = (b"retry-after", POLL_AFTER_S.encode("latin-1"))
_REPLAYED_HEADER: Final = (b"idempotent-replayed", b"true")


def _location(job: JobView) -> tuple[bytes, bytes]:
    """The ``location`` header (a job id is letters, digits and ``_``)."""
    return (b"location", b"/v1/jobs/%s" % job.id.encode("latin-1"))


def _not_found(job_id: str) -> NotFound:
    shown = job_id if len(job_id) <= 64 else job_id[:64] + "…"
    return NotFound(f"no job {shown!r}")
