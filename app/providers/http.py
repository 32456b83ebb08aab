"""The one ``httpx.AsyncClient`` a process shares across providers.

Build it once in the lifespan (or the worker's start-up) and close it on shutdown::

    async with make_client() as http:
        router = build_router(config, http)

Per-request timeouts come from each provider's ``timeout_s`` and the call's deadline,
so the client's own timeout is only a backstop. Redirects are not followed: a provider
that redirects a POST is misconfigured, and following it could carry the key elsewhere.
"""

from __future__ import annotations

from typing import Final

import httpx

DEFAULT_TIMEOUT_S: Final = 600.0
DEFAULT_MAX_CONNECTIONS: Final = 100
USER_AGENT: Final = "reprompt"


def make_client(
    *,
    max_connections: int = DEFAULT_MAX_CONNECTIONS,
    timeout_s: float = DEFAULT_TIMEOUT_S,
    trust_env: bool = True,
    transport: httpx.AsyncBaseTransport | None = None,
) -> httpx.AsyncClient:
    """A client tuned for long model calls. ``trust_env=False`` ignores proxy variables."""
    return httpx.AsyncClient(
        timeout=httpx.Timeout(timeout_s, connect=min(timeout_s, 10.0)),
        # Keep every connection alive: a TLS handshake per model call is pure latency.
        limits=httpx.Limits(
            max_connections=max_connections, max_keepalive_connections=max_connections
        ),
        headers={"user-agent": USER_AGENT},
        follow_redirects=False,
        trust_env=trust_env,
        transport=transport,
    )
