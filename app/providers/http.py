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
Proxies from the environment (``trust_env``) still go through httpx's own transports.
"""

from __future__ import annotations

import urllib.request
from http.cookiejar import CookieJar
from typing import Any, Final

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
    """A client tuned for long model calls. ``trust_env=False`` ignores proxy variables.

    At most ``max_connections`` connections; requests beyond that wait for one (within
    the request's timeout).
    """
    # Keep every connection alive: a TLS handshake per model call is pure latency.
    limits = httpx.Limits(
        max_connections=max_connections, max_keepalive_connections=max_connections
    )
    return httpx.AsyncClient(
        timeout=httpx.Timeout(timeout_s, connect=min(timeout_s, 10.0)),
        # The limits apply to proxy transports (set from the environment) only: the default
        # transport is H1Transport.
        limits=limits,
        headers={"user-agent": USER_AGENT},
        follow_redirects=False,
        cookies=_Cookies(),
        trust_env=trust_env,
        transport=transport
        or H1Transport(
            max_connections=max_connections,
            ssl_context=httpx.create_ssl_context(trust_env=trust_env),
        ),
    )


class _Cookies(CookieJar):
    """httpx's cookie jar, which skips the replies that set no cookie: httpx hands it every
    reply, and the standard jar builds an ``email.message.Message`` of all its headers to
    find out that there is nothing to keep."""

    def extract_cookies(self, response: Any, request: urllib.request.Request) -> None:
        inner = getattr(response, "response", None)  # httpx's wrapper holds the reply
        if isinstance(inner, httpx.Response) and not any(
            name.lower() in _SET_COOKIE for name, _ in inner.headers.raw
        ):
            return
        super().extract_cookies(response, request)


_SET_COOKIE: Final = frozenset({b"set-cookie", b"set-cookie2"})
