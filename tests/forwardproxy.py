"""A small real HTTP forward proxy on loopback, for tests of provider calls behind one.

    async with ForwardProxy({"provider.test": "127.0.0.1"}) as proxy:   # in a loop
        os.environ["HTTP_PROXY"] = proxy.url
    with ForwardProxy.in_thread({"provider.test": "127.0.0.1"}) as proxy: # for a service test
        ...

It serves what a corporate egress proxy serves: absolute-form requests
(``POST http://provider.test:8080/v1/chat/completions HTTP/1.1``) and ``CONNECT`` tunnels
(for https). After the first request of a connection it only relays bytes: later requests
on a kept-alive connection go to the same server, unread (``seen`` lists the first). It
resolves only the names it is given (a made-up name such as ``provider.test`` is
reachable through it and nowhere else); anything else gets a 502.
With ``credentials`` set it wants ``Proxy-Authorization: Basic ...`` (else 407).
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import threading
from collections.abc import Iterator, Mapping
from typing import Final

MAX_HEAD: Final = 64 * 1024


class ForwardProxy:
    """Counts what it relayed: ``seen`` holds each request line (or CONNECT target)."""

    def __init__(
        self, hosts: Mapping[str, str], *, credentials: tuple[str, str] | None = None
    ) -> None:
        self.hosts = dict(hosts)
        self.credentials = credentials
        self.seen: list[str] = []
        self.authorizations: list[str | None] = []
        self.port = 0
        self._server: asyncio.Server | None = None
        self._tasks: set[asyncio.Task[None]] = set()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    async def __aenter__(self) -> ForwardProxy:
        self._server = await asyncio.start_server(self._serve, "127.0.0.1", 0)
        self.port = self._server.sockets[0].getsockname()[1]
        return self

    async def __aexit__(self, *exc: object) -> None:
        assert self._server is not None
        self._server.close()
        for task in list(self._tasks):
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        await self._server.wait_closed()

    @classmethod
    @contextlib.contextmanager
    def in_thread(
        cls, hosts: Mapping[str, str], *, credentials: tuple[str, str] | None = None
    ) -> Iterator[ForwardProxy]:
        """The proxy on a loop of its own in a thread, for tests of a service in threads."""
        proxy = cls(hosts, credentials=credentials)
        loop = asyncio.new_event_loop()
        started = threading.Event()
        stop = asyncio.Event()

        async def run() -> None:
            async with proxy:
                started.set()
                await stop.wait()

        thread = threading.Thread(target=loop.run_until_complete, args=(run(),), daemon=True)
        thread.start()
        started.wait(30)
        try:
            yield proxy
        finally:
            loop.call_soon_threadsafe(stop.set)
            thread.join(30)
            loop.close()

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        assert task is not None
        self._tasks.add(task)
        try:
            await self._relay(reader, writer)
        except (ConnectionError, asyncio.IncompleteReadError, asyncio.LimitOverrunError):
            pass
        except asyncio.CancelledError:
            pass  # the proxy is closing
        finally:
            self._tasks.discard(task)
            writer.close()

    async def _relay(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        head = await reader.readuntil(b"\r\n\r\n")
        if len(head) > MAX_HEAD:
            return
        line, *fields = head.decode("latin-1").split("\r\n")
        method, target, version = line.split(" ", 2)
        headers = {}
        for field in fields:
            name, sep, value = field.partition(":")
            if sep:
                headers[name.strip().lower()] = value.strip()
        self.seen.append(f"{method} {target}")
        self.authorizations.append(headers.get("proxy-authorization"))
        if self.credentials is not None:
            wanted = "Basic " + base64.b64encode(":".join(self.credentials).encode()).decode()
            if headers.get("proxy-authorization") != wanted:
                writer.write(b"HTTP/1.1 407 Proxy Authentication Required\r\n")
                writer.write(b"proxy-authenticate: Basic\r\ncontent-length: 0\r\n\r\n")
                await writer.drain()
                return
        if method == "CONNECT":
            host, _, port = target.rpartition(":")
            path = b""
        else:
            scheme, _, rest = target.partition("://")
            authority, slash, tail = rest.partition("/")
            host, _, port = authority.rpartition(":") if ":" in authority else (authority, "", "")
            port = port or ("443" if scheme == "https" else "80")
            path = (slash + tail).encode() or b"/"
        address = self.hosts.get(host)
        if address is None:
            writer.write(b"HTTP/1.1 502 Bad Gateway\r\ncontent-length: 0\r\n\r\n")
            await writer.drain()
            return
        upstream_reader, upstream_writer = await asyncio.open_connection(address, int(port))
        try:
            if method == "CONNECT":
                writer.write(b"HTTP/1.1 200 Connection established\r\n\r\n")
                await writer.drain()
            else:
                # The request in origin form, without the hop-by-hop headers meant for us.
                kept = [
                    f for f in fields if f and f.partition(":")[0].strip().lower() not in HOP_BY_HOP
                ]
                upstream_writer.write(
                    f"{method} ".encode() + path + f" {version}\r\n".encode()
                    + "".join(f"{f}\r\n" for f in kept).encode("latin-1")
                    + b"connection: close\r\n\r\n"
                )  # fmt: skip
            await asyncio.gather(_pipe(reader, upstream_writer), _pipe(upstream_reader, writer))
        finally:
            upstream_writer.close()


HOP_BY_HOP: Final = frozenset({"proxy-authorization", "proxy-connection", "connection"})


async def _pipe(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    """Copy until the end of ``reader``; then the end goes on to ``writer``."""
    try:
        while data := await reader.read(65536):
            writer.write(data)
            await writer.drain()
        if writer.can_write_eof():
            writer.write_eof()
    except (ConnectionError, OSError):
        writer.close()
