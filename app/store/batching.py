"""Auto-pipelining over one connection: a process's script calls and job reads go to Redis
on one socket, each as soon as it is made, and the commands made while replies are owed go
together at the end of the loop's turn::

    batcher = Batcher(redis)
    reply = await batcher.call("EVALSHA", sha, 2, key1, key2, arg)  # sent now, or with
                                                                    # this turn's others
    await batcher.aclose()                                          # its connection

Most of what a command costs both sides is its round trip rather than its work. Through
redis-py, each one takes a connection from the pool (a lock, bookkeeping, a health check)
and reads its reply through a stream, a timeout and a retry layer: about 100 µs of the
caller's CPU, and a third of a millisecond more when the process wakes from idle (one
caller: every hop starts cold). Here a command is packed by hiredis and written to a
connection this object holds; a protocol reads the replies as they come, parses them
with hiredis and hands each to its caller in order (Redis answers one connection's
commands in the order they came): about 20 µs. A command made when no reply is owed is
written at once (one caller: no wait for the turn to end); one made while replies are
owed waits for the end of the turn, so the commands of a busy process share a write, a
wake-up of Redis and a read, as a pipeline would (at most ``MAX_BATCH`` to one write).

The caller's command runs whether or not the caller is still waiting (a cancelled caller
gets no reply, as when a reply is lost on the way). Errors stay per command: an error
reply raises in its caller only (as redis-py's exception: ``NoScriptError``...); a lost
connection fails every command it owes a reply (``ConnectionError``: whether it ran is
unknown, as with redis-py), and the next call opens a new one. A connection that owes
replies and hears nothing for the client's socket timeout is dropped (``TimeoutError``).
The connection is opened by redis-py's own connection class from the client's pool
settings (address, password, database, TLS, hiredis packing), then read here. Not for a
cluster client (a batch would span nodes), nor for RESP3 or blocking commands.
"""

from __future__ import annotations

import asyncio
from collections import deque
from collections.abc import Callable
from typing import Any, Final

import hiredis
from redis.asyncio import Redis
from redis.asyncio.connection import AbstractConnection, ConnectionPool
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import InvalidResponse, ResponseError
from redis.exceptions import TimeoutError as RedisTimeoutError

# The most commands one write carries; more made in one turn go as several writes.
MAX_BATCH: Final = 64
_SOCKET_TIMEOUT_S: Final = 30.0  # when the client's pool sets none


def parse_error(message: str) -> ResponseError:
    """An error reply as redis-py raises it (``NOSCRIPT ...``: ``NoScriptError``)."""
    from redis._parsers.base import BaseParser

    error: ResponseError = BaseParser.parse_error(message)  # type: ignore[no-untyped-call]
    return error


def reply_reader(connection: Any) -> hiredis.Reader:
    """A hiredis reader of ``connection``'s replies as redis-py would read them: its error
    classes, and strings decoded when the client decodes them."""
    options: dict[str, Any] = {"protocolError": InvalidResponse, "replyError": parse_error}
    encoder = connection.encoder
    if encoder.decode_responses:
        options["encoding"], options["errors"] = encoder.encoding, encoder.encoding_errors
    return hiredis.Reader(**options)


def take_over(
    connection: Any, protocol: asyncio.Protocol
) -> tuple[asyncio.Transport, asyncio.BaseProtocol, bytes]:
    """Read the socket of redis-py's ``connection`` (which made it and its handshake) with
    ``protocol`` from now on. The transport; redis-py's own protocol (to be told when the
    connection is lost: its stream's waiters return); and the bytes redis-py's stream had
    read and nobody parsed, for ``protocol`` to take first. ``RedisConnectionError`` when
    the connection is closed."""
    stream, writer = connection._reader, connection._writer
    if stream is None or writer is None:
        raise RedisConnectionError("the connection is closed")
    transport: asyncio.Transport = writer.transport
    own = transport.get_protocol()
    transport.set_protocol(protocol)
    buffered = bytes(stream._buffer)
    stream._buffer.clear()
    return transport, own, buffered


def pipelines(redis: Any) -> bool:
    """Whether a ``Batcher`` can serve this client: one Redis, RESP2."""
    if not isinstance(redis, Redis):
        return False
    protocol = redis.connection_pool.connection_kwargs.get("protocol")
    return protocol in (None, 2, "2")


Reply = Any
Pending = tuple[tuple[Any, ...], asyncio.Future[Reply]]


class _Line(asyncio.Protocol):
    """One connection taken over from redis-py after its handshake: writes packed
    commands, reads replies in order."""

    def __init__(
        self,
        loop: asyncio.AbstractEventLoop,
        connection: AbstractConnection,
        pool: ConnectionPool,
        timeout_s: float,
    ) -> None:
        self.loop = loop
        # redis-py's connection, which made the socket and the handshake. It holds the
        # socket's stream until the socket is closed, among its pool's connections in use
        # (one more than the pool's size, which is for the client's commands): closing the
        # client closes it too, whoever forgot to close the batcher.
        self._connection = connection
        self._pool = pool
        pool._in_use_connections.add(connection)
        pool.max_connections += 1
        self.pack: Callable[..., list[bytes]] = connection.pack_command
        self._reader = reply_reader(connection)
        self._owed: deque[asyncio.Future[Reply]] = deque()  # in the order sent
        self._out: list[bytes] = []  # packed, not written yet
        self._out_count = 0
        self._flushing = False
        self._transport: asyncio.Transport | None = None
        self._stream: asyncio.BaseProtocol | None = None  # redis-py's protocol, replaced
        self.lost: BaseException | None = None
        self._timeout_s = timeout_s
        self._watch: asyncio.TimerHandle | None = None
        self._heard = 0  # replies so far: the watchdog's sign of life

    def take_over(self) -> None:
        """Read the socket here from now on."""
        # Right after the handshake redis-py has read all there was: nothing is unread.
        self._transport, self._stream, _ = take_over(self._connection, self)

    @property
    def usable(self) -> bool:
        return self.lost is None and self._transport is not None

    def send(self, command: list[bytes], future: asyncio.Future[Reply]) -> None:
        """Queue a packed command; its reply (or error) goes to ``future``."""
        owed = self._owed
        idle = not owed and not self._out
        owed.append(future)
        if self._watch is None:
            self._watch = self.loop.call_later(self._timeout_s, self._check, self._heard)
        if idle:  # nothing on its way: now, without waiting for the turn to end
            self._write(command)
            return
        self._out += command
        self._out_count += 1
        if self._out_count >= MAX_BATCH:
            self._flush()
        elif not self._flushing:
            self._flushing = True
            self.loop.call_soon(self._flush)

    def _write(self, data: list[bytes]) -> None:
        transport = self._transport
        if transport is None or transport.is_closing():
            self._fail(RedisConnectionError("Connection closed by server."))
            return
        if len(data) == 1:
            transport.write(data[0])
        else:
            transport.writelines(data)

    def _flush(self) -> None:
        self._flushing = False
        out, self._out, self._out_count = self._out, [], 0
        if out and self.lost is None:
            self._write(out)

    def data_received(self, data: bytes) -> None:
        reader = self._reader
        reader.feed(data)
        owed = self._owed
        while True:
            try:
                reply = reader.gets()
            except InvalidResponse as exc:
                self.abort(exc)
                return
            if reply is False:
                return
            if not owed:  # a reply nobody asked for: the stream is not ours to read
                self.abort(InvalidResponse("a reply to no command"))
                return
            self._heard += 1
            future = owed.popleft()
            if future.done():
                continue  # its caller stopped waiting
            if isinstance(reply, ResponseError):
                future.set_exception(reply)
            else:
                future.set_result(reply)

    def _check(self, heard: int) -> None:
        """Every ``timeout_s`` while replies are owed: none came since the last look."""
        self._watch = None
        if not self._owed or self.lost is not None:
            return
        if self._heard == heard:
            self.abort(RedisTimeoutError("Timeout reading from Redis"))
            return
        self._watch = self.loop.call_later(self._timeout_s, self._check, self._heard)

    def abort(self, exc: BaseException) -> None:
        self._fail(exc)
        if self._transport is not None:
            self._transport.abort()

    def close(self) -> None:
        if self._transport is not None:
            self._transport.close()
        self._fail(RedisConnectionError("the connection was closed"))

    def connection_lost(self, exc: Exception | None) -> None:
        self._fail(RedisConnectionError("Connection closed by server."))
        if self._stream is not None:  # its stream's ``wait_closed`` returns
            self._stream.connection_lost(exc)
        connection, pool = self._connection, self._pool
        connection._writer = connection._reader = None  # closed: nothing to close later
        if connection in pool._in_use_connections:
            pool._in_use_connections.discard(connection)
            pool.max_connections -= 1

    def _fail(self, exc: BaseException) -> None:
        if self.lost is None:
            self.lost = exc
        if self._watch is not None:
            self._watch.cancel()
            self._watch = None
        self._out, self._out_count = [], 0
        owed, self._owed = self._owed, deque()
        for future in owed:
            if not future.done():
                future.set_exception(exc)

    async def drained(self) -> None:
        """Returns when every reply owed now has come (or failed)."""
        if self._owed:
            await asyncio.wait([self._owed[-1]])


class Batcher:
    """Sends commands on one connection of its own, pipelined (see the module)."""

    def __init__(self, redis: Redis) -> None:
        self._redis = redis
        self._line: _Line | None = None
        # Commands made while the connection opens, sent once it is open.
        self._waiting: list[Pending] = []
        self._opening: asyncio.Task[None] | None = None
        timeout = redis.connection_pool.connection_kwargs.get("socket_timeout")
        self._timeout_s = float(timeout) if timeout else _SOCKET_TIMEOUT_S

    async def call(self, *args: Any) -> Any:
        """The reply to command ``args`` (``"HMGET", key, field, ...``)."""
        loop = asyncio.get_running_loop()
        future: asyncio.Future[Reply] = loop.create_future()
        line = self._line
        if line is not None and line.usable and line.loop is loop:
            line.send(line.pack(*args), future)
        else:
            self._waiting.append((args, future))
            if self._opening is None:
                self._opening = loop.create_task(self._open(), name="redis-batcher-connect")
        return await future

    async def aclose(self) -> None:
        """Wait for the replies on their way (their callers are owed them), then close the
        connection."""
        opening = self._opening
        if opening is not None:
            await asyncio.wait([opening])
        line, self._line = self._line, None
        if line is not None:
            await line.drained()
            line.close()

    async def _open(self) -> None:
        loop = asyncio.get_running_loop()
        try:
            line = await self._connect(loop)
        except BaseException as exc:
            waiting, self._waiting = self._waiting, []
            for _, future in waiting:
                if not future.done():
                    if isinstance(exc, asyncio.CancelledError):
                        future.cancel()
                    else:
                        future.set_exception(exc)
            if not isinstance(exc, Exception):
                raise
            return
        finally:
            self._opening = None
        old, self._line = self._line, line
        if old is not None and old.loop is loop:
            old.close()
        waiting, self._waiting = self._waiting, []
        for args, future in waiting:  # sent even when the caller stopped waiting
            try:
                command = line.pack(*args)
            except Exception as exc:  # not encodable (redis-py's DataError)
                if not future.done():
                    future.set_exception(exc)
                continue
            line.send(command, future)

    async def _connect(self, loop: asyncio.AbstractEventLoop) -> _Line:
        pool = self._redis.connection_pool
        connection: AbstractConnection = pool.connection_class(**pool.connection_kwargs)
        await connection.connect()  # type: ignore[no-untyped-call]  # socket, AUTH, SELECT...
        line = _Line(loop, connection, pool, self._timeout_s)
        line.take_over()
        return line
