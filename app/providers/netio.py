"""httpcore's network layer on plain asyncio: the sockets under the provider client.

    pool = httpcore.AsyncConnectionPool(network_backend=AsyncioBackend(), ...)

httpcore's default backend goes through anyio, which costs a cancel scope, two
checkpoints and a dict of socket attributes per read and write; and httpcore writes a
request's head and body with a write each, two sends and two wake-ups of the server for
every model call. This backend is an asyncio ``Protocol`` with a buffer: a write is held
until the connection next reads (HTTP/1.1 sends the whole request before it reads the
reply), so a request is one ``send``, and a read takes what has already arrived without
waiting. Errors and timeouts are httpcore's own exceptions, which httpx maps as usual.
"""

from __future__ import annotations

import asyncio
import select
import ssl
from collections import deque
from collections.abc import Iterable
from typing import Any, Final, cast

import httpcore

# A connection reads this much into its buffer before it stops reading from the socket.
_HIGH_WATER: Final = 1 << 20


class _Protocol(asyncio.Protocol):
    """What arrived on one connection, and whoever waits for it."""

    def __init__(self) -> None:
        self.transport: asyncio.Transport | None = None
        self.chunks: deque[bytes] = deque()
        self.buffered = 0
        self.eof = False
        self.lost: Exception | None = None
        self.closed = False
        self.waiter: asyncio.Future[None] | None = None
        self.drained: asyncio.Future[None] | None = None
        self.paused = False  # the transport asked us to stop writing
        self.reading = True

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        # uvloop's transports are not asyncio.Transport subclasses, but behave as one.
        self.transport = cast(asyncio.Transport, transport)

    def data_received(self, data: bytes) -> None:
        self.chunks.append(data)
        self.buffered += len(data)
        if self.buffered > _HIGH_WATER and self.reading and self.transport is not None:
            self.reading = False
            self.transport.pause_reading()
        self._wake()

    def eof_received(self) -> bool:
        self.eof = True
        self._wake()
        return False  # close the transport

    def connection_lost(self, exc: Exception | None) -> None:
        self.closed = True
        self.lost = exc
        self._wake()
        drained, self.drained = self.drained, None
        if drained is not None and not drained.done():
            drained.set_result(None)

    def pause_writing(self) -> None:
        self.paused = True

    def resume_writing(self) -> None:
        self.paused = False
        drained, self.drained = self.drained, None
        if drained is not None and not drained.done():
            drained.set_result(None)

    def take(self, max_bytes: int) -> bytes:
        chunk = self.chunks.popleft()
        if len(chunk) > max_bytes:
            chunk, rest = chunk[:max_bytes], chunk[max_bytes:]
            self.chunks.appendleft(rest)
        self.buffered -= len(chunk)
        if not self.reading and self.buffered <= _HIGH_WATER // 4 and self.transport is not None:
            self.reading = True
            self.transport.resume_reading()
        return chunk

    def _wake(self) -> None:
        waiter, self.waiter = self.waiter, None
        if waiter is not None and not waiter.done():
            waiter.set_result(None)


class AsyncioStream(httpcore.AsyncNetworkStream):
    """One connection (TCP, maybe TLS) as httpcore reads and writes it."""

    def __init__(self, transport: asyncio.Transport, protocol: _Protocol) -> None:
        self._transport = transport
        self._protocol = protocol
        self._pending: list[bytes] = []  # written, not sent yet: sent by the next read
        sock = transport.get_extra_info("socket")
        self._fd: int = -1 if sock is None else sock.fileno()

    async def read(self, max_bytes: int, timeout: float | None = None) -> bytes:  # noqa: ASYNC109 (httpcore's interface)
        if self._pending:
            await self._flush(timeout)
        protocol = self._protocol
        while not protocol.chunks:
            if protocol.eof or protocol.closed:
                if protocol.lost is not None:
                    raise httpcore.ReadError(str(protocol.lost) or repr(protocol.lost))
                return b""
            waiter = protocol.waiter = asyncio.get_running_loop().create_future()
            await _within(waiter, timeout, httpcore.ReadTimeout)
        return protocol.take(max_bytes)

    async def write(self, buffer: bytes, timeout: float | None = None) -> None:  # noqa: ASYNC109
        if not buffer:
            return
        if self._protocol.closed or self._transport.is_closing():
            raise httpcore.WriteError("the connection is closed")
        self._pending.append(buffer)

    async def _flush(self, limit_s: float | None) -> None:
        data = b"".join(self._pending) if len(self._pending) > 1 else self._pending[0]
        self._pending = []
        protocol = self._protocol
        if protocol.closed or self._transport.is_closing():
            raise httpcore.WriteError("the connection is closed")
        try:
            self._transport.write(data)
        except (OSError, RuntimeError) as exc:
            raise httpcore.WriteError(str(exc) or repr(exc)) from exc
        while protocol.paused and not protocol.closed:
            drained = protocol.drained = asyncio.get_running_loop().create_future()
            await _within(drained, limit_s, httpcore.WriteTimeout)
        if protocol.lost is not None:
            raise httpcore.WriteError(str(protocol.lost) or repr(protocol.lost))

    async def aclose(self) -> None:
        self._pending = []
        self._transport.close()
        # The socket itself closes in a callback the loop runs next: let it run now, so a
        # peer still sending (a reply abandoned over its size cap) sees the hang-up even
        # if the caller goes on without yielding.
        await asyncio.sleep(0)

    async def start_tls(
        self,
        ssl_context: ssl.SSLContext,
        server_hostname: str | None = None,
        timeout: float | None = None,  # noqa: ASYNC109 (httpcore's interface)
    ) -> httpcore.AsyncNetworkStream:
        loop = asyncio.get_running_loop()
        try:
            transport = await _within(
                loop.start_tls(
                    self._transport,
                    self._protocol,
                    ssl_context,
                    server_hostname=server_hostname,
                    ssl_handshake_timeout=timeout,
                ),
                timeout,
                httpcore.ConnectTimeout,
            )
        except (OSError, ssl.SSLError, ConnectionError) as exc:
            self._transport.close()
            raise httpcore.ConnectError(str(exc) or repr(exc)) from exc
        except BaseException:
            self._transport.close()
            raise
        if transport is None:  # the connection closed during the handshake
            raise httpcore.ConnectError("the connection closed during the TLS handshake")
        self._protocol.transport = transport
        stream = AsyncioStream(transport, self._protocol)
        stream._fd = self._fd
        return stream

    def get_extra_info(self, info: str) -> Any:
        if info == "ssl_object":
            return self._transport.get_extra_info("ssl_object")
        if info == "client_addr":
            return self._transport.get_extra_info("sockname")
        if info == "server_addr":
            return self._transport.get_extra_info("peername")
        if info == "socket":
            return self._transport.get_extra_info("socket")
        if info == "is_readable":
            # Idle and readable means the server closed it (or broke HTTP): what arrived
            # already, else what the kernel holds that the loop has not read yet.
            protocol = self._protocol
            return bool(protocol.chunks or protocol.eof or protocol.closed or _readable(self._fd))
        return None


class AsyncioBackend(httpcore.AsyncNetworkBackend):
    """Connections as ``AsyncioStream``: TCP with ``TCP_NODELAY`` (asyncio's default)."""

    async def connect_tcp(
        self,
        host: str,
        port: int,
        timeout: float | None = None,  # noqa: ASYNC109 (httpcore's interface)
        local_address: str | None = None,
        socket_options: Iterable[httpcore.SOCKET_OPTION] | None = None,
    ) -> httpcore.AsyncNetworkStream:
        loop = asyncio.get_running_loop()
        local = None if local_address is None else (local_address, 0)
        try:
            transport, protocol = await _within(
                loop.create_connection(_Protocol, host, port, local_addr=local),
                timeout,
                httpcore.ConnectTimeout,
            )
        except OSError as exc:
            raise httpcore.ConnectError(str(exc) or repr(exc)) from exc
        sock = transport.get_extra_info("socket")
        if sock is not None:
            for option in socket_options or ():
                sock.setsockopt(*option)
        return AsyncioStream(transport, protocol)

    async def connect_unix_socket(
        self,
        path: str,
        timeout: float | None = None,  # noqa: ASYNC109 (httpcore's interface)
        socket_options: Iterable[httpcore.SOCKET_OPTION] | None = None,
    ) -> httpcore.AsyncNetworkStream:
        loop = asyncio.get_running_loop()
        try:
            transport, protocol = await _within(
                loop.create_unix_connection(_Protocol, path), timeout, httpcore.ConnectTimeout
            )
        except OSError as exc:
            raise httpcore.ConnectError(str(exc) or repr(exc)) from exc
        return AsyncioStream(transport, protocol)

    async def sleep(self, seconds: float) -> None:
        await asyncio.sleep(seconds)


async def _within(awaitable: Any, limit_s: float | None, error: type[Exception]) -> Any:
    """``await awaitable``, raising ``error`` after ``limit_s`` seconds (None: no limit).

    A timer on the loop rather than ``asyncio.timeout``: no task lookup or context
    manager on every read that has to wait."""
    if limit_s is None:
        return await awaitable
    future = asyncio.ensure_future(awaitable)
    if future.done():
        return future.result()
    loop = asyncio.get_running_loop()
    expired = False

    def expire() -> None:
        nonlocal expired
        if not future.done():
            expired = True
            future.cancel()

    timer = loop.call_later(max(limit_s, 0.0), expire)
    try:
        return await future
    except asyncio.CancelledError:
        if expired:
            raise error(f"timed out after {limit_s:g}s") from None
        raise
    finally:
        timer.cancel()
        if not future.done():
            future.cancel()


def _readable(fd: int) -> bool:
    """Whether the kernel holds data (or the end) for ``fd``; a closed one counts as so."""
    if fd < 0:
        return True
    poller = select.poll()
    poller.register(fd, select.POLLIN)
    return bool(poller.poll(0))
