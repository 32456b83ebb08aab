"""The ``httpx.AsyncClient``s model calls go through: one per proxy, built once per process.

    async with open_clients(config, max_connections=100, tracing=tracing) as clients:
        router = build_router(config, clients)
    async with make_client() as http:              # one client, the environment's proxies
        ...

Every client is httpx's ``AsyncClient`` on ``httpx-aiohttp``'s transport (aiohttp's
connection pool and C parser; openai-python ships it as ``DefaultAioHttpClient``): httpx's
own default stack costs about five times its CPU per model call at a worker's concurrency
(docs/benchmarks/provider-call.md).

Proxies: a client honours ``HTTPS_PROXY``, ``HTTP_PROXY``, ``ALL_PROXY`` and ``NO_PROXY``
(and their lowercase forms) as httpx does with ``trust_env``: read with
``urllib.request.getproxies``, each turned into one of httpx's mount patterns
(``"https://"``, ``"all://*example.com"``), which httpx itself matches against every
request's URL. (httpx only builds those mounts itself for a client without a transport of
its own, and then the transports it builds keep cookies.) A provider whose entry sets
``proxy`` gets a client that sends everything through that proxy; the embedded local model
a client that never uses one (it listens on loopback).

No cookies are kept or sent, by httpx (``NoCookies``, a standard-library jar that keeps
none) nor by aiohttp (its ``DummyCookieJar``): an API key authenticates every model call,
and what a provider's CDN sets (``__cf_bm``) is not ours to carry from one tenant's call
to another's.

Per-request timeouts come from each provider's ``timeout_s`` and the call's deadline,
so the client's own timeout is only a backstop. Redirects are not followed: a provider
that redirects a POST is misconfigured, and following it could carry the key elsewhere.
"""

from __future__ import annotations

import base64
import ssl
import urllib.request
from collections.abc import AsyncIterator, Callable, Mapping
from contextlib import AsyncExitStack, asynccontextmanager
from http.cookiejar import Cookie, CookieJar
from ipaddress import IPv4Address, IPv6Address
from typing import TYPE_CHECKING, Final
from urllib.parse import urlsplit

import aiohttp
import httpx
from httpx_aiohttp import AiohttpTransport

from app.core.wire.errors import InvalidInput

if TYPE_CHECKING:
    from app.providers.config import ProviderConfig, ProvidersConfig
    from app.tracing import Tracing

DEFAULT_TIMEOUT_S: Final = 600.0
DEFAULT_MAX_CONNECTIONS: Final = 100
USER_AGENT: Final = "reprompt"
# Below the 5 s idle timeout of uvicorn (llama.cpp's server, the simulator): a connection
# is dropped by us before the server closes it under a request.
KEEPALIVE_EXPIRY_S: Final = 4.0
PROXY_SCHEMES: Final = ("http", "https")


def make_client(
    *,
    max_connections: int = DEFAULT_MAX_CONNECTIONS,
    timeout_s: float = DEFAULT_TIMEOUT_S,
    trust_env: bool = True,
    proxy: str | None = None,
    tracing: Tracing | None = None,
) -> httpx.AsyncClient:
    """A client tuned for long model calls, at most ``max_connections`` connections per proxy.

    ``proxy``: every request through it. Else with ``trust_env`` the environment's
    proxies (and ``SSL_CERT_FILE``/``SSL_CERT_DIR`` choose the CAs); ``trust_env=False``:
    straight to the server. With ``tracing`` each request is a client span.
    """
    context = httpx.create_ssl_context(trust_env=trust_env)

    def transport(via: str | None) -> httpx.AsyncBaseTransport:
        return _transport(context, max_connections, via, tracing)

    mounts: dict[str, httpx.AsyncBaseTransport | None] = {}
    if proxy is not None:
        mounts["all://"] = transport(proxy)
    elif trust_env:
        patterns = environment_proxies()
        made = {url: transport(url) for url in set(patterns.values()) if url is not None}
        mounts = {pattern: made[url] if url else None for pattern, url in patterns.items()}
    return httpx.AsyncClient(
        timeout=httpx.Timeout(timeout_s, connect=min(timeout_s, 10.0)),
        headers={"user-agent": USER_AGENT},
        follow_redirects=False,
        trust_env=trust_env,
        cookies=NoCookies(),
        transport=transport(None),
        mounts=mounts,
    )


class NoCookies(CookieJar):
    """A cookie jar that keeps none and parses none.

    The standard library parses a reply's cookies through an ``email`` message of every
    header, twice a reply: a good part of a model call's CPU.
    """

    def extract_cookies(self, response: object, request: object) -> None:
        return

    def set_cookie(self, cookie: Cookie) -> None:
        return

    def add_cookie_header(self, request: object) -> None:
        return


def _transport(
    context: ssl.SSLContext, max_connections: int, proxy: str | None, tracing: Tracing | None
) -> httpx.AsyncBaseTransport:
    def session() -> aiohttp.ClientSession:  # built at the first request, in the loop
        connector = aiohttp.TCPConnector(
            limit=max_connections, keepalive_timeout=KEEPALIVE_EXPIRY_S, ssl=context
        )
        return aiohttp.ClientSession(connector=connector, cookie_jar=aiohttp.DummyCookieJar())

    if proxy is None:
        made: httpx.AsyncBaseTransport = AiohttpTransport(verify=context, client=session)
    else:
        made = _through(
            proxy, lambda via: AiohttpTransport(verify=context, proxy=via, client=session)
        )
    return made if tracing is None else tracing.http_transport(made)


def _through(
    url: str, transport: Callable[[httpx.Proxy], httpx.AsyncBaseTransport]
) -> httpx.AsyncBaseTransport:
    """A transport through the proxy at ``url``, its credentials sent as a header.

    ``Proxy-Authorization`` is aiohttp's way (its ``BasicAuth`` is deprecated). aiohttp adds
    the proxy's headers only to a ``CONNECT``, so a plain-http request, which goes to the
    proxy whole, gets the header here.
    """
    parsed = httpx.URL(url)
    if not parsed.username and not parsed.password:
        return transport(httpx.Proxy(parsed))
    pair = f"{parsed.username}:{parsed.password}".encode()
    header = {"proxy-authorization": "Basic " + base64.b64encode(pair).decode("ascii")}
    bare = parsed.copy_with(username=None, password=None)
    return _PlainRequestsAuthorized(transport(httpx.Proxy(bare, headers=header)), header)


class _PlainRequestsAuthorized(httpx.AsyncBaseTransport):
    """``transport``, with ``headers`` added to each plain-http request (sent to the proxy)."""

    def __init__(self, transport: httpx.AsyncBaseTransport, headers: Mapping[str, str]) -> None:
        self._transport = transport
        self._headers = dict(headers)

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        if request.url.scheme == "http":
            request.headers.update(self._headers)
        return await self._transport.handle_async_request(request)

    async def aclose(self) -> None:
        await self._transport.aclose()


def environment_proxies(
    proxies: Mapping[str, str] | None = None,
) -> dict[str, str | None]:
    """httpx's mount patterns for the environment's proxy variables.

    Each ``NO_PROXY`` host maps to None (no proxy); ``{}`` when none is set or ``NO_PROXY``
    is ``*``. ``proxies`` defaults to ``urllib.request.getproxies()``, which httpx reads too.
    A proxy that is not an http(s) URL is ``InvalidInput`` naming its variable.
    """
    found = urllib.request.getproxies() if proxies is None else proxies
    patterns: dict[str, str | None] = {}
    for scheme in ("http", "https", "all"):
        url = found.get(scheme)
        if url:
            url = url if "://" in url else f"http://{url}"
            problem = proxy_problem(url)
            if problem is not None:
                variable = f"{scheme.upper()}_PROXY"
                raise InvalidInput(f"{variable}: {problem}", field=variable)
            patterns[f"{scheme}://"] = url
    # NO_PROXY as httpx and curl read it: ``.example.com`` bypasses the subdomains,
    # ``example.com`` the domain and its subdomains; addresses and localhost only themselves.
    for host in (part.strip() for part in found.get("no", "").split(",")):
        if host == "*":
            return {}
        if not host:
            continue
        if "://" in host:
            patterns[host] = None
        elif _is_address(host, IPv4Address) or host.lower() == "localhost":
            patterns[f"all://{host}"] = None
        elif _is_address(host, IPv6Address):
            patterns[f"all://[{host}]"] = None
        else:
            patterns[f"all://*{host}"] = None
    return patterns


def _is_address(host: str, kind: type[IPv4Address] | type[IPv6Address]) -> bool:
    try:
        kind(host.split("/")[0])
    except ValueError:
        return False
    return True


def proxy_problem(url: str) -> str | None:
    """What is wrong with ``url`` as a proxy, or None; the text never holds its credentials."""
    try:
        parts = urlsplit(url)
        scheme, host = parts.scheme, parts.hostname
        parts.port  # noqa: B018 (parsing it is the check: a bad port raises)
    except ValueError:
        scheme, host = "", None
    if scheme not in PROXY_SCHEMES or not host:
        return f"a proxy must be an http:// or https:// URL with a host (got {proxy_label(url)})"
    return None


def proxy_label(url: str) -> str:
    """``url`` without its credentials, to name a proxy in a log line or an error."""
    scheme, sep, rest = url.partition("://")
    if not sep:
        scheme, rest = "", url
    netloc, slash, path = rest.partition("/")
    host = netloc.rpartition("@")[2]
    return f"{scheme}{sep}{host}{slash}{path}" if host else f"{scheme}{sep}(no host)"


class ProviderClients:
    """The client each provider's calls go through.

    ``default`` follows the environment's proxies, ``direct`` uses none (the local model),
    and each provider ``proxy`` gets a client of its own.
    """

    def __init__(
        self,
        default: httpx.AsyncClient,
        *,
        direct: httpx.AsyncClient | None = None,
        proxied: Mapping[str, httpx.AsyncClient] | None = None,
    ) -> None:
        self.default = default
        self.direct = default if direct is None else direct
        self._proxied = dict(proxied or {})

    def of(self, provider: ProviderConfig) -> httpx.AsyncClient:
        if provider.proxy is None:
            return self.default
        url = provider.proxy.get_secret_value()
        client = self._proxied.get(url)
        if client is None:  # built for another configuration: a mistake in the caller
            raise ValueError(f"no client was opened for proxy {proxy_label(url)}")
        return client


@asynccontextmanager
async def open_clients(
    config: ProvidersConfig,
    *,
    max_connections: int = DEFAULT_MAX_CONNECTIONS,
    tracing: Tracing | None = None,
) -> AsyncIterator[ProviderClients]:
    """The clients ``config``'s providers need, closed on exit."""
    async with AsyncExitStack() as stack:

        async def opened(*, trust_env: bool = True, proxy: str | None = None) -> httpx.AsyncClient:
            client = make_client(
                max_connections=max_connections, trust_env=trust_env, proxy=proxy, tracing=tracing
            )
            return await stack.enter_async_context(client)

        default = await opened()
        direct = await opened(trust_env=False) if any(environment_proxies().values()) else default
        proxies = {p.proxy.get_secret_value() for p in config.providers.values() if p.proxy}
        proxied = {url: await opened(proxy=url) for url in sorted(proxies)}
        yield ProviderClients(default, direct=direct, proxied=proxied)
