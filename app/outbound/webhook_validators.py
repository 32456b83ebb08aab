"""A webhook validator's call: the worker POSTs a candidate answer to the client's URL,
signed, and reads back ``{"ok": bool, "diagnosis": "..."}``::

    ok, diagnosis = await check_candidate(client, signer, tenant="acme", job_id=...,
                                          url=..., attempt=2, value={...}, input=...,
                                          metadata={...}, timeout_ms=5000)

The receiver gets ``{"jobId", "attempt", "value", "input", "metadata"}`` with Standard
Webhooks headers. Anything but a well-formed verdict (a refused URL, a timeout after the
transport retries, an HTTP error, a body that is not a verdict) raises
``ValidatorUnavailable``: the validator's failure, never the model's.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping
from typing import Any, Final

from app.core.wire.errors import ValidatorUnavailable
from app.outbound.client import OutboundClient
from app.outbound.errors import OutboundFailed, OutboundRefused
from app.outbound.webhooks import Signer

DIAGNOSIS_CHARS: Final = 2000
# What a verdict body may be, at most: it is a small JSON object.
VERDICT_BYTES: Final = 64 * 1024


def message_id(job_id: str, url: str, attempt: int) -> str:
    """The ``webhook-id`` of one check, so a receiver can tell a repeat.

    The same for the transport retries of it and a rerun of the same attempt after a
    worker loss.
    """
    digest = hashlib.sha256(f"{job_id}\x00{url}\x00{attempt}".encode()).hexdigest()
    return f"msg_{digest[:32]}"


async def check_candidate(
    client: OutboundClient,
    signer: Signer,
    *,
    tenant: str,
    job_id: str,
    url: str,
    attempt: int,
    value: Any,
    input: Any,
    metadata: Mapping[str, str],
    timeout_ms: int,
) -> tuple[bool, str | None]:
    """``(ok, diagnosis)`` from the client's validator, or ``ValidatorUnavailable``."""
    body = json.dumps(
        {"jobId": job_id, "attempt": attempt, "value": value, "input": input, "metadata": metadata},
        ensure_ascii=False,
        separators=(",", ":"),
    ).encode("utf-8")
    headers = signer.headers(tenant, message_id(job_id, url, attempt), body)
    host = _host(client, url)
    try:
        response = await client.post_json(
            url, body, headers, timeout_s=timeout_ms / 1000, max_bytes=VERDICT_BYTES
        )
    except OutboundRefused as refused:
        raise ValidatorUnavailable(f"the validator's URL was refused: {refused.detail}") from None
    except OutboundFailed as failed:
        raise ValidatorUnavailable(_failure(failed, host)) from None
    return _verdict(response.body, host)


def _verdict(raw: bytes, host: str) -> tuple[bool, str | None]:
    try:
        answer = json.loads(raw)
    except (ValueError, UnicodeDecodeError):
        answer = None
    if not isinstance(answer, dict) or not isinstance(answer.get("ok"), bool):
        raise ValidatorUnavailable(
            f"the validator at {host} did not answer with a verdict "
            '({"ok": true|false, "diagnosis": "..."})'
        )
    diagnosis = answer.get("diagnosis")
    if diagnosis is not None and not isinstance(diagnosis, str):
        raise ValidatorUnavailable(f"the validator at {host} sent a diagnosis that is not text")
    if answer["ok"]:
        return True, None
    # Quoted and named by the turn loop (app.core.answer.quote); empty: no reason given.
    return False, (diagnosis or "").strip()[:DIAGNOSIS_CHARS] or None


def _failure(failed: OutboundFailed, host: str) -> str:
    validator = f"the validator at {host}"
    tries = f"{failed.attempts} attempt(s)"
    if failed.reason == "timeout":
        return f"{validator} did not answer in time ({tries})"
    if failed.reason == "redirect":
        return f"{validator} answered with a redirect; redirects are not followed"
    if failed.reason == "too_large":
        return f"{validator} answered with more than {VERDICT_BYTES} bytes"
    if failed.http_status is not None:
        return f"{validator} answered HTTP {failed.http_status} ({tries})"
    return f"{validator} could not be reached ({tries})"


def _host(client: OutboundClient, url: str) -> str:
    try:
        return client.guard.target(url).host
    except OutboundRefused:
        return "its URL"
