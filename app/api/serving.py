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

Two shortcuts for an app that serves a request itself (``app.api.front``), each what
uvicorn's own ``receive`` and ``send`` would do, or nothing (the app awaits them then):

    body = whole_body(receive)                # the request's body if all of it is here
    if respond(send, 202, headers, body): ... # the whole answer written at once

``respond`` hands the head and the body on together without waiting for the end of the
pass (a long-poll answered as its job's end is heard leaves in that pass), and without two
ASGI messages through uvicorn's ``send``.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterable
from typing import Any, cast

from starlette.types import Receive, Send
from uvicorn.protocols.http.httptools_impl import (
    HEADER_RE,
    HEADER_VALUE_RE,
    STATUS_LINE,
    HttpToolsProtocol,
    RequestResponseCycle,
)
from uvicorn.protocols.utils import get_client_addr, get_path_with_query_string

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

    def write_now(self, data: Buffer) -> None:
        """``data`` handed on at once, after what is held (if anything is: in order)."""
        if self._pending is not None:
            self._pending.append(data)
        elif not self._transport.is_closing():
            self._transport.write(data)

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


def whole_body(receive: Receive) -> bytes | None:
    """What ``await receive()`` gives now when it is the request's whole body, taken as it
    would take it; None when ``receive`` is not uvicorn's of a ``OnePieceHttp`` request or
    the body is not all here (still coming, a ``100 Continue`` to send first, the client
    gone): the caller awaits ``receive`` then."""
    cycle = getattr(receive, "__self__", None)
    if type(cycle) is not RequestResponseCycle or not _one_piece(cycle.transport):
        return None
    if (
        cycle.more_body
        or cycle.waiting_for_100_continue
        or cycle.disconnected
        or cycle.response_complete
        or not cycle.message_event.is_set()
    ):
        return None
    cycle.flow.resume_reading()
    cycle.message_event.clear()
    body = bytes(cycle.body)
    cycle.body = bytearray()
    return body


def respond(
    send: Send, status: int, headers: list[tuple[bytes, bytes]], body: bytes | memoryview
) -> bool:
    """Answer with ``status``, ``headers`` and ``body`` in one write, as uvicorn's ``send``
    of ``http.response.start`` then ``http.response.body`` would (the access log's line
    when it is on, its default headers first, a ``connection: close`` when the connection
    is not kept, the connection closed then); True when done. False, nothing done, when
    ``send`` is not uvicorn's of a ``OnePieceHttp`` request, or the answer is one its
    ``send`` writes otherwise (a response already begun, writing paused, a HEAD request,
    headers without the body's exact ``content-length``, a ``transfer-encoding``, a header
    it refuses): the caller sends the ASGI messages then."""
    cycle = getattr(send, "__self__", None)
    if type(cycle) is not RequestResponseCycle:
        return False
    transport: object = cycle.transport
    if (
        type(transport) is not OnePieceTransport
        or cycle.response_started
        or cycle.disconnected
        or cycle.flow.write_paused
        or cycle.scope["method"] == "HEAD"
    ):
        return False
    content: list[Buffer] = [STATUS_LINE[status]]
    names: list[bytes] = []
    values: list[bytes] = []
    length = str(len(body)).encode()
    sized = False
    keep_alive = cycle.keep_alive
    closing = False
    for name, value in (*cycle.default_headers, *headers):
        names.append(name)
        values.append(value)
        name = name.lower()
        if name == b"content-length":
            if sized or value != length:
                return False  # uvicorn's send answers this one (or raises)
            sized = True
        elif name == b"transfer-encoding":
            return False
        elif name == b"connection" and b"close" in [
            token.lower().strip() for token in value.split(b",")
        ]:
            keep_alive = False
            closing = True
        content += (name, b": ", value, b"\r\n")
    # One search each over all names and all values: each pattern is one character class
    # (a tab is allowed in a value: it joins them).
    if not sized or HEADER_RE.search(b"".join(names)) or HEADER_VALUE_RE.search(b"\t".join(values)):
        return False
    if cycle.access_log:
        scope = cycle.scope
        cycle.access_logger.info(
            '%s - "%s %s HTTP/%s" %d',
            get_client_addr(scope),
            scope["method"],
            get_path_with_query_string(scope),
            scope["http_version"],
            status,
        )
    if not keep_alive and not closing:
        content.append(b"connection: close\r\n")
    content.append(b"\r\n")
    content.append(body)
    cycle.response_started = True
    cycle.waiting_for_100_continue = False
    cycle.keep_alive = keep_alive
    cycle.chunked_encoding = False
    cycle.expected_content_length = 0
    transport.write_now(b"".join(content))
    cycle.response_complete = True
    cycle.message_event.set()
    if not keep_alive:
        transport.close()
    cycle.on_response()
    return True


def _one_piece(transport: object) -> bool:
    return type(transport) is OnePieceTransport
