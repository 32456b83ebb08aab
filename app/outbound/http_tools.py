"""An HTTP tool call: the worker POSTs a model's tool call to the tenant's URL, signed.

The receiver gets ``{"jobId", "toolCallId", "name", "arguments"}`` as JSON with Standard
Webhooks headers (``app.outbound.webhooks``), and answers with the tool's result as its
body. Whatever happens comes back as an outcome the model can read, never an exception::

    outcome = await call_http_tool(client, signer, tenant="acme", job_id=job.id,
                                   call_id=call.id, tool_name="lookup", url=tool.url,
                                   headers=tool.headers, arguments={"sku": "A-1"},
                                   timeout_ms=5000, secrets=tool_secrets)
    outcome.ok, outcome.text, outcome.outcome    # True, '{"price": 3}', "ok"

``text`` holds the answer, or a short error that names only the tool's own host: never an
address it resolved to, never a header or secret value. A secret goes only to the hosts the
operator bound it to; an error reply to a call that carried a secret is never read out nor
kept (a receiver could echo the secret in any encoding), and a 2xx answer has the secret's
exact text replaced by ``[redacted]``.
"""

from __future__ import annotations

import hashlib
import json
import time
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Literal

from app.core.answer.quote import quoted
from app.outbound.client import REDACTED, OutboundClient
from app.outbound.errors import OutboundFailed, OutboundRefused
from app.outbound.secrets import BadHeader, ToolSecrets, UnknownSecret
from app.outbound.webhooks import Signer

Outcome = Literal["ok", "refused", "timeout", "http_error", "too_large", "error"]


@dataclass(frozen=True, slots=True)
class HttpToolOutcome:
    """What one HTTP tool call gave: for the model (``text``) and the turn record."""

    ok: bool
    text: str
    outcome: Outcome
    duration_ms: int
    bytes: int


def message_id(job_id: str, call_id: str) -> str:
    """The ``webhook-id`` of one tool call, so a receiver can tell a repeat.

    The same for each retry of the call and for a rerun of the job after a worker loss.
    """
    digest = hashlib.sha256(f"{job_id}\x00{call_id}".encode()).hexdigest()
    return f"msg_{digest[:32]}"


async def call_http_tool(
    client: OutboundClient,
    signer: Signer,
    *,
    tenant: str,
    job_id: str,
    call_id: str,
    tool_name: str,
    url: str,
    headers: Mapping[str, str] | None,
    arguments: dict[str, Any],
    timeout_ms: int,
    secrets: ToolSecrets | None = None,
) -> HttpToolOutcome:
    """POST one tool call through the guard and say how it went.

    ``headers`` may reference ``{{secret:NAME}}`` (filled in from ``secrets``);
    ``timeout_ms`` bounds the whole call, transport retries included, within the policy.
    """
    started = time.monotonic()
    body = json.dumps(
        {"jobId": job_id, "toolCallId": call_id, "name": tool_name, "arguments": arguments},
        ensure_ascii=False,
        separators=(",", ":"),
    ).encode("utf-8")
    host = _host(client, url)
    try:
        rendered = (secrets or ToolSecrets.none()).render_headers(
            headers, tenant, host=None if host == _NO_HOST else host
        )
    except (UnknownSecret, BadHeader) as exc:
        return _outcome("error", f"the tool's headers could not be prepared: {exc}", started)
    signed = {**rendered.headers, **signer.headers(tenant, message_id(job_id, call_id), body)}
    try:
        response = await client.post_json(
            url, body, signed, timeout_s=max(timeout_ms, 1) / 1000, redact=rendered.secrets
        )
    except OutboundRefused as refused:
        return _outcome("refused", f"the tool's URL was refused: {refused.detail}", started)
    except OutboundFailed as failed:
        return _outcome(*_failure(failed, host, carried_secret=bool(rendered.secrets)), started)
    text = _scrub(response.body.decode("utf-8", errors="replace"), rendered.secrets)
    return HttpToolOutcome(True, text, "ok", _ms(started), len(response.body))


def _failure(failed: OutboundFailed, host: str, *, carried_secret: bool) -> tuple[Outcome, str]:
    """The outcome and the model's text for a failed call.

    Built from the reason and the status, not from the error's detail (which may name an
    address); without the reply's excerpt when the call carried a secret.
    """
    tool = f"the tool at {host}"
    if failed.reason == "timeout":
        return "timeout", f"{tool} did not answer in time ({failed.attempts} attempt(s))"
    if failed.reason == "too_large":
        return "too_large", f"{tool}: the request or its answer was larger than allowed"
    if failed.reason == "redirect":
        return "http_error", (
            f"{tool} answered {failed.http_status} with a redirect; redirects are not followed"
        )
    if failed.http_status is not None:
        if carried_secret:
            return "http_error", (
                f"{tool} answered HTTP {failed.http_status} (its reply is not shown: the "
                "call carried a secret)"
            )
        if not failed.excerpt:
            return "http_error", f"{tool} answered HTTP {failed.http_status} with no details"
        return "http_error", quoted(
            f"{tool} answered HTTP {failed.http_status} and", failed.excerpt
        )
    return "error", f"{tool} could not be reached ({failed.attempts} attempt(s))"


_NO_HOST = "its URL"


def _host(client: OutboundClient, url: str) -> str:
    try:
        return client.guard.target(url).host
    except OutboundRefused:
        return _NO_HOST


def _outcome(outcome: Outcome, text: str, started: float) -> HttpToolOutcome:
    return HttpToolOutcome(False, text, outcome, _ms(started), 0)


def _scrub(text: str, secrets: tuple[str, ...]) -> str:
    for secret in sorted(secrets, key=len, reverse=True):
        text = text.replace(secret, REDACTED)
    return text


def _ms(started: float) -> int:
    return round((time.monotonic() - started) * 1000)
