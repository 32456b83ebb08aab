"""The shared client's connection pool (``H1Transport``), against a real HTTP/1.1 server on
loopback that holds every request until the test lets it answer."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable

import httpx
import pytest

from app.providers.h1 import H1Transport
from app.providers.http import make_client

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


async def test_requests_up_to_max_connections_all_run_at_once(server: HeldServer) -> None:
    async with make_client(max_connections=12, trust_env=False) as http:
        calls = post_all(http, server.url, 12)
        await server.until(lambda: server.in_flight == 12)
        server.release()
        replies = await asyncio.gather(*calls)
        transport = http._transport
        assert isinstance(transport, H1Transport)
        assert transport.connections == 12
        assert transport.idle == 12
    assert [r.status_code for r in replies] == [200] * 12
    assert server.connections == 12


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


async def test_a_request_waiting_for_a_connection_longer_than_its_pool_timeout_fails(
    server: HeldServer,
) -> None:
    async with make_client(max_connections=1, trust_env=False) as http:
        first = asyncio.create_task(http.post(server.url, json={}))
        await server.until(lambda: server.in_flight == 1)
        with pytest.raises(httpx.PoolTimeout):
            await http.post(server.url, json={}, timeout=httpx.Timeout(5.0, pool=0.1))
        server.release()
        assert (await first).status_code == 200
        assert (await http.post(server.url, json={})).status_code == 200
    assert server.connections == 1


async def test_connections_are_kept_alive_and_reused_by_later_requests(
    server: HeldServer,
) -> None:
    server.release()
    async with make_client(max_connections=12, trust_env=False) as http:
        for _ in range(3):
            replies = await asyncio.gather(*post_all(http, server.url, 12))
            assert [r.status_code for r in replies] == [200] * 12
    assert server.connections <= 12


async def test_a_full_pool_closes_an_idle_connection_to_reach_another_origin(
    server: HeldServer,
) -> None:
    server.release()
    other = HeldServer()
    await other.start()
    other.release()
    try:
        async with make_client(max_connections=2, trust_env=False) as http:
            await asyncio.gather(*post_all(http, server.url, 2))
            reply = await http.post(other.url, json={})
            transport = http._transport
            assert isinstance(transport, H1Transport)
            assert transport.connections == 2
    finally:
        await other.close()
    assert reply.status_code == 200
    assert (server.connections, other.connections) == (2, 1)


async def test_a_request_that_fails_gives_its_place_back(server: HeldServer) -> None:
    await server.close()  # nothing listens: every request fails to connect
    async with make_client(max_connections=1, trust_env=False) as http:
        for _ in range(5):
            with pytest.raises(httpx.ConnectError):
                await http.post(server.url, json={})
        transport = http._transport
        assert isinstance(transport, H1Transport)
        assert transport.connections == 0  # each failure freed its place
