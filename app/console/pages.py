"""The console's pages and actions, under /console (docs/console.md).

GET  /console                       → the jobs table (or the sign-in page)
GET  /console/signin, POST          sign in with an API or operator key
POST /console/signout               the session ends everywhere
GET  /console/jobs                  the jobs table (filters, paging); /console/jobs/rows: its rows
GET  /console/jobs/{id}             a job: envelope, timeline, deliveries, events
GET  /console/jobs/{id}/live        SSE: the job's page body again on each of its events
POST /console/jobs/{id}/cancel      cancel; /redeliver: its latest callback again
GET  /console/jobs/{id}/again, POST "run again": its spec, editable, submitted as a new job
GET  /console/overview              success rate, re-asks, cost, queue, circuits

Pages read and act through the store as the /v1 handlers do, for the viewer's tenants only:
another tenant's job is a 404, as in the API. Every POST needs the session's CSRF token.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator
from typing import Any, Final
from urllib.parse import parse_qsl, urlencode

from fastapi import APIRouter, Request
from fastapi.responses import HTMLResponse, RedirectResponse, Response
from jinja2 import Environment, PackageLoader, select_autoescape
from sse_starlette import EventSourceResponse, ServerSentEvent

from app.api.events import holding
from app.api.fairness import Held
from app.api.jobs import submit_spec
from app.api.problems import Unauthorized
from app.api.resources import Caller, Resources, resources_of
from app.console import shown
from app.console.access import (
    CSRF_FIELD,
    Viewer,
    check_csrf,
    clear_cookie,
    same_origin,
    set_cookie,
    signed_in,
    who_is,
)
from app.console.headers import ConsoleRoute, secure
from app.console.overview import overview
from app.console.table import Filters, page, visible
from app.core.wire.errors import InvalidInput, RepromptError
from app.core.wire.spec import JobSpec
from app.store import STATUSES, JobView, NoDelivery
from app.store.records import Event

router = APIRouter(prefix="/console", include_in_schema=False, route_class=ConsoleRoute)

MAX_FORM_BYTES: Final = 2 * 1024 * 1024
LIVE_BLOCK_MS: Final = 15_000
# A live page's stream ends after this long (the browser reconnects): no stream is held forever.
LIVE_MAX_S: Final = 600
SHOWN_EVENTS: Final = 200

templates = Environment(
    loader=PackageLoader("app.console", "templates"),
    autoescape=select_autoescape(default=True, default_for_string=True),
    trim_blocks=True,
    lstrip_blocks=True,
)
templates.filters["money"] = shown.money
templates.filters["duration"] = shown.duration
templates.filters["cut"] = shown.cut
templates.filters["pretty"] = shown.pretty
templates.filters["pretty_text"] = shown.pretty_text
templates.globals["rejected"] = shown.REJECTED


def render(
    request: Request, name: str, status: int = 200, viewer: Viewer | None = None, **values: Any
) -> HTMLResponse:
    html = templates.get_template(name).render(viewer=viewer, csrf_field=CSRF_FIELD, **values)
    return HTMLResponse(html, status_code=status)


async def read_form(request: Request) -> dict[str, str]:
    """An urlencoded form body (each field once: the first), bounded in size."""
    body = await request.body()
    if len(body) > MAX_FORM_BYTES:
        raise InvalidInput("the form is too large", field="body")
    return dict(reversed(parse_qsl(body.decode("utf-8", "replace"), keep_blank_values=True)))


# -- sign-in ---------------------------------------------------------------------------------


@router.get("")
async def home(request: Request) -> Response:
    return RedirectResponse("/console/jobs", status_code=303)


@router.get("/signin")
async def signin_page(request: Request) -> Response:
    return render(request, "signin.html", auth=bool(resources_of(request).settings.keys))


@router.post("/signin")
async def signin(request: Request) -> Response:
    res = resources_of(request)
    settings = res.settings
    auth = bool(settings.keys or settings.console_operator_keys)
    if not same_origin(request):
        return render(request, "signin.html", 403, auth=auth, error="sign in from this site")
    sessions = res.store.console_sessions()
    address = request.client.host if request.client else "unknown"
    if await sessions.count_signin(address) > settings.console_signins_per_minute:
        response = render(
            request, "signin.html", 429, auth=auth, error="too many sign-ins: wait a minute"
        )
        response.headers["Retry-After"] = "60"
        return response
    form = await read_form(request)
    try:
        tenant, operator = who_is(form.get("key", ""), settings)
    except Unauthorized:
        return render(request, "signin.html", 401, auth=auth, error="that key is not valid")
    ttl = settings.console_session_ttl_s
    token, _ = await sessions.create(tenant=tenant, operator=operator, ttl_s=ttl)
    to_jobs = RedirectResponse("/console/jobs", status_code=303)
    set_cookie(to_jobs, request, token, ttl)
    return to_jobs


@router.post("/signout")
async def signout(request: Request) -> Response:
    viewer = await signed_in(request)
    check_csrf(request, viewer, await read_form(request))
    await resources_of(request).store.console_sessions().delete(viewer.token)
    response = RedirectResponse("/console/signin", status_code=303)
    clear_cookie(response, request)
    return response


# -- jobs --------------------------------------------------------------------------------------


async def _table(request: Request, viewer: Viewer) -> dict[str, Any]:
    res = resources_of(request)
    filters = Filters.parse(request.query_params)
    cursor = request.query_params.get("cursor") or None
    error = None
    try:
        jobs, more = await page(res.store, visible(viewer.tenants, filters), filters, cursor)
    except InvalidInput as exc:
        jobs, more, error = [], None, exc.detail
    query = filters.query()
    return {
        "rows": [shown.row(job) for job in jobs],
        "filters": filters,
        "statuses": sorted(STATUSES),
        "next_url": f"/console/jobs?{urlencode({**query, 'cursor': more})}" if more else None,
        "first_url": f"/console/jobs?{urlencode(query)}" if cursor else None,
        "rows_url": f"/console/jobs/rows?{urlencode(query)}",
        "live": cursor is None,
        "error": error,
    }


@router.get("/jobs")
async def jobs_page(request: Request) -> Response:
    viewer = await signed_in(request)
    return render(request, "jobs.html", viewer=viewer, **await _table(request, viewer))


@router.get("/jobs/rows")
async def jobs_rows(request: Request) -> Response:
    viewer = await signed_in(request)
    return render(request, "_rows.html", viewer=viewer, **await _table(request, viewer))


async def find(res: Resources, viewer: Viewer, job_id: str) -> JobView | None:
    """The job, if it is one of the viewer's tenants' (else None: as if it did not exist)."""
    for tenant in viewer.tenants:
        job = await res.store.get(job_id, tenant=tenant)
        if job is not None:
            return job
    return None


async def _job_values(res: Resources, job: JobView) -> dict[str, Any]:
    events = await res.store.events(job.id, after=None, block_ms=0, count=1000)
    spec = await res.store.spec(job.id, tenant=job.tenant)
    return {
        "job": job,
        "spec": shown.pretty_text(spec) if spec is not None else None,
        "row": shown.row(job),
        "attempts": shown.attempts(job.turns),
        "events": events[-SHOWN_EVENTS:],
        "events_left_out": max(0, len(events) - SHOWN_EVENTS),
    }


def _missing(request: Request, viewer: Viewer, job_id: str) -> HTMLResponse:
    return render(request, "missing.html", 404, viewer=viewer, noun="job", ident=job_id[:64])


@router.get("/jobs/{job_id}")
async def job_page(request: Request, job_id: str) -> Response:
    viewer = await signed_in(request)
    res = resources_of(request)
    job = await find(res, viewer, job_id)
    if job is None:
        return _missing(request, viewer, job_id)
    notice = request.query_params.get("notice", "")[:200]
    return render(request, "job.html", viewer=viewer, notice=notice, **await _job_values(res, job))


@router.get("/jobs/{job_id}/live")
async def job_live(request: Request, job_id: str) -> Response:
    viewer = await signed_in(request)
    res = resources_of(request)
    job = await find(res, viewer, job_id)
    if job is None:
        return _missing(request, viewer, job_id)
    held = await res.fairness.hold(job.tenant)  # 429 now if the tenant holds too many open
    return EventSourceResponse(
        holding(held, _live(request, res, viewer, job, held)),
        ping=15,
        headers={"Cache-Control": "no-store"},
    )


async def _live(
    request: Request, res: Resources, viewer: Viewer, job: JobView, held: Held
) -> AsyncIterator[ServerSentEvent]:
    """The job's body again whenever it has new events, until it ends (then ``end``)."""
    body = templates.get_template("_job_body.html")
    last: list[Event] = await res.store.events(job.id, after=None, block_ms=0, count=1000)
    after = last[-1].id if last else None
    stop = time.monotonic() + LIVE_MAX_S
    while not job.terminal and time.monotonic() < stop:
        await held.keep()
        new = await res.store.events(job.id, after=after, block_ms=LIVE_BLOCK_MS, count=1000)
        if not new:
            continue
        after = new[-1].id
        found = await res.store.get(job.id, tenant=job.tenant)
        if found is None:
            return
        job = found
        values = await _job_values(res, job)
        html = body.render(viewer=viewer, csrf_field=CSRF_FIELD, **values)
        yield ServerSentEvent(data=html, event="job")
        await asyncio.sleep(0)  # let the page's other requests in between bursts
    yield ServerSentEvent(data="ended", event="end")


async def _act(request: Request, job_id: str) -> tuple[Viewer, Resources, JobView | None]:
    viewer = await signed_in(request)
    check_csrf(request, viewer, await read_form(request))
    res = resources_of(request)
    return viewer, res, await find(res, viewer, job_id)


def _back(job_id: str, notice: str) -> RedirectResponse:
    return RedirectResponse(
        f"/console/jobs/{job_id}?{urlencode({'notice': notice})}", status_code=303
    )


@router.post("/jobs/{job_id}/cancel")
async def cancel(request: Request, job_id: str) -> Response:
    viewer, res, job = await _act(request, job_id)
    if job is None:
        return _missing(request, viewer, job_id)
    done = await res.store.cancel(job.id, tenant=job.tenant)
    ended = done is not None and done.status == "cancelled"
    return _back(job.id, "Cancelled." if ended else "It had ended already: nothing to cancel.")


@router.post("/jobs/{job_id}/redeliver")
async def redeliver(request: Request, job_id: str) -> Response:
    viewer, res, job = await _act(request, job_id)
    if job is None:
        return _missing(request, viewer, job_id)
    try:
        await res.store.outbox.redeliver(job.id, tenant=job.tenant)
    except NoDelivery as exc:
        return _back(job.id, f"Nothing to redeliver: {exc.detail}")
    return _back(job.id, "The callback is queued to be sent again.")


@router.get("/jobs/{job_id}/again")
async def again_page(request: Request, job_id: str) -> Response:
    viewer = await signed_in(request)
    res = resources_of(request)
    job = await find(res, viewer, job_id)
    spec = None if job is None else await res.store.spec(job.id, tenant=job.tenant)
    if job is None or spec is None:
        return _missing(request, viewer, job_id)
    return render(request, "again.html", viewer=viewer, job=job, spec=shown.pretty_text(spec))


@router.post("/jobs/{job_id}/again")
async def again(request: Request, job_id: str) -> Response:
    viewer = await signed_in(request)
    form = await read_form(request)
    check_csrf(request, viewer, form)
    res = resources_of(request)
    job = await find(res, viewer, job_id)
    if job is None:
        return _missing(request, viewer, job_id)
    text = form.get("spec", "")
    errors: list[str] = []
    try:
        spec = JobSpec.model_validate_json(text)
        new, _ = await submit_spec(Caller(res, job.tenant), spec, None)
    except ValueError as exc:  # pydantic's ValidationError, or JSON that does not parse
        errors = _messages(exc)
    except InvalidInput as exc:
        errors = [f"{e.field or 'body'}: {e.detail}" for e in exc.errors]
    except RepromptError as exc:
        errors = [exc.detail]
    if errors:
        return render(request, "again.html", 422, viewer=viewer, job=job, spec=text, errors=errors)
    return _back(new.id, f"Submitted as a new job (a copy of {job.id}).")


def _messages(exc: ValueError) -> list[str]:
    errors = getattr(exc, "errors", None)
    if callable(errors):
        found = []
        for error in errors()[:20]:
            where = ".".join(str(part) for part in error.get("loc", ())) or "body"
            found.append(f"{where}: {error.get('msg', 'invalid')}")
        return found
    return [str(exc)[:500]]


# -- overview --------------------------------------------------------------------------------


@router.get("/overview")
async def overview_page(request: Request) -> Response:
    viewer = await signed_in(request)
    res = resources_of(request)
    numbers = await overview(res, viewer.tenants, viewer.operator)
    return render(request, "overview.html", viewer=viewer, o=numbers)


def signin_needed(request: Request, exc: Exception) -> Response:
    """No session: pages go to sign-in; fragments and streams get a bare 401."""
    if request.method == "GET" and not request.url.path.endswith(("/rows", "/live")):
        return secure(RedirectResponse("/console/signin", status_code=303))
    return secure(Response("sign in again", status_code=401, media_type="text/plain"))


def forbidden(request: Request, exc: Exception) -> Response:
    return secure(
        Response(
            "this action needs the page's CSRF token, sent from this site",
            status_code=403,
            media_type="text/plain",
        )
    )
