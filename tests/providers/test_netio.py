"""The provider client's sockets (``app.providers.netio`` under ``app.providers.h1``)
against real loopback servers: one send per request, TLS, timeouts, and connections the
server closed while idle."""

from __future__ import annotations

import asyncio
import ssl
from collections.abc import AsyncIterator
from pathlib import Path

import httpx
import pytest
import uvloop

from app.providers.h1 import H1Transport
from app.providers.http import make_client
from tests.tls import make_certificate

REPLY = (
    b'HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: 11\r\n\r\n{"ok":true}'
)


class Recorder:
    """Answers every request on a connection with ``REPLY``; records what each ``read()``
    of the socket returned, and closes connections when told to."""

    def __init__(self, *, tls: ssl.SSLContext | None = None, delay_s: float = 0.0) -> None:
        self.reads: list[bytes] = []
        self.connections = 0
        self.delay_s = delay_s
        self.tls = tls
        self.port = 0
        self._writers: set[asyncio.StreamWriter] = set()
        self._server: asyncio.Server | None = None

    async def start(self) -> None:
        self._server = await asyncio.start_server(self._serve, "127.0.0.1", 0, ssl=self.tls)
        self.port = self._server.sockets[0].getsockname()[1]

    def drop_idle(self) -> None:
        for writer in self._writers:
            writer.close()

    async def close(self) -> None:
        if self._server is not None:
            self._server.close()
            self.drop_idle()
            await self._server.wait_closed()

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.connections += 1
        self._writers.add(writer)
        buffer = b""
        try:
            while True:
                chunk = await reader.read(65536)
                if not chunk:
                    return
                self.reads.append(chunk)
                buffer += chunk
                head, sep, rest = buffer.partition(b"\r\n\r\n")
                if not sep:
                    continue
                length = 0
                for line in head.split(b"\r\n"):
                    name, _, value = line.partition(b":")
                    if name.strip().lower() == b"content-length":
                        length = int(value)
                if len(rest) < length:
                    continue
                buffer = rest[length:]
                if self.delay_s:
                    await asyncio.sleep(self.delay_s)
                writer.write(REPLY)
                await writer.drain()
        except (ConnectionError, ssl.SSLError):
            return
        finally:
            self._writers.discard(writer)
            writer.close()


@pytest.fixture
async def recorder() -> AsyncIterator[Recorder]:
    server = Recorder()
    await server.start()
    yield server
    await server.close()


async def test_a_request_goes_out_as_one_send(recorder: Recorder) -> None:
    body = b"{" + b" " * 3000 + b"}"
    async with make_client(trust_env=False) as http:
        reply = await http.post(f"http://127.0.0.1:{recorder.port}/v1/x", content=body)
    assert reply.json() == {"ok": True}
    (read,) = recorder.reads  # head and body in one send
    assert read.startswith(b"POST /v1/x HTTP/1.1\r\n")
    assert read.endswith(b"\r\n\r\n" + body)


async def test_requests_through_the_client_are_answered_on_a_kept_alive_connection(
    recorder: Recorder,
) -> None:
    body = {"messages": [{"role": "user", "content": "x" * 2000}]}
    async with make_client(trust_env=False) as http:
        for _ in range(5):
            reply = await http.post(f"http://127.0.0.1:{recorder.port}/v1/x", json=body)
            assert reply.json() == {"ok": True}
    assert b"".join(recorder.reads).count(b"x" * 2000) == 5
    assert recorder.connections == 1


async def test_a_connection_the_server_closed_while_idle_is_not_reused(
    recorder: Recorder,
) -> None:
    async with make_client(trust_env=False) as http:
        url = f"http://127.0.0.1:{recorder.port}/v1/x"
        assert (await http.post(url, json={})).status_code == 200
        recorder.drop_idle()
        await asyncio.sleep(0.2)  # the FIN arrives
        assert (await http.post(url, json={})).status_code == 200
    assert recorder.connections == 2


async def test_a_server_slower_than_the_read_timeout_is_a_read_timeout() -> None:
    server = Recorder(delay_s=5.0)
    await server.start()
    try:
        async with make_client(trust_env=False) as http:
            with pytest.raises(httpx.ReadTimeout):
                await http.post(
                    f"http://127.0.0.1:{server.port}/v1/x",
                    json={},
                    timeout=httpx.Timeout(5.0, read=0.2),
                )
    finally:
        await server.close()


async def test_nothing_listening_is_a_connect_error() -> None:
    probe = Recorder()
    await probe.start()
    port = probe.port
    await probe.close()
    async with make_client(trust_env=False) as http:
        with pytest.raises(httpx.ConnectError):
            await http.post(f"http://127.0.0.1:{port}/v1/x", json={})


@pytest.fixture(scope="module")
def certificate(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    return make_certificate(tmp_path_factory.mktemp("tls"), "localhost")


async def test_https_works_and_a_wrong_certificate_is_a_connect_error(
    certificate: tuple[Path, Path],
) -> None:
    await _https_round(certificate)


def test_https_works_on_uvloop_as_the_workers_run(certificate: tuple[Path, Path]) -> None:
    """The worker and `serve` run on uvloop, whose TLS transport is its own."""
    uvloop.run(_https_round(certificate))


async def _https_round(certificate: tuple[Path, Path]) -> None:
    cert, key = certificate
    served = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    served.load_cert_chain(cert, key)
    server = Recorder(tls=served)
    await server.start()
    url = f"https://localhost:{server.port}/v1/x"
    try:
        trusting = ssl.create_default_context(cafile=str(cert))
        transport = H1Transport(max_connections=4, ssl_context=trusting)
        async with httpx.AsyncClient(transport=transport) as http:
            for _ in range(3):
                reply = await http.post(url, content=b"{}")
                assert reply.status_code == 200
                assert reply.content == b'{"ok":true}'
        assert server.connections == 1
        untrusting = H1Transport(max_connections=4, ssl_context=ssl.create_default_context())
        async with httpx.AsyncClient(transport=untrusting) as http:
            with pytest.raises(httpx.ConnectError):
                await http.post(url, content=b"{}")
    finally:
        await server.close()
