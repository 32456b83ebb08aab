"""The outbound parts one process uses, built once from its settings by the assembly.

async with open_outbound(settings) as outbound:
    outbound.guard.check_url(url)                 # the API, at submit
    outcome = await outbound.call_tool(...)       # the worker, for an HTTP tool
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from app.core.wire.spec import JobSpec, ValidatorSpec
from app.outbound.client import OutboundClient
from app.outbound.guard import Guard
from app.outbound.http_tools import HttpToolOutcome, call_http_tool
from app.outbound.secrets import ToolSecrets
from app.outbound.webhook_validators import check_candidate
from app.outbound.webhooks import Signer


@dataclass(frozen=True, slots=True)
class Outbound:
    guard: Guard
    client: OutboundClient
    signer: Signer
    secrets: ToolSecrets
    timeout_ms: int

    async def call_tool(
        self,
        *,
        tenant: str,
        job_id: str,
        call_id: str,
        name: str,
        url: str,
        headers: Mapping[str, str],
        arguments: dict[str, Any],
        timeout_ms: int | None,
    ) -> HttpToolOutcome:
        """One HTTP tool call, signed with the tenant's secret, as an outcome."""
        return await call_http_tool(
            self.client,
            self.signer,
            tenant=tenant,
            job_id=job_id,
            call_id=call_id,
            tool_name=name,
            url=url,
            headers=headers,
            arguments=arguments,
            timeout_ms=min(timeout_ms or self.timeout_ms, self.timeout_ms),
            secrets=self.secrets,
        )

    async def check(
        self,
        validator: ValidatorSpec,
        value: Any,
        attempt: int,
        *,
        tenant: str,
        job_id: str,
        spec: JobSpec,
    ) -> tuple[bool, str | None]:
        """A webhook validator's verdict on ``value`` (``ValidatorUnavailable`` if none)."""
        assert validator.url is not None  # checked when the validator was built
        timeout_ms = validator.timeout_ms or self.timeout_ms
        return await check_candidate(
            self.client,
            self.signer,
            tenant=tenant,
            job_id=job_id,
            url=validator.url,
            attempt=attempt,
            value=value,
            input=spec.input,
            metadata=spec.metadata,
            timeout_ms=min(timeout_ms, self.timeout_ms),
        )
