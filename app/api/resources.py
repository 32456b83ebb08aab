"""What a request handler may use: the process's resources, built once in the lifespan.

@router.get("/v1/jobs/{job_id}")
async def get_job(job_id: str, caller: Authed) -> Response:
    await caller.res.store.get(job_id, tenant=caller.tenant)
"""

# No ``from __future__ import annotations``: ``Bearer.__call__``'s annotations must be
# objects, as FastAPI before 0.123.7 resolves a callable instance's string annotations
# without its module's names (``request: Request`` became a query parameter).

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Annotated, Final

from fastapi import Depends, Request
from fastapi.openapi.models import HTTPBearer as HTTPBearerModel
from fastapi.security.base import SecurityBase

from app.api.auth import authenticate
from app.api.fairness import Fairness
from app.api.limits import first_headers, is_json
from app.api.problems import NotReady, UnsupportedMediaType
from app.core.admission.admit import admit
from app.core.wire import codes
from app.core.wire.spec import JobSpec
from app.outbound.kit import Outbound
from app.providers.router import Router
from app.settings import ApiKey, Settings
from app.store import JobStore
from app.store.batches import BatchStore


@dataclass(frozen=True, slots=True)
class Resources:
    """``router`` is None when no provider could be configured: ``provider_problem`` says
    what to configure, ``/readyz`` reports it and submissions are refused with 503."""

    settings: Settings
    keys: Mapping[str, ApiKey]
    store: JobStore
    router: Router | None
    provider_problem: str | None
    # model name → provider name, for /v1/models and its circuit keys
    model_providers: Mapping[str, str]
    fairness: Fairness
    outbound: Outbound  # the guard checks HTTP tools' URLs at submit; the signer's secrets
    batches: BatchStore | None = None  # batches (#30): None in embedders without them

    def require_router(self) -> Router:
        if self.router is None:
            raise NotReady(
                self.provider_problem or "no model provider is configured",
                code=codes.LLM_CONFIG,
            )
        return self.router


def resources_of(request: Request) -> Resources:
    """The resources of the app serving ``request``."""
    resources: Resources = request.scope["app"].state.resources
    return resources


async def get_resources(request: Request) -> Resources:
    # async: FastAPI runs a plain ``def`` dependency in a thread, a hop per request.
    return resources_of(request)


@dataclass(frozen=True, slots=True)
class Caller:
    """What a ``/v1`` handler needs: the process's resources and the caller's tenant."""

    res: Resources
    tenant: str

    def admit(self, spec: JobSpec) -> None:
        """``admit`` for this caller: 422 when ``spec`` breaks a cap, names an unknown model,
        or sends a URL or a secret its tenant may not use."""
        res, tenant = self.res, self.tenant
        guard, secrets = res.outbound.guard, res.outbound.secrets
        admit(
            spec,
            caps=res.settings,
            models=res.require_router(),
            check_url=guard.check_url,
            check_headers=lambda headers, url: secrets.check_headers(
                headers, tenant, host=guard.host_of(url)
            ),
        )


class Bearer(SecurityBase):
    """Who is calling, as a ``Caller``: the bearer API key's tenant (401 without a valid
    key when keys are configured), admitted by its rate share (429 when faster).

    One dependency per request, not three (resources, bearer credentials, tenant):
    FastAPI solves each dependency as a level of its own, about 15 µs apiece. In the
    OpenAPI document it is the ``bearer`` scheme ``HTTPBearer`` would declare.
    ``json_body``: the route takes a JSON body, 415 otherwise (before the key is looked
    at, as a dependency of the route's own would be).
    """

    def __init__(self, *, json_body: bool = False) -> None:
        self.model = HTTPBearerModel(description=BEARER_DESCRIPTION)
        self.scheme_name = "bearer"
        self.json_body = json_body

    async def __call__(self, request: Request) -> Caller:
        content_type, authorization, declared = first_headers(
            request.scope["headers"], b"content-type", b"authorization", b"content-length"
        )
        if self.json_body:
            require_json(content_type or "")
        token: str | None = None
        if authorization:
            scheme, _, credentials = authorization.partition(" ")
            credentials = credentials.strip()
            if scheme and credentials and scheme.lower() == "bearer":
                token = credentials
        res = resources_of(request)
        tenant = authenticate(token, res.keys, present=authorization is not None)
        body_bytes = int(declared) if declared is not None and declared.isdigit() else 0
        await res.fairness.admit(tenant, body_bytes=body_bytes)  # 429 when faster than its share
        return Caller(res, tenant)


def require_json(content_type: str) -> None:
    """415 unless a body comes as JSON: ``application/json`` or ``application/*+json``."""
    if is_json(content_type):
        return
    shown = content_type.split(";", 1)[0].strip().lower() or "none"
    raise UnsupportedMediaType(f"send the job as application/json (Content-Type was {shown})")


BEARER_DESCRIPTION: Final = (
    "An API key from REPROMPT_API_KEYS, as `Authorization: Bearer <key>`. Needed when the "
    "service has keys configured (else 401); a service without keys (loopback, or "
    "REPROMPT_INSECURE_NO_AUTH) takes requests without it, so each operation also lists "
    "no security requirement."
)

Res = Annotated[Resources, Depends(get_resources)]
# The two callers a route may declare (an embedding app may override either:
# app.dependency_overrides[BEARER_JSON] = its own, tests/api/test_fastapi_features.py).
BEARER: Final = Bearer()
BEARER_JSON: Final = Bearer(json_body=True)
Authed = Annotated[Caller, Depends(BEARER)]
AuthedJson = Annotated[Caller, Depends(BEARER_JSON)]
