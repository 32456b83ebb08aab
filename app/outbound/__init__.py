"""The outbound guard: every HTTP call a tenant can aim (HTTP tools, webhook validators,
completion callbacks) goes through here. See docs/outbound.md.

    guard = Guard(OutboundPolicy(allow=Allowlist.parse(settings.outbound_allow), ...))
    async with OutboundClient(guard) as client:
        outcome = await call_http_tool(client, signer, tenant=..., ...)

Modules: ``guard`` (what may be called, and where it resolves), ``client`` (the guarded
POST), ``webhooks`` (Standard Webhooks signatures), ``secrets`` (tenant secrets for
headers), ``http_tools`` (one tool call as an outcome), ``errors``.
"""

from app.outbound.client import OutboundClient, OutboundResponse
from app.outbound.errors import OutboundError, OutboundFailed, OutboundRefused
from app.outbound.guard import Allowlist, Guard, OutboundPolicy, Target
from app.outbound.http_tools import HttpToolOutcome, call_http_tool
from app.outbound.secrets import RenderedHeaders, ToolSecrets, UnknownSecret
from app.outbound.webhooks import InvalidSignature, Signer, load_signing_key, sign, verify

__all__ = [
    "Allowlist",
    "Guard",
    "HttpToolOutcome",
    "InvalidSignature",
    "OutboundClient",
    "OutboundError",
    "OutboundFailed",
    "OutboundPolicy",
    "OutboundRefused",
    "OutboundResponse",
    "RenderedHeaders",
    "Signer",
    "Target",
    "ToolSecrets",
    "UnknownSecret",
    "call_http_tool",
    "load_signing_key",
    "sign",
    "verify",
]
