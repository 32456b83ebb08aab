"""The provider client's sockets: an asyncio ``Protocol`` with a buffer, and a timer.

``app.providers.h1`` runs HTTP/1.1 on it. A connection's bytes land in ``chunks`` as the
loop reads them, up to ``_HIGH_WATER`` (then the socket is not read until the caller takes
some); whoever waits for them waits on ``waiter``, a plain future, within ``within``'s
timer rather than a task, a cancel scope and a dict of socket attributes per read as
anyio's streams (under httpcore) cost.
"""

from __future__ import annotations

import asyncio
from collections import deque
from typing import Any, Final, cast

# A connection reads this much into its buffer before it stops reading from the socket.
_HIGH_WATER: Final = 1 << 20


class StreamProtocol(asyncio.Protocol):
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


async def within(awaitable: Any, limit_s: float | None, error: type[Exception]) -> Any:
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
