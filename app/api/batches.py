"""The batch endpoints: many items sharing one job template, run in rounds through the
providers' batch APIs (docs/batches.md).

POST /v1/batches                     202 + Location (200 on an Idempotency-Key replay)
     application/json: {template, items: [...], ...}
     application/x-ndjson: the first line {template, ...}, then one item per line
GET  /v1/batches/{id}                status, counts, rounds, tokens and cost so far
GET  /v1/batches/{id}/items?status=&cursor=&limit=   items with their turn records
GET  /v1/batches/{id}/results        JSONL, one {customId, status, result} per item
GET  /v1/batches/{id}/events         progress as Server-Sent Events
POST /v1/batches/{id}/cancel         pending items end cancelled; the provider batch too
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from typing import Annotated, Any, Final, Literal

from fastapi import APIRouter, Query, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse, Response, StreamingResponse
from pydantic import BaseModel, ValidationError
from sse_starlette import EventSourceResponse, ServerSentEvent

from app.api.jobs import IdempotencyKey
from app.api.problems import ContentTooLarge, NotFound, UnsupportedMediaType
from app.api.resources import Authed, Caller
from app.api.schemas import problems
from app.core.wire.base import compact_json
from app.core.wire.batch import (
    Batch,
    BatchItem,
    BatchOptions,
    BatchResult,
    BatchSpec,
    batch_of,
    item_spec,
)
from app.core.wire.errors import InvalidInput, RepromptError
from app.providers.batch import batch_api
from app.store.batches import BatchStore, DuplicateCustomId, TooManyOpen

OWN_BODY_CAP: Final = frozenset({"/v1/batches"})
# The body create_batch reads itself, as a component of the OpenAPI document (app.api.app).
BODY_MODELS: Final = (BatchSpec, BatchOptions, BatchItem)
NDJSON: Final = ("application/x-ndjson", "application/jsonl", "application/x-jsonlines")
MAX_PAGE: Final = 500
PROGRESS_S: Final = 0.5

router = APIRouter(tags=["batches"], generate_unique_id_function=lambda route: route.name)


class TooManyBatches(RepromptError):
    code = "too-many-batches"
    status = 429
    retryable = True

    def __init__(self, detail: str) -> None:
        super().__init__(detail)
        self.retry_after_s = 60.0


class ItemPage(BaseModel):
    items: list[BatchResult]
    next: str | None


def _store(caller: Caller) -> BatchStore:
    store = caller.res.batches
    if store is None:
        raise NotFound("batches are not enabled on this service")
    return store


_CREATE_BODY = {
    "requestBody": {
        "required": True,
        "content": {
            "application/json": {"schema": {"$ref": "#/components/schemas/BatchSpec"}},
            "application/x-ndjson": {
                "schema": {"type": "string"},
                "description": "The first line: BatchOptions; then one BatchItem per line.",
            },
        },
    }
}


@router.post(
    "/v1/batches",
    status_code=202,
    response_model=Batch,
    summary="Submit a batch",
    openapi_extra=_CREATE_BODY,
    responses={
        202: {"description": "Accepted: its rounds start on a worker."},
        200: {"model": Batch, "description": "An Idempotency-Key replay: that batch."},
        **problems(401, 413, 415, 422, 503),
    },
)
async def create_batch(
    request: Request, caller: Authed, idempotency_key: IdempotencyKey = None
) -> Response:
    """Store a batch: its template is checked as a job's is (a 422 names the field), each
    item's customId, input and override too; rounds start at once on a worker."""
    store = _store(caller)
    res, tenant = caller.res, caller.tenant
    router_ = res.require_router()
    if idempotency_key is not None:
        found = await store.existing(tenant, idempotency_key)
        if found is not None:
            return await _batch_response(store, found, tenant, 200)
    content_type = (request.headers.get("content-type") or "").split(";")[0].strip().lower()
    settings = res.settings
    reader = _Reader(request, settings.batch_max_bytes)
    if content_type in NDJSON:
        first = await reader.line()
        options = _options(first)
        items = _ndjson_items(reader, options, caller)
    elif content_type == "application/json" or content_type.endswith("+json"):
        spec = _spec(await reader.all())
        options = spec
        items = _listed_items(spec, caller)
    else:
        shown = content_type or "none"
        raise UnsupportedMediaType(
            f"send the batch as application/json or application/x-ndjson (was {shown})"
        )
    caller.admit(options.template)
    if options.callback is not None:
        problem = res.outbound.guard.check_url(options.callback.url)
        if problem is not None:
            raise InvalidInput(problem, field="callback.url")
    target = router_.target(options.template.model)
    has_batch_api = batch_api(target) is not None
    stored = options.model_dump(mode="json", by_alias=True, exclude={"items"})
    stored["template"] = options.template.model_dump(mode="json", by_alias=True, exclude_none=True)
    try:
        batch_id, replay = await store.create(
            tenant,
            options=stored,
            items=items,
            key=idempotency_key,
            max_open=settings.batch_max_open_per_tenant,
            fields={
                "provider": target.provider,
                "mode": "provider_batch" if has_batch_api else "worker_pool",
            },
        )
    except TooManyOpen as exc:
        raise TooManyBatches(str(exc)) from None
    except DuplicateCustomId as exc:
        raise InvalidInput(str(exc), field=f"items.{exc.line}.customId") from None
    return await _batch_response(store, batch_id, tenant, 200 if replay else 202)


class _Reader:
    """The request body as a stream of lines, never more than ``cap`` bytes in all."""

    def __init__(self, request: Request, cap: int) -> None:
        self._stream = request.stream()
        self._cap = cap
        self._seen = 0
        self._buffer = b""
        self._done = False
        self.number = 0

    async def _more(self) -> bool:
        if self._done:
            return False
        try:
            chunk = await anext(self._stream)
        except StopAsyncIteration:
            self._done = True
            return False
        self._seen += len(chunk)
        if self._seen > self._cap:
            raise ContentTooLarge(
                f"the batch is larger than {self._cap} bytes (REPROMPT_BATCH_MAX_BYTES)"
            )
        self._buffer += chunk
        return True

    async def line(self) -> bytes | None:
        while True:
            cut = self._buffer.find(b"\n")
            if cut != -1:
                line, self._buffer = self._buffer[:cut], self._buffer[cut + 1 :]
                self.number += 1
                return line
            if not await self._more():
                if self._buffer:
                    line, self._buffer = self._buffer, b""
                    self.number += 1
                    return line
                return None

    async def all(self) -> bytes:
        while await self._more():
            pass
        return self._buffer


def _errors(
    exc: ValidationError, raw: bytes, *prefix: str | int
) -> RequestValidationError | InvalidInput:
    """``exc`` as FastAPI's 422, its fields named from the body's root (``items.3…``)."""
    broken = [e for e in exc.errors(include_url=False) if e["type"] == "json_invalid"]
    if broken and prefix:  # a JSONL line that is not JSON: named by its item
        reason = (broken[0].get("ctx") or {}).get("error", "")
        return InvalidInput(
            f"not valid JSON: {reason}".rstrip(": "), field=".".join(map(str, prefix))
        )
    try:
        data: Any = json.loads(raw)
    except ValueError:
        data = None
    body: Any = data
    for part in reversed(prefix):  # the body as submitted around the part that failed
        body = [*([None] * part), body] if isinstance(part, int) else {part: body}
    return RequestValidationError(
        [{**e, "loc": ("body", *prefix, *e["loc"])} for e in exc.errors(include_url=False)],
        body=body,
    )


def _spec(body: bytes) -> BatchSpec:
    try:
        return BatchSpec.model_validate_json(body or b"null")
    except ValidationError as exc:
        raise _errors(exc, body) from None


def _options(first: bytes | None) -> BatchOptions:
    if first is None or not first.strip():
        raise InvalidInput("the first line must be the batch's options", field="body[0]")
    try:
        return BatchOptions.model_validate_json(first)
    except ValidationError as exc:
        raise _errors(exc, first) from None


def _check_item(item: BatchItem, options: BatchOptions, caller: Caller, n: int) -> None:
    settings = caller.res.settings
    if n >= settings.batch_max_items:
        raise InvalidInput(
            f"a batch holds at most {settings.batch_max_items} items (REPROMPT_BATCH_MAX_ITEMS)",
            field="items",
        )
    size = len(compact_json(item.input))
    if size > settings.max_input_bytes:
        raise InvalidInput(
            f"the input is {size} bytes, more than {settings.max_input_bytes}",
            field=f"items.{n}.input",
        )
    if item.override is not None:
        try:
            item_spec(options.template.model_dump(by_alias=True, exclude_none=True), item)
        except ValidationError as exc:
            raw = item.override.model_dump_json(by_alias=True, exclude_none=True).encode()
            raise _errors(exc, raw, "items", n, "override") from None


async def _listed_items(spec: BatchSpec, caller: Caller) -> AsyncIterator[dict[str, Any]]:
    for n, item in enumerate(spec.items):
        _check_item(item, spec, caller, n)
        yield item.model_dump(mode="json", by_alias=True, exclude_none=True)


async def _ndjson_items(
    reader: _Reader, options: BatchOptions, caller: Caller
) -> AsyncIterator[dict[str, Any]]:
    n = 0
    while (line := await reader.line()) is not None:
        if not line.strip():
            continue
        try:
            item = BatchItem.model_validate_json(line)
        except ValidationError as exc:
            raise _errors(exc, line, "items", n) from None
        _check_item(item, options, caller, n)
        yield item.model_dump(mode="json", by_alias=True, exclude_none=True)
        n += 1
    if n == 0:
        raise InvalidInput("a batch needs at least one item", field="items")


async def _batch_response(store: BatchStore, batch_id: str, tenant: str, status: int) -> Response:
    batch = await _view(store, batch_id, tenant)
    return JSONResponse(
        batch.model_dump(mode="json"),
        status,
        headers={"Location": f"/v1/batches/{batch_id}"},
    )


async def _view(store: BatchStore, batch_id: str, tenant: str) -> Batch:
    meta = await store.meta(batch_id)
    if meta is None or meta.get("tenant") != tenant:
        raise NotFound(f"no batch {batch_id}")
    return batch_of(meta, await store.callbacks.deliveries(batch_id))


@router.get(
    "/v1/batches/{batch_id}",
    response_model=Batch,
    summary="Get a batch",
    responses=problems(401, 404),
)
async def get_batch(batch_id: str, caller: Authed) -> Batch:
    """Status, counts by item state, rounds so far, tokens and cost, wasted cost, the
    estimate left."""
    return await _view(_store(caller), batch_id, caller.tenant)


@router.get(
    "/v1/batches/{batch_id}/items",
    response_model=ItemPage,
    summary="List a batch's items",
    responses=problems(401, 404, 422),
)
async def list_batch_items(
    batch_id: str,
    caller: Authed,
    status: Annotated[Literal["pending", "succeeded", "failed"] | None, Query()] = None,
    cursor: Annotated[str | None, Query(max_length=12, pattern=r"^[0-9]+$")] = None,
    limit: Annotated[int, Query(ge=1, le=MAX_PAGE)] = 50,
) -> ItemPage:
    """Items in submission order with their results and turn records; ``status`` filters,
    ``next`` is the cursor of the next page (null: no more)."""
    store = _store(caller)
    batch = await _view(store, batch_id, caller.tenant)
    start = int(cursor or 0)
    found: list[BatchResult] = []
    while start < batch.total and len(found) < limit:
        stop = min(start + MAX_PAGE, batch.total)
        for index, item, line in await store.lines(batch_id, start, stop):
            entry = _entry(item, line, turns=True)
            if status is None or entry.status == status:
                found.append(entry)
                if len(found) == limit:
                    start = index + 1
                    break
        else:
            start = stop
    return ItemPage(items=found, next=str(start) if start < batch.total else None)


def _entry(item: dict[str, Any], line: str | None, *, turns: bool) -> BatchResult:
    if line is None:
        return BatchResult(custom_id=item["customId"], status="pending", result=None)
    data = json.loads(line)
    return BatchResult(
        custom_id=data["customId"],
        status=data["status"],
        result=data["result"],
        turns=data.get("turns") if turns else None,
    )


@router.get(
    "/v1/batches/{batch_id}/results",
    summary="Stream a batch's results (JSONL)",
    response_class=StreamingResponse,
    responses={
        200: {
            "description": "One BatchResult per line, in submission order.",
            "content": {"application/x-ndjson": {"schema": {"type": "string"}}},
        },
        **problems(401, 404),
    },
)
async def batch_results(batch_id: str, caller: Authed) -> StreamingResponse:
    """Every item's ``{customId, status, result}`` (``result``: the envelope a job has;
    null while pending), streamed from the store a chunk at a time."""
    store = _store(caller)
    batch = await _view(store, batch_id, caller.tenant)
    lines = result_lines(store, batch_id, batch.total)
    return StreamingResponse(lines, media_type="application/x-ndjson")


async def result_lines(store: BatchStore, batch_id: str, total: int) -> AsyncIterator[bytes]:
    """The batch's results as JSONL, read from the store a page at a time."""
    start = 0
    while start < total:
        stop = min(start + MAX_PAGE, total)
        out = []
        for _, item, line in await store.lines(batch_id, start, stop):
            entry = _entry(item, line, turns=False)
            out.append(entry.model_dump_json(exclude_none=True))
        yield ("\n".join(out) + "\n").encode()
        start = stop


@router.post(
    "/v1/batches/{batch_id}/cancel",
    response_model=Batch,
    status_code=202,
    summary="Cancel a batch",
    responses=problems(401, 404),
)
async def cancel_batch(batch_id: str, caller: Authed) -> Response:
    """Pending items end ``cancelled`` and the provider batch is cancelled; the items that
    ended keep their results."""
    store = _store(caller)
    batch = await _view(store, batch_id, caller.tenant)
    if batch.status == "running":
        await store.request_cancel(batch_id)
    return await _batch_response(store, batch_id, caller.tenant, 202)


@router.get(
    "/v1/batches/{batch_id}/events",
    summary="A batch's progress (Server-Sent Events)",
    response_class=EventSourceResponse,
    responses={
        200: {
            "description": "``progress`` events (a Batch) whenever it changes; the last "
            "one once it ended.",
            "content": {"text/event-stream": {"schema": {"type": "string"}}},
        },
        **problems(401, 404),
    },
)
async def batch_events(batch_id: str, caller: Authed) -> EventSourceResponse:
    """The batch as ``GET /v1/batches/{id}`` shows it, each time it changes."""
    store = _store(caller)
    await _view(store, batch_id, caller.tenant)

    async def events() -> AsyncIterator[ServerSentEvent]:
        last = ""
        while True:
            meta = await store.meta(batch_id)
            if meta is None:
                return
            data = batch_of(meta, await store.callbacks.deliveries(batch_id)).model_dump_json()
            if data != last:
                last = data
                yield ServerSentEvent(data=data, event="progress")
            if meta.get("status") != "running":
                return
            await asyncio.sleep(PROGRESS_S)

    return EventSourceResponse(events(), ping=15)
