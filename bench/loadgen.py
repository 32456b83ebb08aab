"""A lean HTTP/1.1 client for the load generators of the benchmarks.

On this two-core machine the load generator shares the cores with the processes it
measures, so its own CPU is taken from them: ``httpx`` costs about a millisecond of CPU per
request, as much as the API spends on one, and a job is two requests (submit, long-poll)
where a direct call is one. This client does the least a correct client must: keep-alive
connections to one origin, a request written as one buffer, the answer parsed by httptools
(the C parser uvicorn uses: Content-Length or chunked), and a deadline on every request.
It runs on uvloop (``run``). It speaks plain HTTP to loopback only; it is not a product
part and nothing outside ``bench/`` (and its test) imports it.

    .venv/bin/python bench/loadgen.py --callers 32 --rounds 5   # lean vs httpx, interleaved

compares the two clients as bench/overhead.py's load generator on one deployment.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections.abc import AsyncIterator, Callable, Coroutine
from dataclasses import dataclass
from typing import Any, Protocol, TypeVar
from urllib.parse import urlsplit

import httptools
import httpx
import uvloop

T = TypeVar("T")

MAX_BODY = 16 * 1024 * 1024  # an answer larger than this is an error, not a benchmark


def run(main: Coroutine[Any, Any, T]) -> T:
    """``asyncio.run`` on uvloop: the load generator's own loop costs less per request."""
    with asyncio.Runner(loop_factory=uvloop.new_event_loop) as runner:
        return runner.run(main)


@dataclass(frozen=True, slots=True)
class Answer:
    status: int
    body: bytes

    def json(self) -> Any:
        return json.loads(self.body)


class _Conn(asyncio.Protocol):
    """One keep-alive connection; one request at a time."""

    def __init__(self) -> None:
        self.transport: asyncio.Transport | None = None
        self.parser = httptools.HttpResponseParser(self)
        self.waiter: asyncio.Future[Answer] | None = None
        self.chunks: list[bytes] = []
        self.size = 0
        self.reusable = True

    # -- asyncio.Protocol
    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]

    def data_received(self, data: bytes) -> None:
        try:
            self.parser.feed_data(data)
        except httptools.HttpParserError as e:
            self._fail(ConnectionError(f"bad HTTP answer: {e}"))

    def eof_received(self) -> bool:
        self._fail(ConnectionError("the server closed the connection"))
        return False

    def connection_lost(self, exc: Exception | None) -> None:
        self.reusable = False
        self._fail(ConnectionError(f"connection lost: {exc}"))

    # -- httptools callbacks
    def on_body(self, body: bytes) -> None:
        self.size += len(body)
        if self.size > MAX_BODY:
            self._fail(ConnectionError(f"answer over {MAX_BODY} bytes"))
            return
        self.chunks.append(body)

    def on_message_complete(self) -> None:
        if not self.parser.should_keep_alive():
            self.reusable = False
        waiter, self.waiter = self.waiter, None
        if waiter is not None and not waiter.done():
            waiter.set_result(Answer(self.parser.get_status_code(), b"".join(self.chunks)))

    # -- ours
    def _fail(self, exc: Exception) -> None:
        self.reusable = False
        if self.transport is not None:
            self.transport.abort()
        waiter, self.waiter = self.waiter, None
        if waiter is not None and not waiter.done():
            waiter.set_exception(exc)

    def _expire(self, within_s: float) -> None:
        self._fail(TimeoutError(f"no answer in {within_s} s"))

    async def send(self, raw: bytes, within_s: float) -> Answer:
        assert self.transport is not None
        assert self.waiter is None
        loop = asyncio.get_running_loop()
        waiter: asyncio.Future[Answer] = loop.create_future()
        self.waiter = waiter
        self.chunks = []
        self.size = 0
        self.transport.write(raw)
        deadline = loop.call_later(within_s, self._expire, within_s)
        try:
            return await waiter
        finally:
            deadline.cancel()


# Sent with every request when set (bench/guard.py --tenants: a service with API keys; one
# without ignores it).
AUTHORIZATION: str | None = None


class LeanClient:
    """Requests to one ``http://host:port`` origin over a pool of keep-alive connections
    (one per caller in flight; a connection the server closed is replaced)."""

    def __init__(self, url: str, *, timeout: float = 120.0) -> None:
        parts = urlsplit(url)
        if parts.scheme != "http" or not parts.hostname or not parts.port:
            raise ValueError(f"the lean client speaks plain http to host:port, not {url!r}")
        self.host, self.port = parts.hostname, parts.port
        self.timeout = timeout
        self.idle: list[_Conn] = []
        self.open: set[_Conn] = set()
        head = f"Host: {self.host}:{self.port}\r\n"
        if AUTHORIZATION:
            head += f"Authorization: {AUTHORIZATION}\r\n"
        self._head = head.encode()

    async def __aenter__(self) -> LeanClient:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()

    async def aclose(self) -> None:
        for conn in self.open:
            if conn.transport is not None:
                conn.transport.close()
        self.open.clear()
        self.idle.clear()

    async def _conn(self) -> _Conn:
        while self.idle:
            conn = self.idle.pop()
            if conn.reusable:
                return conn
            self.open.discard(conn)
        loop = asyncio.get_running_loop()
        _, conn = await loop.create_connection(_Conn, self.host, self.port)
        self.open.add(conn)
        return conn

    def request_bytes(self, method: str, target: str, body: bytes | None = None) -> bytes:
        """The request as written on the wire (build it once to send it many times)."""
        if body is None:
            return b"%s %s HTTP/1.1\r\n%s\r\n" % (method.encode(), target.encode(), self._head)
        head = b"%s %s HTTP/1.1\r\n%s" % (method.encode(), target.encode(), self._head)
        return head + b"Content-Type: application/json\r\nContent-Length: %d\r\n\r\n%s" % (
            len(body),
            body,
        )

    async def send(self, raw: bytes) -> Answer:
        conn = await self._conn()
        try:
            answer = await conn.send(raw, self.timeout)
        except BaseException:
            self.open.discard(conn)
            if conn.transport is not None:
                conn.transport.abort()
            raise
        if conn.reusable:
            self.idle.append(conn)
        else:
            self.open.discard(conn)
            if conn.transport is not None:
                conn.transport.close()
        return answer

    async def get(self, target: str) -> Answer:
        return await self.send(self.request_bytes("GET", target))

    async def post(self, target: str, body: Any) -> Answer:
        raw = body if isinstance(body, bytes) else json.dumps(body).encode()
        return await self.send(self.request_bytes("POST", target, raw))


class Origin(Protocol):
    """What a load path needs of a client: requests to one origin, answers as ``Answer``."""

    async def get(self, target: str) -> Answer: ...

    async def post(self, target: str, body: Any) -> Answer: ...


class HttpxOrigin:
    """The same requests through ``httpx.AsyncClient`` (the load generator before
    ``LeanClient``; ``--client httpx`` reproduces its figures)."""

    def __init__(self, http: httpx.AsyncClient, url: str) -> None:
        self.http, self.url = http, url

    async def get(self, target: str) -> Answer:
        r = await self.http.get(self.url + target)
        return Answer(r.status_code, r.content)

    async def post(self, target: str, body: Any) -> Answer:
        if isinstance(body, bytes):
            r = await self.http.post(
                self.url + target, content=body, headers={"content-type": "application/json"}
            )
        else:
            r = await self.http.post(self.url + target, json=body)
        return Answer(r.status_code, r.content)


@contextlib.asynccontextmanager
async def origins(client: str, url: str, callers: int) -> AsyncIterator[list[Origin]]:
    """Clients for ``callers`` concurrent callers of ``url``.

    ``lean``: one ``LeanClient`` (a connection per caller). ``httpx``: max(1, callers/8)
    ``httpx.AsyncClient``s of about 8 callers each (httpcore's pool costs more CPU per
    request as it grows).
    """
    async with contextlib.AsyncExitStack() as stack:
        if client == "lean":
            yield [await stack.enter_async_context(LeanClient(url))]
        elif client == "httpx":
            from bench.common import client as httpx_client

            yield [
                HttpxOrigin(await stack.enter_async_context(httpx_client(8)), url)
                for _ in range(max(1, callers // 8))
            ]
        else:
            raise ValueError(f"unknown client {client!r}: lean or httpx")


def runner(client: str) -> Callable[[Coroutine[Any, Any, T]], T]:
    """How a cell's coroutine is run: the lean client on uvloop, httpx on asyncio's own
    loop, as it always ran."""
    return run if client == "lean" else asyncio.run


def compare(callers: int, jobs: int, rounds: int) -> dict[str, dict[str, float]]:
    """Both clients on one split deployment and one zero-latency simulator, round by round.

    Per client, the medians of the direct calls/s, the jobs/s, their ratio, and the CPU per
    job of reprompt, the simulator and the load generator.
    """
    import statistics

    from bench.common import Stack, raise_fd_limit
    from bench.overhead import capture_messages, deploy, measure

    raise_fd_limit()
    cells: dict[str, dict[str, list[float]]] = {"lean": {}, "httpx": {}}
    with Stack() as stack:
        sim = stack.sim(latency_ms=0, jitter_ms=0, seed=1)
        url, _procs, parts, redis_url = deploy(stack, "split", sim.url)
        messages = capture_messages(url)
        for _ in range(rounds):
            for client, cell in cells.items():
                d = measure("direct", sim.url, messages, jobs, callers, {}, sim.pid, None, client)
                j = measure("jobs", url, messages, jobs, callers, parts, sim.pid, redis_url, client)
                if d["fails"] or j["fails"]:
                    raise SystemExit(f"{client}: failed calls {d['fails']}, {j['fails']}")
                row = {
                    "direct/s": d["rps"],
                    "jobs/s": j["rps"],
                    "x direct": j["rps"] / d["rps"],
                    "reprompt ms/job": j["cpu_ms_job"],
                    "sim ms/job": j["sim_cpu_ms_job"],
                    "loadgen ms/job": j["gen_cpu_ms_job"],
                    "loadgen ms/direct call": d["gen_cpu_ms_job"],
                }
                for k, v in row.items():
                    cell.setdefault(k, []).append(v)
    return {
        client: {k: round(statistics.median(v), 2) for k, v in cell.items()}
        for client, cell in cells.items()
    }


def main() -> int:
    import argparse

    parser = argparse.ArgumentParser(
        description="the lean client against httpx as bench/overhead.py's load generator"
    )
    parser.add_argument("--callers", type=int, default=32)
    parser.add_argument("--jobs", type=int, default=600, help="per cell (default 600)")
    parser.add_argument("--rounds", type=int, default=5)
    ns = parser.parse_args()
    medians = compare(ns.callers, ns.jobs, ns.rounds)
    names = list(next(iter(medians.values())))
    print(f"{ns.callers} callers, {ns.jobs} jobs a cell, medians of {ns.rounds} rounds")
    print("| client | " + " | ".join(names) + " |")
    print("|---|" + "---:|" * len(names))
    for client, cell in medians.items():
        print(f"| {client} | " + " | ".join(f"{cell[k]:.2f}" for k in names) + " |")
    return 0


if __name__ == "__main__":
    import sys
    from pathlib import Path

    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
    raise SystemExit(main())
