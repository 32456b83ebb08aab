"""The one ``httpx.AsyncClient`` a process shares across providers.

Build it once in the lifespan (or the worker's start-up) and close it on shutdown::

    async with make_client(max_connections=10_000) as http:
        router = build_router(config, http)

Per-request timeouts come from each provider's ``timeout_s`` and the call's deadline,
so the client's own timeout is only a backstop. Redirects are not followed: a provider
that redirects a POST is misconfigured, and following it could carry the key elsewhere.

Under httpx, connections are ``app.providers.h1.H1Transport``'s: one HTTP/1.1 keep-alive
pool on plain asyncio sockets (``app.providers.netio``), in place of httpcore, h11 and
anyio, which cost about as much CPU per model call as the rest of the worker's job.
As with the pool before it, httpx reads no proxy from the environment for a client given
its own transport: ``trust_env`` only lets ``SSL_CERT_FILE``/``SSL_CERT_DIR`` choose the CAs.
"""

from __future__ import annotations

from typing import Final

import httpx

from app.providers.h1 import H1Transport

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
    """A client tuned for long model calls. ``trust_env=False`` ignores ``SSL_CERT_FILE``.

    At most ``max_connections`` connections; requests beyond that wait for one (within
    the request's timeout).
    """
    client = httpx.AsyncClient(
        timeout=httpx.Timeout(timeout_s, connect=min(timeout_s, 10.0)),
        headers={"user-agent": USER_AGENT},
        follow_redirects=False,
        trust_env=trust_env,
        # Every connection kept alive (up to 5 s idle): a TLS handshake per call is latency.
        transport=transport
        or H1Transport(
            max_connections=max_connections,
            ssl_context=httpx.create_ssl_context(trust_env=trust_env),
        ),
    )
    # httpx's only hook for its cookie handling is the attribute (its setter copies).
    client._cookies = _NoCookies()
    return client


class _NoCookies(httpx.Cookies):
    """No cookies kept or sent: an API key authenticates every model call, and what a
    provider's CDN sets (``__cf_bm``) is not ours to carry between tenants' calls. httpx
    would build a ``urllib`` request around every reply to look for them."""

    def extract_cookies(self, response: httpx.Response) -> None:
        return

    def set_cookie_header(self, request: httpx.Request) -> None:
        return
