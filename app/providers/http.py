"""The one ``httpx.AsyncClient`` a process shares across providers.

Build it once in the lifespan (or the worker's start-up) and close it on shutdown::

    async with make_client(max_connections=10_000) as http:
        router = build_router(config, http)

Per-request timeouts come from each provider's ``timeout_s`` and the call's deadline,
so the client's own timeout is only a backstop. Redirects are not followed: a provider
that redirects a POST is misconfigured, and following it could carry the key elsewhere.

Its connections live in small pools (``PoolShards``) rather than one big one: httpcore's
pool looks at every connection it holds each time a request starts or ends, so with one
pool of 10,000 connections (a worker holding 10,000 jobs) most of the worker's CPU went
into that bookkeeping. Pools of ``POOL_SIZE`` cost the same per request at any total.
Their sockets are plain asyncio (``app.providers.netio``): a request is one send.
"""

from __future__ import annotations

import urllib.request
from collections.abc import AsyncIterator, Callable
from http.cookiejar import CookieJar
from typing import Any, Final

import httpcore
import httpx

from app.providers.netio import AsyncioBackend

DEFAULT_TIMEOUT_S: Final = 600.0
DEFAULT_MAX_CONNECTIONS: Final = 100
# Connections per pool. httpcore's cost per request grows with its pool (linearly, and
# with the square of its idle connections): 2,000 requests at once through one client cost
# 4.8 ms of CPU each with one pool, 3.2 with pools of 64, 2.4 with 32, 1.4 with 8 and 1.2
# with 1 (a pool per connection, and an object per pool). On asyncio sockets, 16 and 64
# callers cost 680 and 815 us a call with pools of 8, 620 and 735 with 4, about 590 with
# 2 or 1. Not fewer than 4: a pool holds connections to any provider, and one with fewer
# slots than the providers a worker calls in turn would close one to open another.
POOL_SIZE: Final = 4
USER_AGENT: Final = "reprompt"


def make_client(
    *,
    max_connections: int = DEFAULT_MAX_CONNECTIONS,
    timeout_s: float = DEFAULT_TIMEOUT_S,
    trust_env: bool = True,
    transport: httpx.AsyncBaseTransport | None = None,
    pool_size: int = POOL_SIZE,
) -> httpx.AsyncClient:
    """A client tuned for long model calls. ``trust_env=False`` ignores proxy variables.

    At most ``max_connections`` connections, in pools of ``pool_size``; requests beyond
    that wait for a connection (within the request's timeout).
    """
    # Keep every connection alive: a TLS handshake per model call is pure latency.
    limits = httpx.Limits(
        max_connections=max_connections, max_keepalive_connections=max_connections
    )
    return httpx.AsyncClient(
        timeout=httpx.Timeout(timeout_s, connect=min(timeout_s, 10.0)),
        # The limits apply to proxy transports (set from the environment) only: the default
        # transport is the pool shards.
        limits=limits,
        headers={"user-agent": USER_AGENT},
        follow_redirects=False,
        cookies=_Cookies(),
        trust_env=trust_env,
        transport=transport
        or PoolShards(max_connections=max_connections, pool_size=pool_size, trust_env=trust_env),
    )


_BACKEND: Final = AsyncioBackend()


class PoolShards(httpx.AsyncBaseTransport):
    """``max_connections`` connections in pools of at most ``pool_size`` (httpx transports,
    made as needed), one TLS context for all of them.

    A request goes to the pool that was last seen with room (so busy pools fill up and keep
    their connections warm, and idle ones stay idle); when every pool is full it waits in
    one of them, taken in turn.
    """

    def __init__(self, *, max_connections: int, pool_size: int, trust_env: bool = True) -> None:
        if max_connections < 1 or pool_size < 1:
            raise ValueError("max_connections and pool_size must be at least 1")
        self._ssl = httpx.create_ssl_context(trust_env=trust_env)
        self._trust_env = trust_env
        sizes = [pool_size] * (max_connections // pool_size)
        if max_connections % pool_size:
            sizes.append(max_connections % pool_size)
        self._sizes = sizes
        self._pools: list[httpx.AsyncHTTPTransport | None] = [None] * len(sizes)
        self._load = [0] * len(sizes)  # requests each pool is serving or queueing
        # Pools with room, the one to use last; a pool is in it at most once.
        self._room = list(reversed(range(len(sizes))))
        self._listed = [True] * len(sizes)
        self._turn = 0

    @property
    def pools(self) -> int:
        """How many pools have been made (they are made when first needed)."""
        return sum(pool is not None for pool in self._pools)

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        index = self._take()
        try:
            response = await self._pool(index).handle_async_request(request)
        except BaseException:
            self._give_back(index)
            raise
        response.stream = _Released(response.stream, lambda: self._give_back(index))
        return response

    async def aclose(self) -> None:
        for pool in self._pools:
            if pool is not None:
                await pool.aclose()

    def _take(self) -> int:
        while self._room:
            index = self._room[-1]
            if self._load[index] < self._sizes[index]:
                break
            self._room.pop()
            self._listed[index] = False
        else:
            # Every pool is full: queue in one, in turn.
            index = self._turn % len(self._sizes)
            self._turn += 1
        self._load[index] += 1
        return index

    def _give_back(self, index: int) -> None:
        self._load[index] -= 1
        if not self._listed[index] and self._load[index] < self._sizes[index]:
            self._room.append(index)
            self._listed[index] = True

    def _pool(self, index: int) -> httpx.AsyncHTTPTransport:
        pool = self._pools[index]
        if pool is None:
            size = self._sizes[index]
            limits = httpx.Limits(max_connections=size, max_keepalive_connections=size)
            pool = self._pools[index] = httpx.AsyncHTTPTransport(
                verify=self._ssl, trust_env=self._trust_env, limits=limits
            )
            # The same pool on asyncio sockets (app.providers.netio) rather than anyio's:
            # httpx takes no network backend, so its pool is replaced with one that has it.
            pool._pool = httpcore.AsyncConnectionPool(
                ssl_context=self._ssl,
                max_connections=size,
                max_keepalive_connections=size,
                keepalive_expiry=limits.keepalive_expiry,
                network_backend=_BACKEND,
            )
        return pool


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


class _Released(httpx.AsyncByteStream):
    """A response body that tells its pool shard when it is closed (read or dropped)."""

    def __init__(
        self, inner: httpx.AsyncByteStream | httpx.SyncByteStream, done: Callable[[], None]
    ) -> None:
        assert isinstance(inner, httpx.AsyncByteStream)  # an async transport's body
        self._inner = inner
        self._done = done
        self._closed = False

    async def __aiter__(self) -> AsyncIterator[bytes]:
        async for chunk in self._inner:
            yield chunk

    async def aclose(self) -> None:
        try:
            await self._inner.aclose()
        finally:
            if not self._closed:
                self._closed = True
                self._done()
