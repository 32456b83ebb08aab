"""The benchmarks' lean HTTP client (bench/loadgen.py) against a real HTTP/1.1 server on
loopback: it must read every answer right and fail loudly, or the benchmarks' figures are
wrong."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator

import pytest

from bench import loadgen
from bench.common import run_closed_loop
from bench.loadgen import Answer, LeanClient, origins, run
from tests.waiting import forever, until


class Server:
    """A small HTTP/1.1 server whose answer depends on the request's path."""

    def __init__(self) -> None:
        self.connections = 0
        self.requests: list[tuple[bytes, bytes]] = []  # (head, body)
        self.server: asyncio.Server | None = None

    @property
    def url(self) -> str:
        assert self.server is not None
        port = self.server.sockets[0].getsockname()[1]
        return f"http://127.0.0.1:{port}"

    async def handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.connections += 1
        try:
            while True:
                head = await reader.readuntil(b"\r\n\r\n")
                size = 0
                for line in head.split(b"\r\n")[1:]:
                    name, _, value = line.partition(b":")
                    if name.strip().lower() == b"content-length":
                        size = int(value)
                body = await reader.readexactly(size)
                self.requests.append((head, body))
                path = head.split(b" ")[1]
                if not await self.answer(path, body, writer):
                    break
        except (asyncio.IncompleteReadError, ConnectionError):
            pass
        finally:
            writer.close()

    async def answer(self, path: bytes, body: bytes, writer: asyncio.StreamWriter) -> bool:
        """Write the answer for ``path``; False closes the connection."""
        if path == b"/echo":
            out = json.dumps({"got": json.loads(body) if body else None}).encode()
            writer.write(b"HTTP/1.1 201 Created\r\nContent-Length: %d\r\n\r\n%s" % (len(out), out))
        elif path == b"/chunked":
            writer.write(
                b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n"
                b"5\r\nhello\r\n6\r\n world\r\n0\r\n\r\n"
            )
        elif path == b"/close":
            writer.write(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\nConnection: close\r\n\r\nok")
            await writer.drain()
            return False
        elif path == b"/hang-up":  # answers, then drops the idle connection
            writer.write(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok")
            await writer.drain()
            return False
        elif path == b"/stall":
            await forever()
        elif path == b"/garbage":
            writer.write(b"not http at all\r\n\r\n")
        elif path == b"/big":
            writer.write(b"HTTP/1.1 200 OK\r\nContent-Length: 4096\r\n\r\n" + b"x" * 4096)
        await writer.drain()
        return True


@pytest.fixture
async def server() -> AsyncIterator[Server]:
    s = Server()
    s.server = await asyncio.start_server(s.handle, "127.0.0.1", 0)
    async with s.server:
        yield s


async def test_requests_reuse_one_keep_alive_connection_and_carry_their_body(
    server: Server,
) -> None:
    async with LeanClient(server.url) as http:
        first = await http.post("/echo", {"a": 1, "text": "é\u2028"})
        second = await http.post("/echo", b'{"b":2}')
        third = await http.get("/echo")
    assert first == Answer(201, json.dumps({"got": {"a": 1, "text": "é\u2028"}}).encode())
    assert second.json() == {"got": {"b": 2}}
    assert third.json() == {"got": None}
    assert server.connections == 1
    head, _ = server.requests[0]
    lines = head.lower().split(b"\r\n")
    assert lines[0] == b"post /echo http/1.1"
    assert f"host: {server.url.removeprefix('http://')}".encode() in lines
    assert b"content-type: application/json" in lines
    assert server.requests[2][0].startswith(b"GET /echo HTTP/1.1\r\n")


async def test_a_chunked_answer_is_read_whole(server: Server) -> None:
    async with LeanClient(server.url) as http:
        assert await http.get("/chunked") == Answer(200, b"hello world")
        assert await http.get("/chunked") == Answer(200, b"hello world")
    assert server.connections == 1


async def test_a_connection_the_server_closes_is_replaced(server: Server) -> None:
    async with LeanClient(server.url) as http:
        assert (await http.get("/close")).body == b"ok"
        assert (await http.get("/hang-up")).body == b"ok"
        # The hang-up's EOF arrives while the connection is idle: it is not reused.
        await until(lambda: not any(conn.reusable for conn in http.idle), what="the hang-up's EOF")
        assert (await http.post("/echo", {"n": 3})).json() == {"got": {"n": 3}}
    assert server.connections == 3


async def test_a_stalled_answer_fails_at_the_deadline_and_counts_as_a_failure(
    server: Server,
) -> None:
    async with LeanClient(server.url, timeout=0.2) as http:
        with pytest.raises(TimeoutError, match=r"no answer in 0\.2 s"):
            await http.get("/stall")

        async def call(i: int) -> bool:
            return (await http.get("/stall" if i == 1 else "/echo")).status == 201

        _, latencies, failures = await run_closed_loop(call, 3, 1)
        assert (len(latencies), failures) == (3, 1)


async def test_an_answer_that_is_not_http_or_too_big_is_an_error(
    server: Server, monkeypatch: pytest.MonkeyPatch
) -> None:
    async with LeanClient(server.url) as http:
        with pytest.raises(ConnectionError, match="bad HTTP answer"):
            await http.get("/garbage")
        monkeypatch.setattr(loadgen, "MAX_BODY", 1024)
        with pytest.raises(ConnectionError, match="answer over 1024 bytes"):
            await http.get("/big")
        monkeypatch.setattr(loadgen, "MAX_BODY", 4096)
        assert len((await http.get("/big")).body) == 4096


@pytest.mark.parametrize("kind", ["lean", "httpx"])
async def test_both_clients_give_the_same_answers(server: Server, kind: str) -> None:
    async with origins(kind, server.url, 16) as http:
        assert len(http) == (1 if kind == "lean" else 2)
        assert await http[0].post("/echo", {"x": [1, 2]}) == Answer(201, b'{"got": {"x": [1, 2]}}')
        assert await http[-1].post("/echo", b"{}") == Answer(201, b'{"got": {}}')
        assert (await http[0].get("/chunked")).body == b"hello world"


async def test_only_plain_http_to_a_host_and_port() -> None:
    for url in ("https://127.0.0.1:1", "http://127.0.0.1", "file:///etc/passwd"):
        with pytest.raises(ValueError, match="plain http"):
            LeanClient(url)
    with pytest.raises(ValueError, match="unknown client"):
        async with origins("curl", "http://127.0.0.1:1", 1):
            pass


def test_run_uses_uvloop() -> None:
    async def which() -> str:
        return type(asyncio.get_running_loop()).__module__

    assert run(which()).startswith("uvloop")
