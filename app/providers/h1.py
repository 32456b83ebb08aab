"""The provider client's HTTP/1.1 under httpx: one lean keep-alive pool on asyncio sockets.

    httpx.AsyncClient(transport=H1Transport(max_connections=100, ssl_context=context))

httpx's own transport goes through httpcore, h11 and anyio: a cancel scope, locks and
sniffio look-ups per request, a state machine and header validation per event, and a
pool that looks at every connection (a ``poll()`` per idle one) each time a request
starts or ends. Model calls are plain ``POST``s with small JSON replies, so this
transport does what they need and nothing else:

- one pool for every origin, at most ``max_connections`` connections in all; idle ones
  are kept per origin (the last used first, expired after ``keepalive_expiry`` seconds)
  and, when the pool is full, the oldest idle one makes room for another origin; past
  that a request waits in line, within its ``pool`` timeout (``httpx.PoolTimeout``);
- a request is one ``send`` (head and body together) on the asyncio ``Protocol`` of
  ``app.providers.netio``; a reply is parsed in place, headers and body framing
  (``content-length``, ``chunked``, or until the server closes) checked and bounded:
  a head over ``MAX_HEAD_BYTES`` or ``MAX_HEADERS`` lines, a chunk-size line over
  ``MAX_LINE_BYTES``, trailers over ``MAX_HEAD_BYTES`` are ``httpx.RemoteProtocolError``;
  nothing is buffered past what the caller reads (the socket stops being read when
  ``netio``'s buffer is full), and every search is resumed where the last one stopped,
  so parsing is linear in what arrived;
- a kept-alive connection the server closed while it sat idle (the race every HTTP/1.1
  client has) is noticed when the request finds it closed or reset before any byte of
  the reply, and the request goes once more on a fresh connection;
- httpx's exceptions, as httpcore would raise them: ``ConnectError``/``ConnectTimeout``,
  ``ReadError``/``ReadTimeout``, ``WriteError``/``WriteTimeout``, ``PoolTimeout``,
  ``RemoteProtocolError``, ``UnsupportedProtocol``. Timeouts come from the request's
  ``timeout`` extension, per operation as in httpx.

It does not speak to proxies: httpx reads none from the environment for a client given
its own transport (nor did it for the httpcore pools this one replaced).
"""

from __future__ import annotations

import asyncio
import ssl
from collections import deque
from collections.abc import AsyncIterator
from typing import Any, Final, cast

import httpx

from app.providers.netio import StreamProtocol, within

# A reply's status line and headers (and, separately, a chunked body's trailers).
MAX_HEAD_BYTES: Final = 64 * 1024
MAX_HEADERS: Final = 100
# A chunk-size line, extensions included.
MAX_LINE_BYTES: Final = 4096
# Interim (1xx) replies skipped before the real one.
MAX_INTERIM: Final = 8
KEEPALIVE_EXPIRY_S: Final = 5.0
# The most one read of the body hands the caller.
READ_BYTES: Final = 64 * 1024
_MAX_LENGTH_DIGITS: Final = 18  # content-length and chunk sizes stay well below 2**63

_CRLF: Final = b"\r\n"
_HEAD_END: Final = b"\r\n\r\n"
_TOKEN: Final = frozenset(
    b"!#$%&'*+-.^_`|~0123456789abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ"
)
_HEX: Final = frozenset(b"0123456789abcdefABCDEF")
_DIGITS: Final = frozenset(b"0123456789")
# Control characters a header value may not hold (tab is allowed).
_CONTROL: Final = bytes(c for c in range(32) if c != 9) + b"\x7f"
_NO_BODY_STATUS: Final = frozenset({204, 304})

Origin = tuple[str, str, int, str | None]  # scheme, host, port, TLS server name
_Header = tuple[bytes, bytes, bytes]  # name, name lowercased, value: as httpx.Headers keeps it


class _Stale(Exception):
    """A kept-alive connection was found closed before any byte of the reply."""


class _Connection:
    """One socket, what was read from it but not parsed yet, and when it went idle."""

    __slots__ = ("buffer", "busy", "idle_since", "origin", "protocol", "transport")

    def __init__(
        self, origin: Origin, transport: asyncio.Transport, protocol: StreamProtocol
    ) -> None:
        self.origin = origin
        self.transport = transport
        self.protocol = protocol
        self.buffer = bytearray()
        self.idle_since = 0.0
        self.busy = True  # handed to a request, not back in the pool yet

    def usable(self) -> bool:
        """Idle with nothing arrived, not closed by the server."""
        protocol = self.protocol
        return not (
            protocol.chunks or protocol.eof or protocol.closed or self.transport.is_closing()
        )

    def close(self) -> None:
        self.buffer.clear()
        self.transport.close()

    async def fill(self, timeout: float | None) -> bool:  # noqa: ASYNC109 (httpx's per-operation timeouts)
        """Move what arrived into ``buffer``, waiting for something when nothing has;
        False at the end of the stream."""
        protocol = self.protocol
        while not protocol.chunks:
            if protocol.eof or protocol.closed:
                if protocol.lost is not None:
                    raise httpx.ReadError(str(protocol.lost) or repr(protocol.lost))
                return False
            waiter = protocol.waiter = asyncio.get_running_loop().create_future()
            await within(waiter, timeout, httpx.ReadTimeout)
        while protocol.chunks:
            self.buffer += protocol.take(READ_BYTES)
            if len(self.buffer) >= READ_BYTES:
                break
        return True

    async def take(self, limit: int, timeout: float | None) -> bytes:  # noqa: ASYNC109
        """At most ``limit`` bytes (at least one); b"" at the end of the stream."""
        buffer = self.buffer
        if not buffer and not await self.fill(timeout):
            return b""
        if len(buffer) <= limit:
            data = bytes(buffer)
            buffer.clear()
        else:
            data = bytes(buffer[:limit])
            del buffer[:limit]
        return data

    async def line(self, timeout: float | None, what: str) -> bytes:  # noqa: ASYNC109
        """The next CRLF-terminated line (without it), at most ``MAX_LINE_BYTES`` long."""
        start = 0
        while True:
            end = self.buffer.find(_CRLF, start)
            if end >= 0:
                if end > MAX_LINE_BYTES:
                    break
                line = bytes(self.buffer[:end])
                del self.buffer[: end + 2]
                return line
            if len(self.buffer) > MAX_LINE_BYTES:
                break
            start = max(len(self.buffer) - 1, 0)
            if not await self.fill(timeout):
                raise httpx.RemoteProtocolError(f"the server closed the connection in {what}")
        raise httpx.RemoteProtocolError(f"{what} is longer than {MAX_LINE_BYTES} bytes")


class H1Transport(httpx.AsyncBaseTransport):
    """At most ``max_connections`` HTTP/1.1 connections, kept alive and shared by origin."""

    def __init__(
        self,
        *,
        max_connections: int,
        ssl_context: ssl.SSLContext,
        keepalive_expiry: float = KEEPALIVE_EXPIRY_S,
    ) -> None:
        if max_connections < 1:
            raise ValueError("max_connections must be at least 1")
        self._max = max_connections
        self._ssl = ssl_context
        self._expiry = keepalive_expiry
        self._idle: dict[Origin, list[_Connection]] = {}  # oldest first
        self._open = 0  # connections open or being opened
        self._waiters: deque[asyncio.Future[None]] = deque()
        self._closed = False

    @property
    def connections(self) -> int:
        """Connections open (busy or idle) or being opened."""
        return self._open

    @property
    def idle(self) -> int:
        return sum(len(idle) for idle in self._idle.values())

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        url = request.url
        scheme = url.scheme
        if scheme == "https":
            port = url.port or 443
        elif scheme == "http":
            port = url.port or 80
        else:
            raise httpx.UnsupportedProtocol(
                f"Request URL has an unsupported protocol '{scheme}://'.", request=request
            )
        if not url.host:
            raise httpx.UnsupportedProtocol("Request URL is missing a host.", request=request)
        extensions = request.extensions
        timeouts = extensions.get("timeout") or {}
        sni = extensions.get("sni_hostname")
        origin: Origin = (scheme, url.host, port, sni)
        head = _request_head(request)
        try:
            body: bytes | None = request.content
        except httpx.RequestNotRead:
            body = None  # a streamed body: sent as it comes, and never twice
        connection, reused = await self._acquire(origin, timeouts)
        try:
            try:
                return await self._exchange(connection, request, head, body, timeouts, reused)
            except _Stale:
                self._drop(connection)
            connection, reused = await self._acquire(origin, timeouts, fresh=True)
            try:
                return await self._exchange(connection, request, head, body, timeouts, False)
            except _Stale as stale:  # a fresh connection is never stale; for the type checker
                raise httpx.RemoteProtocolError(str(stale), request=request) from None
        except BaseException:
            self._drop(connection)
            raise

    async def aclose(self) -> None:
        self._closed = True
        for idle in self._idle.values():
            for connection in idle:
                connection.close()
                self._open -= 1
        self._idle.clear()
        while self._waiters:
            waiter = self._waiters.popleft()
            if not waiter.done():
                waiter.set_exception(httpx.PoolTimeout("the client was closed"))
        await asyncio.sleep(0)  # let the sockets' close callbacks run

    # -- the pool ---------------------------------------------------------------------------

    async def _acquire(
        self, origin: Origin, timeouts: dict[str, Any], *, fresh: bool = False
    ) -> tuple[_Connection, bool]:
        """An idle connection to ``origin`` (reused: True) or a new one, waiting for room."""
        queued = False
        waiters = self._waiters
        while True:
            if self._closed:
                raise httpx.PoolTimeout("the client is closed")
            while waiters and waiters[0].done():  # gave up waiting (timed out, cancelled)
                waiters.popleft()
            if not fresh and (queued or not self._waiters):
                connection = self._take_idle(origin)
                if connection is not None:
                    return connection, True
            if (queued or not self._waiters) and (self._open < self._max or self._evict()):
                self._open += 1
                try:
                    connection = await self._connect(origin, timeouts.get("connect"))
                except BaseException:
                    self._open -= 1
                    self._wake()
                    raise
                return connection, False
            waiter = asyncio.get_running_loop().create_future()
            if queued:
                self._waiters.appendleft(waiter)  # woken but beaten to it: keep its place
            else:
                self._waiters.append(waiter)
            try:
                await within(waiter, timeouts.get("pool"), httpx.PoolTimeout)
            except BaseException:
                if waiter.done() and not waiter.cancelled() and waiter.exception() is None:
                    self._wake()  # woken and leaving: the turn goes to the next in line
                else:
                    waiter.cancel()
                raise
            queued = True

    def _take_idle(self, origin: Origin) -> _Connection | None:
        idle = self._idle.get(origin)
        if not idle:
            return None
        now = asyncio.get_running_loop().time()
        while idle:
            connection = idle.pop()
            if connection.usable() and now - connection.idle_since < self._expiry:
                connection.busy = True
                return connection
            connection.close()
            self._open -= 1
        return None

    def _evict(self) -> bool:
        """Close the connection idle the longest, to make room; False without one."""
        oldest: list[_Connection] | None = None
        for idle in self._idle.values():
            if idle and (oldest is None or idle[0].idle_since < oldest[0].idle_since):
                oldest = idle
        if oldest is None:
            return False
        oldest.pop(0).close()
        self._open -= 1
        return True

    def _wake(self) -> None:
        while self._waiters:
            waiter = self._waiters.popleft()
            if not waiter.done():
                waiter.set_result(None)
                return

    def _release(self, connection: _Connection, reusable: bool) -> None:
        """Back into the pool (kept alive when ``reusable``), and the next in line woken;
        once per time it was handed out."""
        if not connection.busy:
            return
        connection.busy = False
        if reusable and not self._closed and not connection.buffer and connection.usable():
            connection.idle_since = asyncio.get_running_loop().time()
            idle = self._idle.get(connection.origin)
            if idle is None:
                idle = self._idle[connection.origin] = []
            idle.append(connection)
        else:
            connection.close()
            self._open -= 1
        if self._waiters:
            self._wake()

    def _drop(self, connection: _Connection) -> None:
        """A connection in an unknown state: closed, its place given back."""
        self._release(connection, False)

    async def _connect(self, origin: Origin, timeout: float | None) -> _Connection:  # noqa: ASYNC109
        scheme, host, port, sni = origin
        loop = asyncio.get_running_loop()
        if scheme == "https":
            connecting = loop.create_connection(
                StreamProtocol,
                host,
                port,
                ssl=self._ssl,
                server_hostname=sni or host,
                ssl_handshake_timeout=timeout if timeout else None,
            )
        else:
            connecting = loop.create_connection(StreamProtocol, host, port)
        try:
            transport, protocol = await within(connecting, timeout, httpx.ConnectTimeout)
        except OSError as exc:  # ssl.SSLError and socket.gaierror included
            raise httpx.ConnectError(str(exc) or repr(exc)) from exc
        return _Connection(
            origin, cast(asyncio.Transport, transport), cast(StreamProtocol, protocol)
        )

    # -- one exchange -----------------------------------------------------------------------

    async def _exchange(
        self,
        connection: _Connection,
        request: httpx.Request,
        head: bytes,
        body: bytes | None,
        timeouts: dict[str, Any],
        reused: bool,
    ) -> httpx.Response:
        protocol = connection.protocol
        if not connection.usable():
            if reused:
                raise _Stale("the connection was closed")
            raise httpx.WriteError("the connection is closed")
        if body is not None:
            await self._write(connection, head + body if body else head, timeouts, reused)
        else:
            await self._stream_body(connection, request, head, timeouts)
            reused = False  # a streamed body cannot be sent again
        read_timeout = timeouts.get("read")
        for _ in range(MAX_INTERIM + 1):
            try:
                status, reason, headers, version, plain = await _read_head(connection, read_timeout)
            except _Stale:
                if reused:
                    raise
                if protocol.lost is not None:
                    raise httpx.ReadError(str(protocol.lost) or repr(protocol.lost)) from None
                raise httpx.RemoteProtocolError(
                    "Server disconnected without sending a response."
                ) from None
            if status >= 200:
                break
            if status == 101:
                raise httpx.RemoteProtocolError("the server switched protocols unasked")
            reused = False  # something of the reply arrived
        else:
            raise httpx.RemoteProtocolError(f"more than {MAX_INTERIM} interim (1xx) replies")
        stream = H1Body(self, connection, request.method == "HEAD", status, headers, version)
        stream.read_timeout = read_timeout
        response = httpx.Response(
            status, stream=stream, extensions={"http_version": version, "reason_phrase": reason}
        )
        # Set rather than passed: the Response would copy them into new Headers, and its
        # copy would work its encoding out again.
        response.headers = _response_headers(headers, plain=plain)
        return response

    async def _stream_body(
        self,
        connection: _Connection,
        request: httpx.Request,
        head: bytes,
        timeouts: dict[str, Any],
    ) -> None:
        await self._write(connection, head, timeouts, False)
        chunked = _is_chunked(request.headers.get("transfer-encoding"))
        async for part in cast(httpx.AsyncByteStream, request.stream):
            if part:
                data = b"%x\r\n%s\r\n" % (len(part), part) if chunked else bytes(part)
                await self._write(connection, data, timeouts, False)
        if chunked:
            await self._write(connection, b"0\r\n\r\n", timeouts, False)

    async def _write(
        self, connection: _Connection, data: bytes, timeouts: dict[str, Any], reused: bool
    ) -> None:
        timeout = timeouts.get("write")
        protocol = connection.protocol
        try:
            connection.transport.write(data)
        except (OSError, RuntimeError) as exc:
            if reused:
                raise _Stale(str(exc)) from None
            raise httpx.WriteError(str(exc) or repr(exc)) from exc
        while protocol.paused and not protocol.closed:
            drained = protocol.drained = asyncio.get_running_loop().create_future()
            await within(drained, timeout, httpx.WriteTimeout)
        if protocol.lost is not None and not reused:
            raise httpx.WriteError(str(protocol.lost) or repr(protocol.lost))


async def _read_head(
    connection: _Connection,
    timeout: float | None,  # noqa: ASYNC109
) -> tuple[int, bytes, list[_Header], bytes, bool]:
    """``(status, reason, headers, http_version, plain)`` of the next reply on
    ``connection``; ``plain`` when the whole head is ASCII (the commonest case).

    ``_Stale`` when the stream ends (or is reset) before any byte of it."""
    buffer = connection.buffer
    start = 0
    while True:
        end = buffer.find(_HEAD_END, start)
        if end >= 0:
            break
        if len(buffer) > MAX_HEAD_BYTES:
            raise httpx.RemoteProtocolError(f"the reply's head is over {MAX_HEAD_BYTES} bytes")
        start = max(len(buffer) - 3, 0)
        try:
            more = await connection.fill(timeout)
        except httpx.ReadError:
            if buffer:
                raise
            raise _Stale("reset") from None
        if not more:
            if buffer:
                raise httpx.RemoteProtocolError(
                    "the server closed the connection in a reply's head"
                )
            raise _Stale("closed")
    if end > MAX_HEAD_BYTES:
        raise httpx.RemoteProtocolError(f"the reply's head is over {MAX_HEAD_BYTES} bytes")
    head = bytes(buffer[:end])
    del buffer[: end + 4]
    lines = head.split(_CRLF)
    if len(lines) > MAX_HEADERS + 1:
        raise httpx.RemoteProtocolError(f"the reply has over {MAX_HEADERS} headers")
    version, _, rest = lines[0].partition(b" ")
    code = rest[:3]
    if (
        version not in (b"HTTP/1.1", b"HTTP/1.0")
        or len(code) != 3
        or not _DIGITS.issuperset(code)
        or rest[3:4] not in (b"", b" ")
    ):
        raise httpx.RemoteProtocolError(f"a malformed status line: {lines[0][:100]!r}")
    reason = rest[4:]
    # One look at the whole head for a control character other than the lines' CRLFs
    # (the commonest case: none); only then line by line, to say where.
    clean = len(head.translate(None, _CONTROL)) == len(head) - 2 * (len(lines) - 1)
    if not clean and len(reason.translate(None, _CONTROL)) != len(reason):
        raise httpx.RemoteProtocolError("a control character in the status line")
    headers = _parse_headers(lines, 1, clean)
    return int(code), reason, headers, version, head.isascii()


def _parse_headers(lines: list[bytes], first: int, clean: bool = False) -> list[_Header]:
    """The ``(name, lowercased name, value)`` of header lines (httpx's own triples);
    ``clean`` when the caller checked that they hold no control character."""
    headers: list[_Header] = []
    for index in range(first, len(lines)):
        line = lines[index]
        name, colon, value = line.partition(b":")
        if not colon or not name or not _TOKEN.issuperset(name):
            raise httpx.RemoteProtocolError(f"a malformed header line: {line[:100]!r}")
        value = value.strip(b" \t")
        if not clean and len(value.translate(None, _CONTROL)) != len(value):
            raise httpx.RemoteProtocolError(f"a control character in header {name[:100]!r}")
        headers.append((name, name.lower(), value))
    return headers


def _response_headers(parsed: list[_Header], *, plain: bool = False) -> httpx.Headers:
    """``httpx.Headers`` of parsed headers, without its per-header normalising; with
    ``plain`` (every name and value is ASCII) the encoding its first look-up would work
    out by decoding each of them is given."""
    headers = httpx.Headers()
    headers._list = parsed
    if plain:
        headers._encoding = "ascii"
    return headers


def _is_chunked(value: str | bytes | None) -> bool:
    if not value:
        return False
    if isinstance(value, str):
        value = value.encode("latin-1")
    return value.rsplit(b",", 1)[-1].strip().lower() == b"chunked"


def _request_head(request: httpx.Request) -> bytes:
    """The request line and headers, refusing a header that would break the framing."""
    raw = request.headers.raw
    parts = [request.method.encode("ascii"), b" ", request.url.raw_path, b" HTTP/1.1\r\n"]
    for name, value in raw:
        parts += (name, b": ", value, _CRLF)
    parts.append(_CRLF)
    head = b"".join(parts)
    lines = len(raw) + 2
    if head.count(b"\n") != lines or head.count(b"\r") != lines or b"\0" in head:
        raise httpx.LocalProtocolError("a request header holds a line break or NUL")
    return head


_LENGTH, _CHUNKED, _UNTIL_CLOSE = 0, 1, 2


def _framing(
    head_only: bool, status: int, headers: list[_Header], version: bytes
) -> tuple[int, int, bool]:
    """``(mode, content length, keep alive)`` of a reply, from its head (RFC 9112 §6)."""
    keep_alive = version == b"HTTP/1.1"
    encoding: bytes | None = None
    lengths: list[bytes] = []
    for _, lowered, value in headers:
        if lowered == b"connection":
            tokens = {token.strip().lower() for token in value.split(b",")}
            if b"close" in tokens:
                keep_alive = False
            elif b"keep-alive" in tokens and version == b"HTTP/1.0":
                keep_alive = True
        elif lowered == b"transfer-encoding":
            encoding = value if encoding is None else encoding + b"," + value
        elif lowered == b"content-length":
            lengths.extend(part.strip() for part in value.split(b","))
    if head_only or status in _NO_BODY_STATUS:
        return _LENGTH, 0, keep_alive
    if encoding is not None:
        # Only chunked, as h11: another transfer coding would hand the caller coded bytes.
        if encoding.strip().lower() != b"chunked":
            raise httpx.RemoteProtocolError(f"unsupported transfer-encoding {encoding[:40]!r}")
        # With a content-length too the reply is suspect: read by chunks, then closed.
        return _CHUNKED, 0, keep_alive and not lengths
    if not lengths:
        return _UNTIL_CLOSE, 0, False
    first = lengths[0]
    if (
        any(length != first for length in lengths)
        or not first
        or len(first) > _MAX_LENGTH_DIGITS
        or not _DIGITS.issuperset(first)
    ):
        raise httpx.RemoteProtocolError(f"a malformed content-length: {first[:40]!r}")
    return _LENGTH, int(first), keep_alive


class H1Body(httpx.AsyncByteStream):
    """A reply's body as it arrives; the connection goes back to the pool at its end, or
    is closed when the body is dropped before it (``aclose``)."""

    read_timeout: float | None = None

    def __init__(
        self,
        pool: H1Transport,
        connection: _Connection,
        head_only: bool,
        status: int,
        headers: list[_Header],
        version: bytes,
    ) -> None:
        self._pool = pool
        self._connection: _Connection | None = connection
        self._mode, self._remaining, keep_alive = _framing(head_only, status, headers, version)
        self._keep_alive = keep_alive
        self._chunks = 0  # chunks begun, in a chunked body
        if self._mode == _LENGTH and not self._remaining:
            self._finish()

    # An iterator object rather than an async generator: no generator (and no entry in
    # the loop's set of them) per reply.
    def __aiter__(self) -> AsyncIterator[bytes]:
        return self

    async def __anext__(self) -> bytes:
        connection = self._connection
        if connection is None:
            raise StopAsyncIteration
        try:
            if self._mode == _LENGTH:
                data = await self._length(connection)
            elif self._mode == _CHUNKED:
                data = await self._chunk(connection)
            else:
                data = await connection.take(READ_BYTES, self.read_timeout)
        except BaseException:
            self._abandon()
            raise
        if data:
            return data
        self._finish()
        raise StopAsyncIteration

    async def _length(self, connection: _Connection) -> bytes:
        if not self._remaining:
            return b""
        data = await connection.take(min(self._remaining, READ_BYTES), self.read_timeout)
        if not data:
            raise httpx.RemoteProtocolError(
                f"the server closed the connection with {self._remaining} bytes of the body unsent"
            )
        self._remaining -= len(data)
        return data

    async def _chunk(self, connection: _Connection) -> bytes:
        """The next piece of the chunked body; b"" after its last chunk and trailers."""
        timeout = self.read_timeout
        if not self._remaining:
            # The end of the chunk before, if any.
            if self._chunks and await connection.line(timeout, "a chunk's end"):
                raise httpx.RemoteProtocolError("a chunk longer than its size")
            line = await connection.line(timeout, "a chunk-size line")
            size = line.split(b";", 1)[0].strip(b" \t")
            if not size or len(size) > _MAX_LENGTH_DIGITS or not _HEX.issuperset(size):
                raise httpx.RemoteProtocolError(f"a malformed chunk size: {line[:40]!r}")
            self._remaining = int(size, 16)
            self._chunks += 1
            if not self._remaining:
                # Trailers (read and dropped), then the empty line that ends the body.
                seen = 0
                while line := await connection.line(timeout, "the trailers"):
                    seen += len(line) + 2
                    if seen > MAX_HEAD_BYTES:
                        raise httpx.RemoteProtocolError(f"trailers over {MAX_HEAD_BYTES} bytes")
                return b""
        data = await connection.take(min(self._remaining, READ_BYTES), timeout)
        if not data:
            raise httpx.RemoteProtocolError("the server closed the connection in a chunk")
        self._remaining -= len(data)
        return data

    def _finish(self) -> None:
        connection, self._connection = self._connection, None
        if connection is not None:
            self._pool._release(connection, self._keep_alive)

    def _abandon(self) -> None:
        connection, self._connection = self._connection, None
        if connection is not None:
            self._pool._drop(connection)

    async def aclose(self) -> None:
        if self._connection is not None:
            self._abandon()
            # Let the loop run the socket's close now, so a peer still sending sees it.
            await asyncio.sleep(0)
