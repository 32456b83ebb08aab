"""The provider client's HTTP/1.1 (``app.providers.h1.H1Transport``) against raw loopback
servers that split, stall, close early, and send what no server should."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator

import httpx
import pytest

from app.core.errors import ProviderTimeout, ProviderUnavailable
from app.providers.h1 import MAX_HEAD_BYTES, MAX_HEADERS, MAX_LINE_BYTES, H1Transport
from app.providers.http import make_client
from app.providers.transport import Edge, post_json
from tests.providers.rawserver import OK_HEAD, RawServer, json_reply

BOUND_S = 5.0  # every failure here is quick; generous for a busy machine


@pytest.fixture
async def http() -> AsyncIterator[httpx.AsyncClient]:
    async with make_client(max_connections=4, trust_env=False) as client:
        yield client


def pool(http: httpx.AsyncClient) -> H1Transport:
    transport = http._transport
    assert isinstance(transport, H1Transport)
    return transport


async def answer(writer: asyncio.StreamWriter, data: bytes) -> bool:
    writer.write(data)
    await writer.drain()
    return True


async def test_a_reply_split_into_single_bytes_is_read_whole(http: httpx.AsyncClient) -> None:
    async def bytewise(writer: asyncio.StreamWriter, index: int, server: RawServer) -> bool:
        for byte in json_reply(b'{"split":true}', b"x-one: 1\r\n"):
            writer.write(bytes([byte]))
            await writer.drain()
            await asyncio.sleep(0)
        return True

    async with RawServer(bytewise) as server:
        for _ in range(2):
            reply = await http.post(server.url, json={"q": 1})
            assert reply.json() == {"split": True}
            assert reply.headers["x-one"] == "1"
    assert server.connections == 1  # kept alive across the split reply


@pytest.mark.parametrize(
    ("extra", "value", "encoding"),
    [
        (b"x-note: plain\r\n", "plain", "ascii"),
        ("x-note: caf\u00e9\r\n".encode(), "caf\u00e9", "utf-8"),
        (b"x-note: caf\xe9\r\n", "caf\u00e9", "iso-8859-1"),
    ],
)
async def test_reply_headers_read_as_httpx_decodes_them(
    http: httpx.AsyncClient, extra: bytes, value: str, encoding: str
) -> None:
    async def reply(writer: asyncio.StreamWriter, index: int, server: RawServer) -> bool:
        return await answer(writer, json_reply(b"{}", extra))

    async with RawServer(reply) as server:
        got = await http.post(server.url, json={})
    assert got.headers._encoding in (None, encoding)  # given only when it is ASCII
    assert got.headers["x-note"] == value
    assert got.headers.encoding == encoding
    assert got.headers.raw == httpx.Headers(got.headers.raw).raw
    assert dict(got.headers) == dict(httpx.Headers(got.headers.raw))


async def test_a_chunked_reply_with_extensions_and_trailers_is_read_and_kept_alive(
    http: httpx.AsyncClient,
) -> None:
    body = (
        b'4;name="x y";other\r\n{"ok\r\n'
        b'7\r\n":true}\r\n'
        b"0;last\r\nx-trailer: 1\r\nx-other: 2\r\n\r\n"
    )

    async def chunked(writer: asyncio.StreamWriter, index: int, server: RawServer) -> bool:
        return await answer(writer, OK_HEAD + b"transfer-encoding: chunked\r\n\r\n" + body)

    async with RawServer(chunked) as server:
        for _ in range(3):
            assert (await http.post(server.url, json={})).json() == {"ok": True}
    assert server.connections == 1


async def test_a_reply_read_until_the_server_closes_is_whole_and_its_connection_dropped(
    http: httpx.AsyncClient,
) -> None:
    async def until_close(writer: asyncio.StreamWriter, index: int, server: RawServer) -> bool:
        writer.write(OK_HEAD + b"\r\n" + b'{"a":')
        await writer.drain()
        await asyncio.sleep(0.05)
        writer.write(b"1}")
        await writer.drain()
        return False  # and close

    async with RawServer(until_close) as server:
        for _ in range(2):
            assert (await http.post(server.url, json={})).json() == {"a": 1}
        assert pool(http).connections == 0
    assert server.connections == 2


@pytest.mark.parametrize(
    "reply",
    [
        json_reply(extra=b"connection: close\r\n"),
        b"HTTP/1.0 200 OK\r\ncontent-length: 11\r\n\r\n" + b'{"ok":true}',
    ],
    ids=["connection-close", "http-1.0"],
)
async def test_a_reply_that_says_close_is_not_kept(http: httpx.AsyncClient, reply: bytes) -> None:
    async def closing(writer: asyncio.StreamWriter, index: int, server: RawServer) -> bool:
        return await answer(writer, reply)

    async with RawServer(closing) as server:
        for _ in range(2):
            assert (await http.post(server.url, json={})).json() == {"ok": True}
    assert server.connections == 2


async def test_interim_replies_before_the_answer_are_skipped(http: httpx.AsyncClient) -> None:
    async def interim(writer: asyncio.StreamWriter, index: int, server: RawServer) -> bool:
        return await answer(
            writer,
            b"HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 103 Early Hints\r\nlink: x\r\n\r\n"
            + json_reply(),
        )

    async with RawServer(interim) as server:
        assert (await http.post(server.url, json={})).json() == {"ok": True}


async def test_a_kept_alive_connection_closed_as_a_request_arrives_costs_one_retry(
    http: httpx.AsyncClient,
) -> None:
    """The keep-alive race: the request went out on a connection the server was closing.
    Nothing of a reply came back, so it goes once more on a fresh connection."""

    async def racing(writer: asyncio.StreamWriter, index: int, server: RawServer) -> bool:
        if index == 1:
            return False  # closes without a byte of reply, as at its idle timeout
        return await answer(writer, json_reply())

    async with RawServer(racing) as server:
        assert (await http.post(server.url, json={"n": 1})).status_code == 200
        assert (await http.post(server.url, json={"n": 2})).status_code == 200
    assert server.connections == 2
    assert [request.endswith(b'{"n":2}') for request in server.requests] == [False, True, True]


async def test_a_fresh_connection_closed_without_a_reply_is_not_retried(
    http: httpx.AsyncClient,
) -> None:
    async def hang_up(writer: asyncio.StreamWriter, index: int, server: RawServer) -> bool:
        return False

    async with RawServer(hang_up) as server:
        with pytest.raises(httpx.RemoteProtocolError):
            await http.post(server.url, json={})
        assert pool(http).connections == 0
    assert len(server.requests) == 1


async def test_a_reply_cut_short_on_a_kept_alive_connection_is_an_error_not_a_retry(
    http: httpx.AsyncClient,
) -> None:
    async def cut(writer: asyncio.StreamWriter, index: int, server: RawServer) -> bool:
        if index == 1:
            writer.write(OK_HEAD + b"content-length: 100\r\n\r\n{")
            await writer.drain()
            return False
        return await answer(writer, json_reply())

    async with RawServer(cut) as server:
        assert (await http.post(server.url, json={})).status_code == 200
        with pytest.raises(ProviderUnavailable, match="RemoteProtocolError"):
            await post_json(http, server.url, headers={}, body={}, timeout_s=5, edge=Edge("p", "m"))
        assert pool(http).connections == 0
    assert len(server.requests) == 2


async def test_a_server_slow_to_send_its_head_times_out(http: httpx.AsyncClient) -> None:
    async def slow(writer: asyncio.StreamWriter, index: int, server: RawServer) -> bool:
        writer.write(b"HTTP/1.1 200 OK\r\ncontent-type: appl")
        await writer.drain()
        await asyncio.sleep(30)
        return False

    async with RawServer(slow) as server:
        began = time.monotonic()
        with pytest.raises(httpx.ReadTimeout):
            await http.post(server.url, json={}, timeout=httpx.Timeout(5.0, read=0.2))
        with pytest.raises(ProviderTimeout):
            await post_json(
                http, server.url, headers={}, body={}, timeout_s=0.3, edge=Edge("p", "m")
            )
        assert time.monotonic() - began < BOUND_S
        assert pool(http).connections == 0


@pytest.mark.parametrize(
    ("reply", "said"),
    [
        (OK_HEAD + b"x-pad: " + b"a" * (MAX_HEAD_BYTES + 10) + b"\r\n\r\n", "head is over"),
        (OK_HEAD + b"x-h: 1\r\n" * (MAX_HEADERS + 1) + b"content-length: 0\r\n\r\n", "headers"),
        (b"HTTP/1.1 200 OK\r\nbad header\r\ncontent-length: 0\r\n\r\n", "malformed header"),
        (b"HTTP/1.1 200 OK\r\nx: a\x00b\r\ncontent-length: 0\r\n\r\n", "control character"),
        (b"HTTP/1.1 200 OK\r\nx: a\rb\r\ncontent-length: 0\r\n\r\n", "control character"),
        (b"HTTP/1.1 200 OK\r\nx: a\nb\r\ncontent-length: 0\r\n\r\n", "control character"),
        (b"HTTP/1.1 200 O\x01K\r\ncontent-length: 0\r\n\r\n", "status line"),
        (b"HTTP/1.1 200 OK\r\n folded: x\r\ncontent-length: 0\r\n\r\n", "malformed header"),
        (b"HTTP/2 200 OK\r\ncontent-length: 0\r\n\r\n", "status line"),
        (b"HTTP/1.1 2000 OK\r\ncontent-length: 0\r\n\r\n", "status line"),
        (OK_HEAD + b"content-length: 2\r\ncontent-length: 3\r\n\r\n{}", "content-length"),
        (OK_HEAD + b"content-length: -1\r\n\r\n", "content-length"),
        (OK_HEAD + b"content-length: 1" + b"0" * 30 + b"\r\n\r\n", "content-length"),
        (OK_HEAD + b"transfer-encoding: gzip, chunked\r\n\r\n0\r\n\r\n", "transfer-encoding"),
        (OK_HEAD + b"transfer-encoding: chunked\r\n\r\nzz\r\n", "chunk size"),
        (OK_HEAD + b"transfer-encoding: chunked\r\n\r\n" + b"f" * 40 + b"\r\n", "chunk size"),
        (
            OK_HEAD + b"transfer-encoding: chunked\r\n\r\n1;" + b"e" * MAX_LINE_BYTES + b"\r\n",
            "longer than",
        ),
        (OK_HEAD + b"transfer-encoding: chunked\r\n\r\n2\r\n{}}\r\n0\r\n\r\n", "longer than its"),
        (b"HTTP/1.1 101 Switching Protocols\r\nupgrade: x\r\n\r\n", "switched"),
        (b"HTTP/1.1 100 Continue\r\n\r\n" * 9 + json_reply(), "interim"),
    ],
    ids=[
        "huge-head",
        "too-many-headers",
        "no-colon",
        "nul-in-value",
        "cr-in-value",
        "lf-in-value",
        "control-in-reason",
        "folded",
        "http2",
        "four-digit-status",
        "two-lengths",
        "negative-length",
        "huge-length",
        "gzip-transfer-coding",
        "bad-chunk-size",
        "huge-chunk-size",
        "long-chunk-line",
        "chunk-overrun",
        "upgrade",
        "endless-interim",
    ],
)
async def test_a_malformed_reply_is_a_protocol_error_and_its_connection_is_dropped(
    http: httpx.AsyncClient, reply: bytes, said: str
) -> None:
    async def hostile(writer: asyncio.StreamWriter, index: int, server: RawServer) -> bool:
        await answer(writer, reply)
        await asyncio.sleep(10)  # never closes by itself: the client must give up
        return False

    async with RawServer(hostile) as server:
        began = time.monotonic()
        with pytest.raises(httpx.RemoteProtocolError, match=said):
            await http.post(server.url, json={}, timeout=2.0)  # reads the whole body
        assert time.monotonic() - began < BOUND_S
        assert pool(http).connections == 0


async def test_a_request_header_with_a_line_break_is_refused_before_sending(
    http: httpx.AsyncClient,
) -> None:
    async def ok(writer: asyncio.StreamWriter, index: int, server: RawServer) -> bool:
        return await answer(writer, json_reply())

    async with RawServer(ok) as server:
        with pytest.raises(httpx.LocalProtocolError):
            await http.post(server.url, json={}, headers={"x-a": "1\r\nx-injected: 2"})
        assert (await http.post(server.url, json={})).status_code == 200
    assert len(server.requests) == 1
    assert b"x-injected" not in server.requests[0]


async def test_a_reply_sets_no_cookie_on_later_requests(http: httpx.AsyncClient) -> None:
    async def cookie(writer: asyncio.StreamWriter, index: int, server: RawServer) -> bool:
        return await answer(writer, json_reply(extra=b"set-cookie: __cf_bm=abc; path=/\r\n"))

    async with RawServer(cookie) as server:
        for _ in range(2):
            await post_json(http, server.url, headers={}, body={}, timeout_s=5, edge=Edge("p", "m"))
    assert len(server.requests) == 2
    assert b"cookie" not in server.requests[1].lower()


async def test_a_request_goes_out_as_one_write_with_the_client_headers_and_json(
    http: httpx.AsyncClient,
) -> None:
    async def ok(writer: asyncio.StreamWriter, index: int, server: RawServer) -> bool:
        return await answer(writer, json_reply())

    async with RawServer(ok) as server:
        answer_, headers = await post_json(
            http,
            server.url,
            headers={"authorization": "Bearer k"},
            body={"text": "é"},
            timeout_s=5,
            edge=Edge("p", "m"),
        )
    assert answer_ == {"ok": True}
    assert headers["content-type"] == "application/json"
    (request,) = server.requests
    head, _, body = request.partition(b"\r\n\r\n")
    lines = head.lower().split(b"\r\n")
    assert lines[0] == b"post /v1/chat/completions http/1.1"
    port = server.url.split(":")[2].split("/")[0]
    for expected in (
        b"host: 127.0.0.1:" + port.encode(),
        b"user-agent: reprompt",
        b"authorization: bearer k",
        b"content-type: application/json",
        b"content-length: %d" % len(body),
    ):
        assert expected in lines
    assert body == '{"text":"é"}'.encode()


async def test_a_gzipped_reply_is_decoded() -> None:
    import gzip

    payload = gzip.compress(b'{"zipped":true}')

    async def zipped(writer: asyncio.StreamWriter, index: int, server: RawServer) -> bool:
        return await answer(writer, json_reply(payload, b"content-encoding: gzip\r\n"))

    async with RawServer(zipped) as server, make_client(trust_env=False) as http:
        answer_, _ = await post_json(
            http, server.url, headers={}, body={}, timeout_s=5, edge=Edge("p", "m")
        )
    assert answer_ == {"zipped": True}


async def test_a_pool_of_one_serves_many_callers_in_turn_on_one_connection() -> None:
    async def ok(writer: asyncio.StreamWriter, index: int, server: RawServer) -> bool:
        await asyncio.sleep(0.01)
        return await answer(writer, json_reply())

    async with RawServer(ok) as server, make_client(max_connections=1, trust_env=False) as http:
        replies = await asyncio.gather(*(http.post(server.url, json={}) for _ in range(20)))
        assert pool(http).connections == 1
    assert [reply.status_code for reply in replies] == [200] * 20
    assert server.connections == 1


async def test_a_cancelled_request_gives_its_connection_back() -> None:
    async def slow(writer: asyncio.StreamWriter, index: int, server: RawServer) -> bool:
        if len(server.requests) == 1:
            await asyncio.sleep(30)
        return await answer(writer, json_reply())

    async with RawServer(slow) as server, make_client(max_connections=1, trust_env=False) as http:
        with pytest.raises(ProviderTimeout):
            await post_json(
                http, server.url, headers={}, body={}, timeout_s=0.2, edge=Edge("p", "m")
            )
        assert pool(http).connections == 0
        assert (await http.post(server.url, json={})).status_code == 200


async def test_proxy_variables_do_not_divert_provider_calls(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """As before this transport: httpx reads no proxy from the environment for a client
    given its own transport, so calls go straight to the provider."""

    async def ok(writer: asyncio.StreamWriter, index: int, server: RawServer) -> bool:
        return await answer(writer, json_reply())

    async with RawServer(ok) as proxy, RawServer(ok) as provider:
        origin = proxy.url.removesuffix("/v1/chat/completions")
        for name in ("NO_PROXY", "no_proxy"):
            monkeypatch.delenv(name, raising=False)
        for name in ("HTTP_PROXY", "http_proxy", "ALL_PROXY"):
            monkeypatch.setenv(name, origin)
        async with make_client(trust_env=True) as http:
            answer_, _ = await post_json(
                http, provider.url, headers={}, body={}, timeout_s=5, edge=Edge("p", "m")
            )
            assert pool(http).connections == 1
    assert answer_ == {"ok": True}
    assert (len(proxy.requests), len(provider.requests)) == (0, 1)


async def test_a_connection_idle_past_the_keepalive_expiry_is_closed_not_reused() -> None:
    async def ok(writer: asyncio.StreamWriter, index: int, server: RawServer) -> bool:
        return await answer(writer, json_reply())

    transport = H1Transport(
        max_connections=2, ssl_context=httpx.create_ssl_context(), keepalive_expiry=0.2
    )
    async with RawServer(ok) as server, httpx.AsyncClient(transport=transport) as http:
        await http.post(server.url, json={})
        await http.post(server.url, json={})  # within the expiry: the same connection
        assert server.connections == 1
        await asyncio.sleep(0.3)
        await http.post(server.url, json={})
        assert transport.connections == 1  # the expired one was closed, not kept
    assert server.connections == 2


async def test_post_json_keeps_the_connection_and_honours_httpx_hooks_when_a_client_has_them(
    http: httpx.AsyncClient,
) -> None:
    async def ok(writer: asyncio.StreamWriter, index: int, server: RawServer) -> bool:
        return await answer(writer, json_reply())

    seen: list[int] = []

    async def hook(response: httpx.Response) -> None:
        seen.append(response.status_code)

    async with RawServer(ok) as server:
        for _ in range(3):  # straight to the pool: one connection, kept and reused
            body, _ = await post_json(
                http, server.url, headers={}, body={}, timeout_s=5, edge=Edge("p", "m")
            )
            assert body == {"ok": True}
        assert server.connections == 1
        assert pool(http).idle == 1
        http.event_hooks = {"response": [hook]}  # through httpx's layers, which run it
        body, _ = await post_json(
            http, server.url, headers={}, body={}, timeout_s=5, edge=Edge("p", "m")
        )
    assert body == {"ok": True}
    assert seen == [200]
    assert server.connections == 1
