"""The FastAPI application and its lifespan: every resource is built once, closed on exit.

    app = create_app(Settings())                        # reprompt api: workers run elsewhere
    app = create_app(Settings(), embedded_worker=True)  # reprompt serve: one process does all
    uvicorn.run(app, host=settings.host, port=settings.port)

On start-up, in order: the embedded redis-server when no ``REDIS_URL`` is set (AOF in
``REPROMPT_DATA_DIR``, so queued jobs survive a restart); one Redis pool and the job store;
one ``httpx.AsyncClient``; the provider router (the configured providers, else the local
model); with ``embedded_worker``, a ``Worker`` task. Shutdown runs the same list backwards:
the worker drains first, Redis stops last.

When no provider can be configured the API still starts, so operators can see why:
``/readyz`` answers 503 naming what to configure, and submissions get the same 503.
A providers file that is present but wrong stops the start-up instead: a typo should not
turn into a running service that refuses every job.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator
from contextlib import AsyncExitStack, asynccontextmanager
from typing import Any

from fastapi import FastAPI
from fastapi.openapi.utils import get_openapi

from app import __version__, metrics
from app.api import events, jobs, problems, system
from app.api.limits import BodyLimit
from app.api.resources import Resources
from app.errors import ProviderConfigError
from app.providers.config import ProvidersConfig, load_providers
from app.providers.embedded import LOCAL_PROVIDER, open_router
from app.providers.http import DEFAULT_MAX_CONNECTIONS, make_client
from app.redis_server import EmbeddedRedis
from app.settings import Settings
from app.store import JobStore, connect
from app.worker import Worker

log = logging.getLogger(__name__)

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
    settings: Settings,
    *,
    embedded_worker: bool = False,
    providers: ProvidersConfig | None = None,
) -> FastAPI:
    """The API. ``providers`` overrides the configuration from the environment (tests)."""

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        async with AsyncExitStack() as stack:
            app.state.resources = await _open(
                stack, settings, providers=providers, embedded_worker=embedded_worker
            )
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
    app.add_middleware(BodyLimit, max_bytes=settings.max_body_bytes)
    app.include_router(jobs.router)
    app.include_router(events.router)
    app.include_router(system.router)

    def openapi() -> dict[str, Any]:
        if app.openapi_schema is None:
            schema = get_openapi(
                title=app.title,
                version=app.version,
                description=app.description,
                routes=app.routes,
            )
            app.openapi_schema = as_problem_json(schema)
        return app.openapi_schema

    app.openapi = openapi  # type: ignore[method-assign]
    return app


async def _open(
    stack: AsyncExitStack,
    settings: Settings,
    *,
    providers: ProvidersConfig | None,
    embedded_worker: bool,
) -> Resources:
    if settings.redis_url is None:
        server = EmbeddedRedis(settings.data_dir)
        await server.astart()
        stack.push_async_callback(server.astop)
        url = server.url
        log.info("embedded redis-server on %s (data in %s)", url, server.dir)
    else:
        url = settings.redis_url.get_secret_value()
    redis = connect(url)
    stack.push_async_callback(redis.aclose)
    store = JobStore(redis, **settings.store_options())
    # One connection per job a worker may hold: a smaller pool queues model calls.
    pool = max(DEFAULT_MAX_CONNECTIONS, settings.worker_concurrency)
    http = await stack.enter_async_context(make_client(max_connections=pool))
    config = load_providers() if providers is None else providers
    provider_problem: str | None = None
    try:
        router = await stack.enter_async_context(
            open_router(
                http,
                data_dir=settings.data_dir,
                config=config,
                on_retry=metrics.record_transport_retry,
            )
        )
    except ProviderConfigError as exc:
        log.error("no model provider: %s", exc.detail)
        router, provider_problem = None, exc.detail
    model_providers = {name: model.provider for name, model in config.models.items()}
    if router is not None:
        # Whatever the router has beyond the configuration is the embedded local model.
        for name in router.names():
            if router.resolve(name) == (name,):
                model_providers.setdefault(name, LOCAL_PROVIDER)
    if embedded_worker:
        if router is None:
            log.warning("no model provider: the in-process worker is not started")
        else:
            stop = asyncio.Event()
            task = asyncio.create_task(Worker(store, router, settings).run(stop), name="worker")
            task.add_done_callback(_worker_ended)
            stack.push_async_callback(_stop_worker, stop, task)
    return Resources(
        settings=settings,
        keys=settings.keys,
        store=store,
        router=router,
        provider_problem=provider_problem,
        model_providers=model_providers,
    )


def _worker_ended(task: asyncio.Task[None]) -> None:
    # Said at once: a worker that died would otherwise go unnoticed until shutdown.
    if not task.cancelled() and task.exception() is not None:
        log.error("the in-process worker stopped", exc_info=task.exception())


async def _stop_worker(stop: asyncio.Event, task: asyncio.Task[None]) -> None:
    """Stop claiming and let running jobs finish (``drain_timeout_s``) or go back."""
    stop.set()
    with contextlib.suppress(Exception):  # already logged by _worker_ended
        await task


PROBLEM_REF = {"$ref": "#/components/schemas/Problem"}
INTERNAL_ERROR = "A bug: logged with its traceback; the answer holds nothing internal."


def as_problem_json(schema: dict[str, Any]) -> dict[str, Any]:
    """Every error response of ``schema`` as ``application/problem+json`` with ``Problem``.

    FastAPI documents error models as ``application/json`` and adds its own 422 model;
    the service answers with problem+json everywhere, so the document says that.
    """
    for path in schema.get("paths", {}).values():
        for operation in path.values():
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
