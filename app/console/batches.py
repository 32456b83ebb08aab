"""The console's batch pages (#30), under /console/batches (docs/console.md).

GET  /console/batches               the viewer's batches, newest first (paged)
GET  /console/batches/{id}          a batch: counts by item state, rounds, cost, its items
GET  /console/batches/{id}/summary  its summary alone (the page refreshes it while it runs)
GET  /console/batches/{id}/results  its results, JSONL (as GET /v1/batches/{id}/results)
POST /console/batches/{id}/cancel   as POST /v1/batches/{id}/cancel

Tenant-scoped as the jobs pages are: another tenant's batch is a 404. Every string a
batch carries from outside (customIds, error details, metadata) is shown as text.
"""

from __future__ import annotations

import json
from typing import Any, Final
from urllib.parse import urlencode

from fastapi import APIRouter, Request
from fastapi.responses import HTMLResponse, RedirectResponse, Response, StreamingResponse

from app.api.batches import result_lines
from app.api.resources import resources_of
from app.console.access import CSRF_FIELD, Viewer, check_csrf, signed_in
from app.console.headers import ConsoleRoute
from app.console.pages import read_form, render, templates
from app.core.wire.batch import Batch
from app.store.batches import BatchStore

router = APIRouter(prefix="/console/batches", include_in_schema=False, route_class=ConsoleRoute)

PAGE: Final = 25
ITEMS_SHOWN: Final = 50
ITEM_STATES: Final = ("failed", "succeeded", "pending")


def _store(request: Request) -> BatchStore | None:
    return resources_of(request).batches


async def _find(store: BatchStore | None, viewer: Viewer, batch_id: str) -> Batch | None:
    """The batch, if it is one of the viewer's tenants' (else None: as if it did not exist)."""
    if store is None or len(batch_id) > 64:
        return None
    meta = await store.meta(batch_id)
    if meta is None or meta.get("tenant") not in viewer.tenants:
        return None
    return await store.view(batch_id)


def _missing(request: Request, viewer: Viewer, batch_id: str) -> HTMLResponse:
    return render(request, "missing.html", 404, viewer=viewer, noun="batch", ident=batch_id[:64])


@router.get("")
async def batches_page(request: Request) -> Response:
    viewer = await signed_in(request)
    store = _store(request)
    raw = request.query_params.get("before", "")
    before = int(raw) if raw.isdigit() and len(raw) <= 15 else None
    rows: list[tuple[str, Batch]] = []
    more = None
    if store is not None:
        found = await store.recent(viewer.tenants, before_ms=before, limit=PAGE + 1)
        for _, batch_id in found[:PAGE]:
            meta = await store.meta(batch_id)
            if meta is not None:
                rows.append((meta["tenant"], await _view(store, batch_id)))
        if len(found) > PAGE:
            more = f"/console/batches?{urlencode({'before': found[PAGE - 1][0]})}"
    return render(
        request,
        "batches.html",
        viewer=viewer,
        rows=rows,
        enabled=store is not None,
        next_url=more,
        first_url="/console/batches" if before is not None else None,
    )


async def _view(store: BatchStore, batch_id: str) -> Batch:
    batch = await store.view(batch_id)
    assert batch is not None  # just read
    return batch


async def _items(store: BatchStore, batch: Batch, state: str) -> list[dict[str, Any]]:
    """The first ``ITEMS_SHOWN`` items in ``state``, each as the page shows it."""
    shown: list[dict[str, Any]] = []
    start = 0
    while start < batch.total and len(shown) < ITEMS_SHOWN:
        stop = min(start + 500, batch.total)
        for _, item, line in await store.lines(batch.id, start, stop):
            entry = _entry(item, line)
            if entry["status"] == state:
                shown.append(entry)
                if len(shown) == ITEMS_SHOWN:
                    break
        start = stop
    return shown


def _entry(item: dict[str, Any], line: str | None) -> dict[str, Any]:
    if line is None:
        return {
            "custom_id": item.get("customId", ""),
            "status": "pending",
            "error": None,
            "detail": None,
            "turns": None,
            "cost": None,
        }
    data = json.loads(line)
    result = data.get("result") or {}
    execution = result.get("execution") or {}
    return {
        "custom_id": data.get("customId", ""),
        "status": data.get("status", ""),
        "error": result.get("error"),
        "detail": result.get("detail"),
        "turns": len(data.get("turns") or ()),
        "cost": execution.get("cost"),
    }


@router.get("/{batch_id}")
async def batch_page(request: Request, batch_id: str) -> Response:
    viewer = await signed_in(request)
    store = _store(request)
    batch = await _find(store, viewer, batch_id)
    if batch is None or store is None:
        return _missing(request, viewer, batch_id)
    state = request.query_params.get("items", "failed")
    state = state if state in ITEM_STATES else "failed"
    return render(
        request,
        "batch.html",
        viewer=viewer,
        b=batch,
        items=await _items(store, batch, state),
        state=state,
        states=ITEM_STATES,
        items_shown=ITEMS_SHOWN,
        notice=request.query_params.get("notice", "")[:200],
    )


@router.get("/{batch_id}/summary")
async def batch_summary(request: Request, batch_id: str) -> Response:
    viewer = await signed_in(request)
    batch = await _find(_store(request), viewer, batch_id)
    if batch is None:
        return _missing(request, viewer, batch_id)
    html = templates.get_template("_batch_summary.html").render(
        viewer=viewer, csrf_field=CSRF_FIELD, b=batch
    )
    return HTMLResponse(html)


@router.get("/{batch_id}/results")
async def batch_results(request: Request, batch_id: str) -> Response:
    viewer = await signed_in(request)
    store = _store(request)
    batch = await _find(store, viewer, batch_id)
    if batch is None or store is None:
        return _missing(request, viewer, batch_id)
    return StreamingResponse(
        result_lines(store, batch.id, batch.total),
        media_type="application/x-ndjson",
        headers={"Content-Disposition": f'attachment; filename="{batch.id}.jsonl"'},
    )


@router.post("/{batch_id}/cancel")
async def cancel_batch(request: Request, batch_id: str) -> Response:
    viewer = await signed_in(request)
    check_csrf(request, viewer, await read_form(request))
    store = _store(request)
    batch = await _find(store, viewer, batch_id)
    if batch is None or store is None:
        return _missing(request, viewer, batch_id)
    notice = "It had ended already: nothing to cancel."
    if batch.status == "running":
        await store.request_cancel(batch.id)
        notice = "Cancel asked: pending items end cancelled, the provider batch too."
    return RedirectResponse(
        f"/console/batches/{batch.id}?{urlencode({'notice': notice})}", status_code=303
    )
