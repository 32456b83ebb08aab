"""What a request handler may use: the process's resources, built once in the lifespan.

@router.get("/v1/jobs/{job_id}")
async def get_job(res: Res, tenant: Tenant) -> Response:
    await res.store.get(job_id, tenant=tenant)
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Annotated, cast

from fastapi import Depends, Request
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer

from app.api.auth import authenticate
from app.api.fairness import Fairness
from app.api.problems import NotReady
from app.core import codes
from app.outbound.kit import Outbound
from app.providers.router import Router
from app.settings import ApiKey, Settings
from app.store import JobStore


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

    def require_router(self) -> Router:
        if self.router is None:
            raise NotReady(
                self.provider_problem or "no model provider is configured",
                code=codes.LLM_CONFIG,
            )
        return self.router


async def get_resources(request: Request) -> Resources:
    # async: FastAPI runs a plain ``def`` dependency in a thread, a hop per request.
    return _resources(request)


def _resources(request: Request) -> Resources:
    return cast(Resources, request.app.state.resources)


_bearer = HTTPBearer(
    auto_error=False,
    scheme_name="bearer",
    description="An API key from REPROMPT_API_KEYS. Not needed when none are configured.",
)


async def get_tenant(
    request: Request,
    credentials: Annotated[HTTPAuthorizationCredentials | None, Depends(_bearer)],
) -> str:
    """The caller's tenant (the name its key was configured under)."""
    token = credentials.credentials if credentials is not None else None
    present = token is not None or "authorization" in request.headers
    res = _resources(request)
    tenant = authenticate(token, res.keys, present=present)
    declared = request.headers.get("content-length", "")
    body_bytes = int(declared) if declared.isdigit() else 0
    res.fairness.admit(tenant, body_bytes=body_bytes)  # 429 when faster than its share
    return tenant


Res = Annotated[Resources, Depends(get_resources)]
Tenant = Annotated[str, Depends(get_tenant)]
