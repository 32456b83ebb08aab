"""The FastAPI application: routes, the problem+json renderer, the OpenAPI document.

    app = create_app(settings, resources)   # resources: an async context manager factory

Its lifespan enters ``resources()`` (built by ``app.assembly``: Redis, the store, the
router, maybe an in-process worker) and keeps what it yields as ``app.state.resources``
until shutdown. This package never builds those itself and never imports the worker.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from typing import Any, Literal

from fastapi import FastAPI
from fastapi.encoders import jsonable_encoder
from fastapi.openapi.models import Schema
from fastapi.openapi.utils import get_openapi
from pydantic import BaseModel

from app import __version__, console
from app.api import batches, callbacks, events, jobs, problems, system
from app.api.chat import routes as chat
from app.api.events import EVENT_ID_PATTERN, SSE_EVENTS
from app.api.limits import BodyLimit
from app.api.resources import Resources
from app.gcsettle import settle_gc
from app.settings import Settings

DESCRIPTION = """\
Retry-guarded LLM generation. POST a job (a task, a signature or JSON Schema, a budget);
a worker runs the turn loop against the configured models, checks every answer, feeds the
precise error back and asks again within the budget. Poll, long-poll (`waitMs`) or stream
(SSE) the job; its `result` is the envelope (`status`, `data` or `error`, `execution`).

Errors are RFC 9457 `application/problem+json` with a stable `code`; validation errors
name each field in `errors`. Unknown paths are 404 and wrong methods 405, in the same shape.
With API keys configured, `/v1/*` needs `Authorization: Bearer <key>` and a job is visible
only to the key's tenant.
"""


def create_app(
    settings: Settings, resources: Callable[[], AbstractAsyncContextManager[Resources]]
) -> FastAPI:
    """The API over what ``resources()`` provides for the app's lifetime."""

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        async with resources() as built:
            app.state.resources = built
            settle_gc()
            yield

    app = FastAPI(
        title="reprompt",
        version=__version__,
        description=DESCRIPTION,
        lifespan=lifespan,
        redoc_url=None,
        # operationIds (and so generated clients' method names) are the handlers' names.
        generate_unique_id_function=lambda route: route.name,
    )
    problems.install(app)
    app.add_middleware(BodyLimit, max_bytes=settings.max_body_bytes, own_cap=batches.OWN_BODY_CAP)
    app.include_router(jobs.router)
    app.include_router(batches.router)
    app.include_router(callbacks.router)
    app.include_router(events.router)
    app.include_router(system.router)
    app.include_router(chat.router)
    if settings.console:
        console.install(app)  # #32: the web console at /console (docs/console.md)

    def openapi() -> dict[str, Any]:
        if app.openapi_schema is None:
            schema = get_openapi(
                title=app.title,
                version=app.version,
                description=app.description,
                routes=app.routes,
            )
            with_body_schemas(schema)
            shaped = with_event_schemas(as_problem_json(schema))
            app.openapi_schema = with_optional_auth(without_null_parameters(shaped))
        return app.openapi_schema

    app.openapi = openapi  # type: ignore[method-assign]
    return app


PROBLEM_REF = {"$ref": "#/components/schemas/Problem"}
INTERNAL_ERROR = "A bug: logged with its traceback; the answer holds nothing internal."


def as_problem_json(schema: dict[str, Any]) -> dict[str, Any]:
    """Every error response of ``schema`` as ``application/problem+json`` with ``Problem``.

    FastAPI documents error models as ``application/json`` and adds its own 422 model;
    the service answers with problem+json everywhere, so the document says that.
    """
    for path in schema.get("paths", {}).values():
        for operation in path.values():
            if "openai" in operation.get("tags", ()):
                continue  # the OpenAI-compatible route answers errors in OpenAI's shape
            operation["responses"].setdefault("500", {"description": INTERNAL_ERROR})
            for status, response in operation["responses"].items():
                if status.isdigit() and int(status) >= 400:
                    response["content"] = {"application/problem+json": {"schema": PROBLEM_REF}}
                    if status == "422" and response.get("description") == "Validation Error":
                        response["description"] = (
                            "A parameter or the body is invalid; `errors` names each field."
                        )
    components = schema.get("components", {}).get("schemas", {})
    for unused in ("HTTPValidationError", "ValidationError"):
        components.pop(unused, None)
    return schema


def with_body_schemas(schema: dict[str, Any]) -> dict[str, Any]:
    """``schema`` with the bodies the job handlers read themselves as components.

    ``jobs.BODY_MODELS``, named by their ``requestBody``, written as ``get_openapi`` writes
    a declared body's: through FastAPI's OpenAPI ``Schema`` model, without null members.
    """
    components = schema.setdefault("components", {}).setdefault("schemas", {})
    known = set(components)
    for model in (*jobs.BODY_MODELS, *batches.BODY_MODELS):
        add_component(schema, model, "validation")
    for name in set(components) - known:
        written = Schema.model_validate(components[name])
        components[name] = jsonable_encoder(written, by_alias=True, exclude_none=True)
    return schema


def with_event_schemas(schema: dict[str, Any]) -> dict[str, Any]:
    """The data of each Server-Sent Event, as components, named from the events endpoint
    (``x-sse-events``: event name → schema), so clients can type what they stream."""
    named: dict[str, dict[str, str]] = {}
    for event_name, model in SSE_EVENTS.items():
        named[event_name] = add_component(schema, model, "serialization")
    for path, operations in schema.get("paths", {}).items():
        if path.startswith("/v1/jobs/") and path.endswith("/events"):
            for operation in operations.values():
                ok = operation["responses"]["200"]
                ok["x-sse-events"] = named
                ok["content"]["text/event-stream"]["schema"] = event_stream_schema(named)
    return schema


def event_stream_schema(named: dict[str, dict[str, str]]) -> dict[str, Any]:
    """One event of the stream, as SSE tools read it (``id``, ``event``, ``data``): one of
    the named events, its ``data`` the JSON of that event's schema (``: ping`` comment lines
    between events carry none)."""
    return {
        "description": "One Server-Sent Event; the stream sends them oldest first until "
        "job_end. Its data is the JSON of its name's schema (also listed in x-sse-events).",
        "oneOf": [
            {
                "type": "object",
                "title": name,
                "required": ["id", "event", "data"],
                "properties": {
                    "id": {"type": "string", "pattern": EVENT_ID_PATTERN},
                    "event": {"const": name},
                    "data": {
                        "type": "string",
                        "contentMediaType": "application/json",
                        "contentSchema": ref,
                    },
                },
            }
            for name, ref in named.items()
        ],
    }


def without_null_parameters(schema: dict[str, Any]) -> dict[str, Any]:
    """Optional query and header parameters as what they are when sent: strings, never
    null (FastAPI writes ``str | None`` as ``anyOf [string, null]``; a client taking the
    null branch would send the text "null", a 422)."""
    for operations in schema.get("paths", {}).values():
        for operation in operations.values():
            for parameter in operation.get("parameters", []):
                shown = parameter.get("schema", {})
                kinds = shown.get("anyOf")
                if kinds and {"type": "null"} in kinds and len(kinds) == 2:
                    (kept,) = [kind for kind in kinds if kind != {"type": "null"}]
                    del shown["anyOf"]
                    shown.update(kept)
    return schema


def with_optional_auth(schema: dict[str, Any]) -> dict[str, Any]:
    """Each operation's bearer requirement, with none as the alternative: a service
    without ``REPROMPT_API_KEYS`` takes requests without ``Authorization``."""
    for operations in schema.get("paths", {}).values():
        for operation in operations.values():
            security = operation.get("security")
            if security and {} not in security:
                security.append({})
    return schema


def add_component(
    schema: dict[str, Any], model: type[BaseModel], mode: Literal["validation", "serialization"]
) -> dict[str, str]:
    """``model``'s JSON Schema (and the models it uses) among the components of ``schema``,
    unless there already; the reference to it."""
    components = schema.setdefault("components", {}).setdefault("schemas", {})
    document = model.model_json_schema(mode=mode, ref_template="#/components/schemas/{model}")
    for name, definition in document.pop("$defs", {}).items():
        components.setdefault(name, definition)
    components.setdefault(model.__name__, document)
    return {"$ref": f"#/components/schemas/{model.__name__}"}
