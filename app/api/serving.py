"""uvicorn's httptools protocol, sending each response in one write.

    uvicorn.run(app, http=OnePieceHttp, ...)

uvicorn writes a response's head (status line and headers) as soon as the app sends
``http.response.start`` and its body at ``http.response.body``: two ``send`` calls on the
socket and, with ``TCP_NODELAY``, two TCP segments for a job of a few hundred bytes, each
costing the API a system call and the client a wake-up. ``OnePieceHttp`` is uvicorn's own
``HttpToolsProtocol`` over a transport that holds what is written during one pass of the
event loop and hands it on at the end of the pass in one ``writelines`` (one ``writev``):
the head and the body that follows it in the same pass go out together. Nothing waits
longer than that pass; closing the connection hands on what is held first.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterable
from typing import Any, cast

from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol

Buffer = bytes | bytearray | memoryview


class OnePieceTransport:
    """A transport whose writes within one pass of the loop reach the socket together."""

    __slots__ = ("_loop", "_pending", "_transport")

    def __init__(self, transport: asyncio.Transport, loop: asyncio.AbstractEventLoop) -> None:
        self._transport = transport
        self._loop = loop
        self._pending: list[Buffer] | None = None

    def write(self, data: Buffer) -> None:
        pending = self._pending
        if pending is None:
            self._pending = [data]
            self._loop.call_soon(self._flush)
        else:
            pending.append(data)

    def writelines(self, list_of_data: Iterable[Buffer]) -> None:
        for data in list_of_data:
            self.write(data)

    def _flush(self) -> None:
        pending, self._pending = self._pending, None
        if not pending or self._transport.is_closing():
            return
        if len(pending) == 1:
            self._transport.write(pending[0])
        else:
            self._transport.writelines(pending)

    def close(self) -> None:
        self._flush()
        self._transport.close()

    def abort(self) -> None:
        self._pending = None
        self._transport.abort()

    def __getattr__(self, name: str) -> Any:
        # is_closing, get_extra_info, pause_reading, set_protocol, ...: the transport's own.
        return getattr(self._transport, name)


class OnePieceHttp(HttpToolsProtocol):
    """uvicorn's httptools protocol over a ``OnePieceTransport``."""

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        one_piece = OnePieceTransport(cast(asyncio.Transport, transport), self.loop)
        super().connection_made(cast(asyncio.Transport, one_piece))
