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
from typing import Annotated, Any, Final, Literal
from urllib.parse import urlencode

from fastapi import APIRouter, Body, Header, Query, Request
from fastapi.responses import Response
from pydantic_core import to_json

from app import metrics
from app.api.callbacks import check_callback
from app.api.lean import LeanRequest, LeanRoute, Unusual, header, json_body, lean, query_int
from app.api.limits import (
    check_data,
    check_job,
    check_signature_schema,
    check_tools,
    clamp_wait,
    stored_spec_json,
)
from app.api.problems import NotFound
from app.api.resources import (
    BEARER,
    Authed,
    AuthedJson,
    Caller,
    Resources,
    resources_of,
)
from app.api.schemas import JOB_EXAMPLES, JobList, ToolOutputsBody, problems
from app.api.serving import LinedResponse, check_lines
from app.core.checkpoint import ToolOutput
from app.core.contract import build_contract
from app.core.errors import InvalidInput
from app.core.job import Job
from app.core.spec import JobSpec
from app.providers.router import Router
from app.store import JobView, public_job_json
from app.tracecontext import MAX_TRACESTATE, TraceContext

DEFAULT_GENERATE_WAIT_MS: Final = 30_000
DEFAULT_PAGE: Final = 20
MAX_PAGE: Final = 100
# How soon a client should look again at a job that is not finished.
POLL_AFTER_S: Final = "1"
TRACEPARENT_EXAMPLE: Final = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"


JobBody = Annotated[JobSpec, Body(openapi_examples=JOB_EXAMPLES)]
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

# W3C trace context: read from the request (a header that is not valid is ignored, never a
# 4xx), documented here.
_TRACE_HEADERS = {
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
    ]
}

_LOCATION = {"Location": {"description": "/v1/jobs/{id}", "schema": {"type": "string"}}}
_RETRY_AFTER = {
    "Retry-After": {"description": "Seconds before polling again.", "schema": {"type": "string"}}
}


# list_jobs writes JobList's fields itself, in this order.
if tuple(JobList.model_fields) != ("jobs", "next"):  # pragma: no cover - a change to JobList
    raise RuntimeError(f"list_jobs writes jobs and next, JobList has {tuple(JobList.model_fields)}")

# The app serves these routes as its own (app.api.app), so they carry the app's operationIds.
router = APIRouter(
    tags=["jobs"], route_class=LeanRoute, generate_unique_id_function=lambda route: route.name
)


# The hot endpoints' arguments as FastAPI would solve them for a plain, valid request
# (app.api.lean); anything else is ``Unusual`` and FastAPI solves the declared ones.


async def _submit_inputs(request: LeanRequest) -> dict[str, Any]:
    spec = await json_body(request, JobSpec)
    key = header(request, b"idempotency-key", max_length=IDEMPOTENCY_KEY_CHARS)
    return {"request": request, "caller": _caller(request), "spec": spec, "idempotency_key": key}


async def _get_inputs(request: LeanRequest) -> dict[str, Any]:
    job_id = request.path_params.get("job_id")
    if not isinstance(job_id, str):
        raise Unusual
    wait_ms = query_int(request, b"waitMs", 0)
    return {"job_id": job_id, "caller": _caller(request), "wait_ms": wait_ms}


async def _generate_inputs(request: LeanRequest) -> dict[str, Any]:
    spec = await json_body(request, JobSpec)
    wait_ms = query_int(request, b"waitMs", DEFAULT_GENERATE_WAIT_MS)
    key = header(request, b"idempotency-key", max_length=IDEMPOTENCY_KEY_CHARS)
    return {
        "request": request,
        "caller": _caller(request),
        "spec": spec,
        "wait_ms": wait_ms,
        "idempotency_key": key,
    }


def _caller(request: LeanRequest) -> Caller:
    """What the route's ``Bearer`` would make of ``request``. A reader with a body has read
    it as JSON (``json_body``) first: ``BEARER_JSON``'s 415 cannot apply, ``BEARER``'s
    way is the same."""
    heads = request.heads
    authorization, declared = heads.get(b"authorization"), heads.get(b"content-length")
    return BEARER.caller(
        resources_of(request),
        None,
        None if authorization is None else authorization.decode("latin-1"),
        None if declared is None else declared.decode("latin-1"),
    )


@router.post(
    "/v1/jobs",
    status_code=202,
    response_model=Job,
    summary="Submit a job",
    openapi_extra=_TRACE_HEADERS,
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
@lean(_submit_inputs)
async def submit_job(
    request: Request,
    caller: AuthedJson,
    spec: JobBody,
    idempotency_key: IdempotencyKey = None,
) -> Response:
    """Queue a job. The signature or schema, validators, model and caps are checked now,
    so a bad job is a 422 naming the field, never a failed job later."""
    job, created = await _submit(caller, spec, idempotency_key, _trace(request))
    if created:
        return _job(job, 202, _location(job) + _RETRY_AFTER_LINE)
    return _job(job, 200, _location(job) + _REPLAYED)


@router.get(
    "/v1/jobs/{job_id}",
    response_model=Job,
    summary="Get a job (long-poll with waitMs)",
    responses=problems(401, 404, 422, 503),
)
@lean(_get_inputs)
async def get_job(job_id: str, caller: Authed, wait_ms: WaitMs = 0) -> Response:
    """The job now, or, with ``waitMs``, as soon as it ends or needs tool outputs
    (``requires_action``), at most ``waitMs`` later."""
    res, tenant = caller.res, caller.tenant
    if wait_ms > 0:
        with res.fairness.waiting(tenant):
            job = await res.store.wait(
                job_id, tenant=tenant, wait_ms=clamp_wait(wait_ms, res.settings)
            )
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
    cursor: Annotated[str | None, Query(description="`next` from the previous page.")] = None,
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
    """Every call of ``requiredAction.toolCalls`` answered once: ``output`` (any JSON) or
    ``error`` (the tool failed; the model reads it). The job goes back to the queue and the
    loop continues with the tool work in its context."""
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
    return _job(job, 200, _REPLAYED if replayed else b"")


@router.post(
    "/v1/generate",
    response_model=Job,
    summary="Submit a job and wait for it",
    openapi_extra=_TRACE_HEADERS,
    responses={
        200: {"description": "The job ended within waitMs."},
        202: {
            "model": Job,
            "description": "Still running after waitMs: poll the Location.",
            "headers": {**_LOCATION, **_RETRY_AFTER},
        },
        **problems(401, 413, 415, 422, 429, 503),
    },
)
@lean(_generate_inputs)
async def generate(
    request: Request,
    caller: AuthedJson,
    spec: JobBody,
    wait_ms: WaitMs = DEFAULT_GENERATE_WAIT_MS,
    idempotency_key: IdempotencyKey = None,
) -> Response:
    """For simple clients: the same job as ``POST /v1/jobs``, answered when it ends."""
    wait = clamp_wait(wait_ms, caller.res.settings)
    # The store waits as part of the submit (the new job watched from before it is queued:
    # one read for the answer), so a caller at its cap of open waits gets its 429 first.
    waiting = caller.res.fairness.waiting(caller.tenant) if wait else contextlib.nullcontext()
    with waiting:
        job, _ = await _submit(caller, spec, idempotency_key, _trace(request), wait)
    if job.terminal:
        return _job(job, 200)
    return _job(job, 202, _location(job) + _RETRY_AFTER_LINE)


def _trace(request: Request) -> TraceContext | None:
    """The client's W3C trace context, if it sent a valid one."""
    if isinstance(request, LeanRequest) and b"traceparent" not in request.heads:
        return None
    headers = request.headers
    parents = headers.getlist("traceparent")
    if not parents:
        return None
    return TraceContext.from_headers(parents, headers.getlist("tracestate"))


async def _submit(
    caller: Caller,
    spec: JobSpec,
    idempotency_key: str | None,
    trace: TraceContext | None = None,
    wait_ms: int = 0,
) -> tuple[JobView, bool]:
    res, tenant = caller.res, caller.tenant
    router = res.require_router()
    check_job(spec, res.settings)
    check_tools(spec, res.settings)
    _check_http_tools(spec, res, tenant)
    _check_calling_validators(spec, res, router)
    check_callback(spec, res)
    if spec.tools and spec.budget.max_turns > 1:
        lacking = router.without_tools(spec.model)
        if lacking:
            raise InvalidInput(
                f"{', '.join(lacking)} cannot call tools (no native tool calling, e.g. the "
                "embedded local model); give another model, or no tools",
                field="tools",
            )
    contract = build_contract(spec)  # the budget plays no part in it
    if spec.signature is not None:
        check_signature_schema(spec.signature, contract.output_schema, res.settings)
    for field, name in (("model", spec.model), ("escalateModel", spec.escalate_model)):
        if field == "escalateModel" and name is None:
            continue
        try:
            router.resolve(name)
        except InvalidInput as exc:
            raise InvalidInput(exc.detail, field=field) from None
        router.structured_mode(name, spec.structured_output)  # "native" needs every model
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


def _check_http_tools(spec: JobSpec, res: Resources, tenant: str) -> None:
    """An HTTP tool's URL passes the outbound guard (no DNS yet: that is at call time) and
    its headers name only the tenant's own secrets."""
    for i, tool in enumerate(spec.tools):
        if tool.url is None:
            continue
        problem = res.outbound.guard.check_url(tool.url)
        if problem is not None:
            raise InvalidInput(problem, field=f"tools[{i}].url")
        problem = res.outbound.secrets.check_headers(tool.headers, tenant)
        if problem is not None:
            raise InvalidInput(problem, field=f"tools[{i}].headers")


def _check_calling_validators(spec: JobSpec, res: Resources, router: Router) -> None:
    """A webhook validator's URL passes the outbound guard; a judge's model is configured."""
    for i, validator in enumerate(spec.validators):
        if validator.kind == "webhook" and validator.url is not None:
            problem = res.outbound.guard.check_url(validator.url)
            if problem is not None:
                raise InvalidInput(problem, field=f"validators[{i}].url")
        elif validator.kind == "judge" and validator.model is not None:
            try:
                router.resolve(validator.model)
            except InvalidInput as exc:
                raise InvalidInput(exc.detail, field=f"validators[{i}].model") from None


def _job(job: JobView, status: int, lines: bytes = b"") -> Response:
    """The job as ``respond(public_job(job))`` would answer it, written without parsing
    and re-writing what the store holds as JSON already; ``lines``: its other headers'
    lines, as uvicorn writes them (``_location``, ``_RETRY_AFTER_LINE``, ``_REPLAYED``)."""
    return JobResponse(public_job_json(job), status, lines)


class JobResponse(LinedResponse):
    """``Response(body, status, headers, media_type="application/json")``, its head as
    Starlette writes it (the given headers, then ``content-length`` and ``content-type``),
    put together directly as the lines uvicorn writes (``LinedResponse``): every job's
    answers go through here. ``lines``: the given headers' (``b"location: ...\\r\\n"``)."""

    media_type = "application/json"

    def __init__(self, body: bytes, status: int, lines: bytes = b"") -> None:
        self.status_code = status
        self.background = None
        self.body = body
        self.lines = b"%scontent-length: %d\r\ncontent-type: application/json\r\n" % (
            lines,
            len(body),
        )


_RETRY_AFTER_LINE: Final = check_lines(b"retry-after: %s\r\n" % POLL_AFTER_S.encode("latin-1"))
_REPLAYED: Final = check_lines(b"idempotent-replayed: true\r\n")


def _location(job: JobView) -> bytes:
    """The ``location`` header's line (a job id is letters, digits and ``_``)."""
    return b"location: /v1/jobs/%s\r\n" % job.id.encode("latin-1")


def _not_found(job_id: str) -> NotFound:
    shown = job_id if len(job_id) <= 64 else job_id[:64] + "…"
    return NotFound(f"no job {shown!r}")
