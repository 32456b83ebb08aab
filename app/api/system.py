"""The service's own endpoints: liveness, readiness, models, Prometheus metrics.

GET /healthz      200 while the process serves requests
GET /readyz       200 when Redis answers and a model provider can answer, else 503
GET /v1/models    configured models and routes (OpenAI's list), the default, each model's circuit
GET /v1/models/{id}  one of them (OpenAI's model object)
GET /metrics      Prometheus text format (no auth: scraped from inside the network)
"""

from __future__ import annotations

import logging
import time

from fastapi import APIRouter, Request
from fastapi.responses import Response

from app import metrics
from app.api.problems import NOT_READY, NotFound, problem
from app.api.resources import Authed, Caller, Res
from app.api.schemas import (
    Circuit,
    Health,
    ListedModel,
    ModelInfo,
    ModelPrice,
    Models,
    Ready,
    RouteInfo,
    problems,
    respond,
)
from app.core.wire import codes
from app.providers.circuit import Circuits
from app.store import StoreUnavailable

log = logging.getLogger(__name__)

router = APIRouter()

# A model's ``created`` in OpenAI's list: the service has no date for a model of its own
# configuration, so it says when it started.
_STARTED = int(time.time())


@router.get("/healthz", response_model=Health, tags=["system"], summary="Liveness")
async def healthz() -> Response:
    return respond(Health(status="ok"))


@router.get(
    "/readyz",
    response_model=Ready,
    tags=["system"],
    summary="Readiness: Redis reachable, a provider that can answer",
    responses=problems(
        503, s503="Not ready: `checks` says which dependency is missing and `detail` why."
    ),
)
async def readyz(request: Request, res: Res) -> Response:
    if res.router is None:
        provider, provider_code = res.provider_problem or "missing", codes.LLM_CONFIG
    else:  # configured; a supervised local model may be down (crashed, restarting)
        provider, provider_code = res.router.problem() or "ok", codes.LLM_UNAVAILABLE
    checks = {
        "redis": "ok" if await res.store.ping() else "not reachable",
        "provider": provider,
    }
    failing = {name: why for name, why in checks.items() if why != "ok"}
    if not failing:
        return respond(Ready(status="ready", checks=checks))
    code = provider_code if set(failing) == {"provider"} else NOT_READY
    detail = "; ".join(f"{name}: {why}" for name, why in failing.items())
    return problem(503, code, detail, instance=request.url.path, extra={"checks": checks})


@router.get(
    "/v1/models",
    response_model=Models,
    tags=["models"],
    summary="Models, routes and circuit states (OpenAI's model list)",
    responses=problems(401, 503),
)
async def list_models(caller: Authed) -> Response:
    return respond(_models(caller))


@router.get(
    "/v1/models/{model_id:path}",  # a name may hold slashes (openrouter/auto)
    response_model=ListedModel,
    tags=["models"],
    summary="One model or route (OpenAI's model object)",
    responses=problems(401, 404, 503),
)
async def get_model(model_id: str, caller: Authed) -> Response:
    found = next((m for m in _models(caller).data if m.id == model_id), None)
    if found is None:
        raise NotFound(f"no model or route {model_id[:200]!r}")
    return respond(found)


def _models(caller: Caller) -> Models:
    res = caller.res
    router_ = res.require_router()
    circuits = router_.snapshot()
    listed: list[ModelInfo] = []
    routes: list[RouteInfo] = []
    data: list[ListedModel] = []
    for name in router_.names():
        members = router_.resolve(name)
        if members != (name,):
            routes.append(RouteInfo(name=name, models=list(members)))
            data.append(
                ListedModel(id=name, created=_STARTED, owned_by="reprompt", route=list(members))
            )
            continue
        provider = res.model_providers.get(name, "")
        state = circuits.get(Circuits.key(provider, name))
        circuit = (
            None
            if state is None
            else Circuit.model_validate({"state": state["state"], "failures": state["failures"]})
        )
        price, source = router_.price_of(name)
        shown = (
            None
            if price is None
            else ModelPrice(
                input_usd_per_mtok=price.input_usd_per_mtok,
                output_usd_per_mtok=price.output_usd_per_mtok,
                cached_input_usd_per_mtok=price.cached_input_usd_per_mtok,
                cache_write_usd_per_mtok=price.cache_write_usd_per_mtok,
                source=source or "",
            )
        )
        listed.append(ModelInfo(name=name, provider=provider, circuit=circuit, price=shown))
        data.append(
            ListedModel(
                id=name,
                created=_STARTED,
                owned_by=provider,
                provider=provider,
                circuit=circuit,
                price=shown,
            )
        )
    return Models(data=data, default=router_.default, models=listed, routes=routes)


@router.get(
    "/metrics",
    tags=["system"],
    summary="Prometheus metrics",
    response_class=Response,
    responses={200: {"content": {"text/plain": {"schema": {"type": "string"}}}}},
)
async def get_metrics(res: Res) -> Response:
    try:
        queue: tuple[int, float] | None = await res.store.queue_stats()
    except StoreUnavailable as exc:
        log.warning("metrics: queue stats unavailable: %r", exc)
        queue = None
    try:
        outbox: int | None = await res.store.outbox.depth()
    except StoreUnavailable as exc:
        log.warning("metrics: callback outbox depth unavailable: %r", exc)
        outbox = None
    circuits = res.router.snapshot() if res.router is not None else None
    metrics.record_state(queue=queue, circuits=circuits, outbox=outbox)
    body, content_type = metrics.exposition()
    return Response(body, media_type=content_type)
