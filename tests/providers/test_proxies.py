"""Model calls behind a proxy: the environment's (HTTP_PROXY, HTTPS_PROXY, ALL_PROXY,
NO_PROXY, read as httpx reads them) or a provider's own ``proxy``, against a real forward
proxy on loopback that alone can reach the made-up host ``provider.test``."""

from __future__ import annotations

import asyncio
import ssl
from collections.abc import Awaitable, Callable
from pathlib import Path

import pytest

from app.core.wire.errors import InvalidInput, ProviderConfigError, ProviderUnavailable
from app.providers.config import ProviderConfig, ProvidersConfig, load_providers
from app.providers.http import environment_proxies, make_client, open_clients, proxy_label
from app.providers.transport import Edge, post_json
from tests.forwardproxy import ForwardProxy
from tests.providers.rawserver import RawServer, json_reply
from tests.tls import make_certificate

PROXY_VARIABLES = ("HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY", "NO_PROXY")
EDGE = Edge("p", "m", ("sk-test-0123456789",))


@pytest.fixture(autouse=True)
def no_proxy_variables(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in PROXY_VARIABLES:
        monkeypatch.delenv(name, raising=False)
        monkeypatch.delenv(name.lower(), raising=False)


def entry(proxy: str | None = None) -> ProviderConfig:
    """A provider entry as the providers file gives it (``proxy`` a plain string)."""
    return ProviderConfig.model_validate({"kind": "openai", "proxy": proxy})


def secret(config: ProviderConfig) -> str:
    assert config.proxy is not None
    return config.proxy.get_secret_value()


async def ok(writer: asyncio.StreamWriter, index: int, server: RawServer) -> bool:
    writer.write(json_reply())
    await writer.drain()
    return True


def on_host(server: RawServer, host: str) -> str:
    return server.url.replace("127.0.0.1", host)


@pytest.mark.parametrize(
    ("variables", "patterns"),
    [
        ({}, {}),
        ({"http": "proxy:3128"}, {"http://": "http://proxy:3128"}),
        (
            {
                "https": "http://p:1",
                "all": "http://q:2",
                "no": "a.com, .b.com,localhost,10.0.0.1,::1",
            },
            {
                "https://": "http://p:1",
                "all://": "http://q:2",
                "all://*a.com": None,
                "all://*.b.com": None,
                "all://localhost": None,
                "all://10.0.0.1": None,
                "all://[::1]": None,
            },
        ),
        (
            {"http": "http://p:1", "no": "http://c.com"},
            {"http://": "http://p:1", "http://c.com": None},
        ),
        ({"http": "http://p:1", "no": "x.com,*"}, {}),
    ],
    ids=["none", "scheme-less", "every-form", "scheme-no-proxy", "star"],
)
def test_proxy_variables_become_httpx_mount_patterns_as_httpx_reads_them(
    variables: dict[str, str], patterns: dict[str, str | None]
) -> None:
    assert environment_proxies(variables) == patterns


def test_a_proxy_variable_that_is_not_an_http_url_is_refused_without_its_password() -> None:
    with pytest.raises(InvalidInput, match="ALL_PROXY") as caught:
        environment_proxies({"all": "socks5://user:hunter2@proxy:1080"})
    assert "hunter2" not in caught.value.detail
    assert "socks5://proxy:1080" in caught.value.detail


async def test_http_proxy_reaches_a_host_only_the_proxy_can_resolve(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    async with RawServer(ok) as provider, ForwardProxy({"provider.test": "127.0.0.1"}) as proxy:
        monkeypatch.setenv("HTTP_PROXY", proxy.url)
        async with make_client() as http:
            for _ in range(2):
                body, _ = await post_json(
                    http, on_host(provider, "provider.test"), headers={}, body={}, timeout_s=5,
                    edge=EDGE,
                )  # fmt: skip
                assert body == {"ok": True}
    # provider.test resolves nowhere but at the proxy: both calls went through it.
    assert set(proxy.seen) == {f"POST {on_host(provider, 'provider.test')}"}
    assert len(provider.requests) == 2
    assert provider.requests[0].lower().startswith(b"post /v1/chat/completions http/1.1")


async def test_no_proxy_sends_a_matching_host_straight_to_it(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    async with RawServer(ok) as provider, ForwardProxy({"provider.test": "127.0.0.1"}) as proxy:
        monkeypatch.setenv("ALL_PROXY", proxy.url)
        monkeypatch.setenv("NO_PROXY", "example.org,localhost")
        async with make_client() as http:
            direct, _ = await post_json(
                http, on_host(provider, "localhost"), headers={}, body={}, timeout_s=5, edge=EDGE
            )
            proxied, _ = await post_json(
                http, on_host(provider, "provider.test"), headers={}, body={}, timeout_s=5,
                edge=EDGE,
            )  # fmt: skip
    assert direct == proxied == {"ok": True}
    assert proxy.seen == [f"POST {on_host(provider, 'provider.test')}"]
    assert len(provider.requests) == 2


async def test_https_goes_through_a_connect_tunnel_that_alone_carries_the_credentials(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """The provider's certificate is checked end to end through the tunnel, and the proxy's
    credentials go on the CONNECT, never to the provider."""
    cert, key = make_certificate(tmp_path, "provider.test")
    served = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    served.load_cert_chain(cert, key)
    heads: list[bytes] = []
    server = await asyncio.start_server(answering(heads), "127.0.0.1", 0, ssl=served)
    port = server.sockets[0].getsockname()[1]
    url = f"https://provider.test:{port}/v1/chat/completions"
    try:
        async with ForwardProxy({"provider.test": "127.0.0.1"}, credentials=("eve", "pw")) as proxy:
            monkeypatch.setenv("HTTPS_PROXY", f"http://eve:pw@127.0.0.1:{proxy.port}")
            monkeypatch.setenv("SSL_CERT_FILE", str(cert))
            async with make_client() as http:
                body, _ = await post_json(http, url, headers={}, body={}, timeout_s=5, edge=EDGE)
            monkeypatch.delenv("SSL_CERT_FILE")
            async with make_client() as untrusting:
                with pytest.raises(ProviderUnavailable, match="certificate"):
                    await post_json(untrusting, url, headers={}, body={}, timeout_s=5, edge=EDGE)
    finally:
        server.close()
        await server.wait_closed()
    assert body == {"ok": True}
    assert proxy.seen == [f"CONNECT provider.test:{port}"] * 2
    assert proxy.authorizations == ["Basic ZXZlOnB3"] * 2  # eve:pw
    assert len(heads) == 1
    assert b"proxy-authorization" not in heads[0].lower()


def answering(
    heads: list[bytes],
) -> Callable[[asyncio.StreamReader, asyncio.StreamWriter], Awaitable[None]]:
    async def answer_once(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await _answer_once(reader, writer, heads)

    return answer_once


async def _answer_once(
    reader: asyncio.StreamReader, writer: asyncio.StreamWriter, heads: list[bytes]
) -> None:
    try:
        head = await reader.readuntil(b"\r\n\r\n")
        heads.append(head)
        length = next(
            (int(line.split(b":")[1]) for line in head.split(b"\r\n")
             if line.lower().startswith(b"content-length:")),
            0,
        )  # fmt: skip
        await reader.readexactly(length)
        writer.write(json_reply(extra=b"connection: close\r\n"))
        await writer.drain()
    except (ConnectionError, ssl.SSLError, asyncio.IncompleteReadError):
        pass
    finally:
        writer.close()


async def test_a_provider_proxy_with_credentials_carries_them_and_never_shows_them(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    async with (
        RawServer(ok) as provider,
        ForwardProxy({"provider.test": "127.0.0.1"}, credentials=("bob", "hunter2")) as proxy,
    ):
        monkeypatch.setenv("HTTP_PROXY", "http://127.0.0.1:9")  # not this one: its own
        good = entry(f"http://bob:hunter2@127.0.0.1:{proxy.port}")
        wrong = entry(f"http://bob:wrong@127.0.0.1:{proxy.port}")
        assert "hunter2" not in repr(good) + str(good.model_dump())
        url = on_host(provider, "provider.test")
        async with make_client(proxy=secret(good)) as http:
            body, _ = await post_json(http, url, headers={}, body={}, timeout_s=5, edge=EDGE)
        async with make_client(proxy=secret(wrong)) as http:
            # An http URL goes as one absolute-form request: the proxy's 407 is its reply.
            with pytest.raises(ProviderConfigError, match="407") as refused:
                await post_json(http, url, headers={}, body={}, timeout_s=5, edge=EDGE)
    assert body == {"ok": True}
    assert proxy.authorizations[0] == "Basic Ym9iOmh1bnRlcjI="  # bob:hunter2
    assert "wrong" not in refused.value.detail
    assert "hunter2" not in refused.value.detail


async def test_an_unreachable_proxy_is_unavailable_and_named_without_credentials(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    async with ForwardProxy({}) as gone:
        port = gone.port  # closed on exit: nothing listens there any more
    monkeypatch.setenv("HTTPS_PROXY", f"http://carol:s3cret@127.0.0.1:{port}")
    async with make_client() as http:
        with pytest.raises(ProviderUnavailable) as caught:
            await post_json(
                http, "https://provider.test/v1/chat/completions", headers={}, body={},
                timeout_s=5, edge=EDGE,
            )  # fmt: skip
    detail = caught.value.detail
    assert f"cannot reach the proxy at 127.0.0.1:{port}" in detail
    assert "s3cret" not in detail
    assert "carol" not in detail


def test_a_provider_proxy_must_be_an_http_url_and_the_error_hides_its_password(
    tmp_path: Path,
) -> None:
    path = tmp_path / "providers.toml"
    path.write_text(
        '[providers.corp]\nkind = "openai"\nproxy = "socks5://dave:pa55word@gw:1080"\n'
        '[models.m]\nprovider = "corp"\n'
    )
    with pytest.raises(InvalidInput) as caught:
        load_providers({}, path=str(path))
    assert caught.value.field == "providers.corp.proxy"
    assert "pa55word" not in caught.value.detail
    assert "socks5://gw:1080" in caught.value.detail


async def test_one_client_per_distinct_proxy_is_opened_and_each_provider_gets_its_own(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("HTTP_PROXY", "http://127.0.0.1:9")
    config = ProvidersConfig(
        providers={
            "a": entry("http://u:p@127.0.0.1:1"),
            "b": entry("http://u:p@127.0.0.1:1"),
            "c": entry("http://127.0.0.1:2"),
            "d": entry(),
        }
    )
    async with open_clients(config) as clients:
        a, b, c, d = (clients.of(p) for p in config.providers.values())
        assert a is b
        assert a is not c
        assert d is clients.default
        assert clients.direct is not clients.default  # the environment names a proxy
        assert not a.is_closed
    assert a.is_closed
    assert c.is_closed
    assert d.is_closed
    assert clients.direct.is_closed


def test_a_proxy_is_named_without_its_credentials() -> None:
    assert proxy_label("http://u:p@proxy:3128/") == "http://proxy:3128/"
    assert proxy_label("proxy:3128") == "proxy:3128"
    assert proxy_label("http://u:p@") == "http://(no host)"
