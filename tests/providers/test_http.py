"""The provider client (``make_client``: httpx on httpx-aiohttp's transport) against real
HTTP/1.1 servers on loopback: its connection pool, keep-alive, what it sends, replies
split, chunked, compressed, cut short or malformed, timeouts, TLS, and cookies.

Everything is seen from outside: what the servers receive and how many connections they
have open, and what ``post_json`` returns or raises."""

from __future__ import annotations

import asyncio
import ssl
from collections.abc import AsyncIterator, Callable
from pathlib import Path

import httpx
import pytest
import uvloop

from app.core.wire.errors import ProviderConfigError, ProviderTimeout, ProviderUnavailable
from app.providers.http import make_client
from app.providers.transport import Edge, post_json
from tests.providers.rawserver import OK_HEAD, RawServer, json_reply
from tests.tls import make_certificate
from tests.waiting import forever

WAIT_S = 30.0


class HeldServer:
    """Answers each POST with ``{}`` once ``release()`` was called; keeps connections alive
    and counts connections and requests in flight."""

    def __init__(self) -> None:
        self.connections = 0
        self.in_flight = 0
        self.peak = 0
        self.url = ""
        self._released = asyncio.Event()
        self._changed = asyncio.Condition()
        self._writers: set[asyncio.StreamWriter] = set()
        self._server: asyncio.Server | None = None

    async def start(self) -> None:
        self._server = await asyncio.start_server(self._serve, "127.0.0.1", 0)
        port = self._server.sockets[0].getsockname()[1]
        self.url = f"http://127.0.0.1:{port}/v1/chat/completions"

    async def close(self) -> None:
        if self._server is not None:
            self._server.close()
            for writer in self._writers:
                writer.close()
            await self._server.wait_closed()
            self._server = None

    async def until(self, check: Callable[[], bool]) -> None:
        async with asyncio.timeout(WAIT_S), self._changed:
            await self._changed.wait_for(check)

    async def _count(self, delta: int) -> None:
        async with self._changed:
            self.in_flight += delta
            self.peak = max(self.peak, self.in_flight)
            self._changed.notify_all()

    def release(self) -> None:
        self._released.set()

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.connections += 1
        self._writers.add(writer)
        try:
            while True:
                try:
                    head = await reader.readuntil(b"\r\n\r\n")
                except asyncio.IncompleteReadError:
                    return  # the client closed the connection
                length = 0
                for line in head.decode("latin-1").split("\r\n"):
                    name, _, value = line.partition(":")
                    if name.strip().lower() == "content-length":
                        length = int(value)
                await reader.readexactly(length)
                await self._count(+1)
                try:
                    await self._released.wait()
                finally:
                    await self._count(-1)
                writer.write(
                    b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\n"
                    b"content-length: 2\r\n\r\n{}"
                )
                await writer.drain()
        finally:
            self._writers.discard(writer)
            writer.close()


@pytest.fixture
async def server() -> AsyncIterator[HeldServer]:
    held = HeldServer()
    await held.start()
    yield held
    await held.close()


def post_all(http: httpx.AsyncClient, url: str, n: int) -> list[asyncio.Task[httpx.Response]]:
    return [asyncio.create_task(http.post(url, json={})) for _ in range(n)]


EDGE = Edge("p", "m")


async def test_requests_up_to_max_connections_all_run_at_once(server: HeldServer) -> None:
    async with make_client(max_connections=12, trust_env=False) as http:
        calls = post_all(http, server.url, 12)
        await server.until(lambda: server.in_flight == 12)
        server.release()
        replies = await asyncio.gather(*calls)
        again = await asyncio.gather(*post_all(http, server.url, 12))
    assert [r.status_code for r in replies + again] == [200] * 24
    assert server.connections == 12  # the second round on the kept-alive ones


async def test_no_more_than_max_connections_are_open_and_the_rest_wait_their_turn(
    server: HeldServer,
) -> None:
    async with make_client(max_connections=8, trust_env=False) as http:
        calls = post_all(http, server.url, 12)
        await server.until(lambda: server.in_flight == 8)
        assert not any(call.done() for call in calls)
        server.release()
        replies = await asyncio.gather(*calls)
    assert [r.status_code for r in replies] == [200] * 12
    assert server.peak == 8
    assert server.connections == 8  # the 4 that waited went out on kept-alive connections


async def test_a_call_waiting_for_a_connection_past_its_timeout_fails_and_frees_nothing_it_lacked(
    server: HeldServer,
) -> None:
    async with make_client(max_connections=1, trust_env=False) as http:
        first = asyncio.create_task(http.post(server.url, json={}))
        await server.until(lambda: server.in_flight == 1)
        with pytest.raises(ProviderTimeout):
            await post_json(http, server.url, headers={}, body={}, timeout_s=0.1, edge=EDGE)
        server.release()
        assert (await first).status_code == 200
        assert (await http.post(server.url, json={})).status_code == 200
    assert server.connections == 1


async def test_a_call_that_cannot_connect_is_unavailable_not_a_timeout_and_gives_its_place_back(
    server: HeldServer,
) -> None:
    await server.close()  # nothing listens: every request fails to connect
    async with make_client(max_connections=1, trust_env=False) as http:
        for _ in range(5):  # a place kept by a failure would make the next one wait
            with pytest.raises(ProviderUnavailable, match="connection failed"):
                await post_json(http, server.url, headers={}, body={}, timeout_s=30, edge=EDGE)


# -- what goes out, and replies of every shape ----------------------------------------------


async def answer(writer: asyncio.StreamWriter, data: bytes) -> bool:
    writer.write(data)
    await writer.drain()
    return True


async def ok(writer: asyncio.StreamWriter, index: int, server: RawServer) -> bool:
    return await answer(writer, json_reply())


async def call(http: httpx.AsyncClient, url: str, timeout_s: float = 5.0) -> dict[str, object]:
    body, _ = await post_json(http, url, headers={}, body={}, timeout_s=timeout_s, edge=EDGE)
    return body


@pytest.fixture
async def http() -> AsyncIterator[httpx.AsyncClient]:
    async with make_client(max_connections=4, trust_env=False) as client:
        yield client


async def test_a_request_carries_the_client_headers_and_compact_json(
    http: httpx.AsyncClient,
) -> None:
    async with RawServer(ok) as server:
        answer_, headers = await post_json(
            http,
            server.url,
            headers={"authorization": "Bearer k"},
            body={"text": "é"},
            timeout_s=5,
            edge=EDGE,
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


async def test_a_reply_split_into_single_bytes_is_read_whole_on_a_kept_alive_connection(
    http: httpx.AsyncClient,
) -> None:
    async def bytewise(writer: asyncio.StreamWriter, index: int, server: RawServer) -> bool:
        for byte in json_reply(b'{"split":true}', b"x-one: 1\r\n"):
            writer.write(bytes([byte]))
            await writer.drain()
            await asyncio.sleep(0)
        return True

    async with RawServer(bytewise) as server:
        for _ in range(2):
            body, headers = await post_json(
                http, server.url, headers={}, body={}, timeout_s=5, edge=EDGE
            )
            assert body == {"split": True}
            assert headers["x-one"] == "1"
    assert server.connections == 1


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
            assert await call(http, server.url) == {"ok": True}
    assert server.connections == 1


async def test_a_reply_read_until_the_server_closes_is_whole(http: httpx.AsyncClient) -> None:
    async def until_close(writer: asyncio.StreamWriter, index: int, server: RawServer) -> bool:
        writer.write(OK_HEAD + b"\r\n" + b'{"a":')
        await writer.drain()
        await asyncio.sleep(0.05)
        writer.write(b"1}")
        await writer.drain()
        return False  # and close

    async with RawServer(until_close) as server:
        for _ in range(2):
            assert await call(http, server.url) == {"a": 1}
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
        await answer(writer, reply)
        return True  # the client must not send another request on it

    async with RawServer(closing) as server:
        for _ in range(2):
            assert await call(http, server.url) == {"ok": True}
    assert server.connections == 2


async def test_interim_replies_before_the_answer_are_skipped(http: httpx.AsyncClient) -> None:
    async def interim(writer: asyncio.StreamWriter, index: int, server: RawServer) -> bool:
        return await answer(
            writer,
            b"HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 103 Early Hints\r\nlink: x\r\n\r\n"
            + json_reply(),
        )

    async with RawServer(interim) as server:
        assert await call(http, server.url) == {"ok": True}


async def test_a_gzipped_reply_is_decoded(http: httpx.AsyncClient) -> None:
    import gzip

    payload = gzip.compress(b'{"zipped":true}')

    async def zipped(writer: asyncio.StreamWriter, index: int, server: RawServer) -> bool:
        return await answer(writer, json_reply(payload, b"content-encoding: gzip\r\n"))

    async with RawServer(zipped) as server:
        assert await call(http, server.url) == {"zipped": True}


async def test_a_kept_alive_connection_closed_as_a_call_arrives_is_unavailable_and_dropped(
    http: httpx.AsyncClient,
) -> None:
    """The keep-alive race: the request went out on a connection the server was closing.
    A POST is not sent twice by the transport: the call is ``ProviderUnavailable``, which
    the router's transport retries take (tests/providers/test_retry.py), and the next call
    goes out on a fresh connection."""

    async def racing(writer: asyncio.StreamWriter, index: int, server: RawServer) -> bool:
        if index == 1:
            return False  # closes without a byte of reply, as at its idle timeout
        return await answer(writer, json_reply())

    async with RawServer(racing) as server:
        assert await call(http, server.url) == {"ok": True}
        with pytest.raises(ProviderUnavailable, match="connection failed"):
            await call(http, server.url)
        assert await call(http, server.url) == {"ok": True}
    assert server.connections == 2


async def test_a_reply_cut_short_is_unavailable_and_its_connection_dropped(
    http: httpx.AsyncClient,
) -> None:
    async def cut(writer: asyncio.StreamWriter, index: int, server: RawServer) -> bool:
        if index == 1:
            writer.write(OK_HEAD + b"content-length: 100\r\n\r\n{")
            await writer.drain()
            return False
        return await answer(writer, json_reply())

    async with RawServer(cut) as server:
        assert await call(http, server.url) == {"ok": True}
        with pytest.raises(ProviderUnavailable, match="connection failed"):
            await call(http, server.url)
        assert await call(http, server.url) == {"ok": True}
    assert server.connections == 2


async def test_a_server_slow_to_send_its_head_times_out_and_is_hung_up_on(
    http: httpx.AsyncClient,
) -> None:
    async def slow(writer: asyncio.StreamWriter, index: int, server: RawServer) -> bool:
        writer.write(b"HTTP/1.1 200 OK\r\ncontent-type: appl")
        await writer.drain()
        await forever()
        return False

    async with RawServer(slow) as server:
        with pytest.raises(ProviderTimeout, match=r"did not answer within 0\.3s"):
            await call(http, server.url, timeout_s=0.3)


async def test_a_cancelled_call_gives_its_connection_back() -> None:
    async def slow_first(writer: asyncio.StreamWriter, index: int, server: RawServer) -> bool:
        if len(server.requests) == 1:
            await forever()
        return await answer(writer, json_reply())

    async with (
        RawServer(slow_first) as server,
        make_client(max_connections=1, trust_env=False) as http,
    ):
        with pytest.raises(ProviderTimeout):
            await call(http, server.url, timeout_s=0.2)
        assert await call(http, server.url) == {"ok": True}  # the one place was given back
    assert server.connections == 2


@pytest.mark.parametrize(
    "reply",
    [
        OK_HEAD + b"x-pad: " + b"a" * (70 * 1024) + b"\r\n\r\n",
        OK_HEAD + b"x-h: 1\r\n" * 200 + b"content-length: 0\r\n\r\n",
        b"HTTP/1.1 200 OK\r\nbad header\r\ncontent-length: 0\r\n\r\n",
        b"HTTP/1.1 200 OK\r\nx: a\x00b\r\ncontent-length: 0\r\n\r\n",
        b"HTTP/1.1 200 OK\r\nx: a\rb\r\ncontent-length: 0\r\n\r\n",
        b"HTTP/1.1 200 O\x01K\r\ncontent-length: 0\r\n\r\n",
        b"HTTP/2 200 OK\r\ncontent-length: 0\r\n\r\n",
        b"HTTP/1.1 2000 OK\r\ncontent-length: 0\r\n\r\n",
        OK_HEAD + b"content-length: 2\r\ncontent-length: 3\r\n\r\n{}",
        OK_HEAD + b"content-length: -1\r\n\r\n",
        OK_HEAD + b"content-length: 1" + b"0" * 30 + b"\r\n\r\n",
        OK_HEAD + b"transfer-encoding: gzip, chunked\r\n\r\n0\r\n\r\n",
        OK_HEAD + b"transfer-encoding: chunked\r\n\r\nzz\r\n",
        OK_HEAD + b"transfer-encoding: chunked\r\n\r\n" + b"f" * 40 + b"\r\n",
        OK_HEAD + b"transfer-encoding: chunked\r\n\r\n2\r\n{}}\r\n0\r\n\r\n",
    ],
    ids=[
        "huge-head",
        "too-many-headers",
        "no-colon",
        "nul-in-value",
        "cr-in-value",
        "control-in-reason",
        "http2",
        "four-digit-status",
        "two-lengths",
        "negative-length",
        "huge-length",
        "gzip-transfer-coding",
        "bad-chunk-size",
        "huge-chunk-size",
        "chunk-overrun",
    ],
)
async def test_a_malformed_reply_is_unavailable_and_its_connection_dropped(
    http: httpx.AsyncClient, reply: bytes
) -> None:
    async def hostile(writer: asyncio.StreamWriter, index: int, server: RawServer) -> bool:
        await answer(writer, reply)
        return True  # keeps the connection: the client must hang up

    async with RawServer(hostile) as server:
        with pytest.raises(ProviderUnavailable):
            await call(http, server.url)
        await server.until(lambda s: s.open == 0)


async def test_a_request_header_with_a_line_break_is_refused_before_sending(
    http: httpx.AsyncClient,
) -> None:
    async with RawServer(ok) as server:
        with pytest.raises(ProviderConfigError, match="cannot be sent"):
            await post_json(
                http, server.url, headers={"x-a": "1\r\nx-injected: 2"}, body={}, timeout_s=5,
                edge=EDGE,
            )  # fmt: skip
        assert await call(http, server.url) == {"ok": True}
    assert len(server.requests) == 1
    assert b"x-injected" not in server.requests[0]


async def test_a_cookie_a_provider_sets_is_never_sent_back(http: httpx.AsyncClient) -> None:
    """On a name (aiohttp's jar would keep a cookie for a name, not for an address), by
    ``post_json`` and by the client's own ``post`` alike."""

    async def cookie(writer: asyncio.StreamWriter, index: int, server: RawServer) -> bool:
        return await answer(writer, json_reply(extra=b"set-cookie: __cf_bm=abc; path=/\r\n"))

    async with RawServer(cookie) as server:
        url = server.url.replace("127.0.0.1", "localhost")
        for _ in range(2):
            await call(http, url)
            await http.post(url, json={})
        assert not http.cookies
    assert len(server.requests) == 4
    assert not any(b"cookie" in request.lower() for request in server.requests)


@pytest.fixture(scope="module")
def certificate(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    return make_certificate(tmp_path_factory.mktemp("tls"), "localhost")


async def test_https_works_and_a_wrong_certificate_is_unavailable(
    certificate: tuple[Path, Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    await _https_round(certificate, monkeypatch)


def test_https_works_on_uvloop_as_the_workers_run(
    certificate: tuple[Path, Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    """The worker and `serve` run on uvloop, whose TLS transport is its own."""
    uvloop.run(_https_round(certificate, monkeypatch))


async def _https_round(certificate: tuple[Path, Path], monkeypatch: pytest.MonkeyPatch) -> None:
    cert, key = certificate
    served = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    served.load_cert_chain(cert, key)

    async def serve(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            while head := await reader.readuntil(b"\r\n\r\n"):
                length = next(
                    int(line.split(b":")[1])
                    for line in head.split(b"\r\n")
                    if line.lower().startswith(b"content-length:")
                )
                await reader.readexactly(length)
                writer.write(json_reply())
                await writer.drain()
        except (ConnectionError, ssl.SSLError, asyncio.IncompleteReadError):
            pass
        finally:
            writer.close()

    server = await asyncio.start_server(serve, "127.0.0.1", 0, ssl=served)
    url = f"https://localhost:{server.sockets[0].getsockname()[1]}/v1/x"
    try:
        monkeypatch.setenv("SSL_CERT_FILE", str(cert))
        async with make_client() as http:
            for _ in range(3):
                assert await call(http, url) == {"ok": True}
        monkeypatch.delenv("SSL_CERT_FILE")
        async with make_client() as untrusting:
            with pytest.raises(ProviderUnavailable, match="certificate"):
                await call(untrusting, url)
    finally:
        server.close()
        await server.wait_closed()
