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
import re
from collections.abc import Iterable
from typing import Any, Final, cast

from starlette.responses import Response
from starlette.types import Receive, Send
from uvicorn.protocols.http.httptools_impl import (
    STATUS_LINE,
    HttpToolsProtocol,
    RequestResponseCycle,
)
from uvicorn.protocols.utils import get_client_addr, get_path_with_query_string

Buffer = bytes | bytearray | memoryview


class OnePieceTransport:
    """A transport whose writes within one pass of the loop reach the socket together."""

    __slots__ = (
        "_loop",
        "_pending",
        "_transport",
        "get_extra_info",
        "is_closing",
        "pause_reading",
        "resume_reading",
    )

    def __init__(self, transport: asyncio.Transport, loop: asyncio.AbstractEventLoop) -> None:
        self._transport = transport
        self._loop = loop
        self._pending: list[Buffer] | None = None
        # What uvicorn asks of the transport per request: the transport's own, bound once.
        self.is_closing = transport.is_closing
        self.get_extra_info = transport.get_extra_info
        self.pause_reading = transport.pause_reading
        self.resume_reading = transport.resume_reading

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
    headers without the body's exact ``content-length``, a ``transfer-encoding`` or a
    ``connection`` header, a header it refuses): the caller sends the ASGI messages then."""
    cycle = _answerable(send)
    if cycle is None:
        return False
    lines: list[bytes] = []
    length: bytes | None = None
    for name, value in headers:
        name = name.lower()
        if name in _SPECIAL:
            if name != b"content-length" or length is not None:
                return False
            length = value
        lines += (name, b": ", value, b"\r\n")
    own = b"".join(lines)
    if length != str(len(body)).encode() or _LINES.fullmatch(own) is None:
        return False  # uvicorn's send writes it (or raises)
    return _answer(cycle, status, own, body)


def respond_lines(send: Send, response: LinedResponse) -> bool:
    """``respond`` of a ``LinedResponse``: its header lines written as they are (checked
    when it was made); True when done, False (nothing done) where ``respond`` would be.
    (Once its ``raw_headers`` were asked for, which may have changed them: ``respond``.)"""
    if response._raw is not None:
        return respond(send, response.status_code, response._raw, response.body)
    cycle = _answerable(send)
    return cycle is not None and _answer(cycle, response.status_code, response.lines, response.body)


class LinedResponse(Response):
    """A response made with its head's lines: ``lines``, its headers as uvicorn's ``send``
    writes them (``name: value\\r\\n`` each, lower-case names, the body's exact
    ``content-length``, no ``transfer-encoding`` or ``connection``; ``check_lines``), for
    ``respond_lines`` to write as they are. ``raw_headers`` (what Starlette's own way of
    sending it reads) are made from them when first asked for."""

    lines: bytes
    _raw: list[tuple[bytes, bytes]] | None = None

    @property
    def raw_headers(self) -> list[tuple[bytes, bytes]]:
        raw = self._raw
        if raw is None:
            raw = self._raw = [
                (name, value)
                for name, _, value in (
                    line.partition(b": ") for line in self.lines.split(b"\r\n")[:-1]
                )
            ]
        return raw

    @raw_headers.setter
    def raw_headers(self, value: list[tuple[bytes, bytes]]) -> None:
        self._raw = value


def check_lines(lines: bytes) -> bytes:
    """``lines`` if they are header lines as uvicorn's ``send`` writes them without reading
    any (no ``content-length``, ``transfer-encoding`` or ``connection``): what a
    ``LinedResponse`` may be given beside its ``content-length`` (check constant ones once,
    at import); ``ValueError`` otherwise."""
    if _LINES.fullmatch(lines) is None or any(
        line.partition(b": ")[0] in _SPECIAL for line in lines.split(b"\r\n")
    ):
        raise ValueError(f"not header lines uvicorn writes as they are: {lines!r}")
    return lines


def _answerable(send: Send) -> RequestResponseCycle | None:
    """The uvicorn cycle of ``send`` when an answer can be written to it at once."""
    cycle = getattr(send, "__self__", None)
    if type(cycle) is not RequestResponseCycle:
        return None
    transport: object = cycle.transport
    if (
        type(transport) is not OnePieceTransport
        or cycle.response_started
        or cycle.disconnected
        or cycle.flow.write_paused
        or cycle.scope["method"] == "HEAD"
    ):
        return None
    return cycle


def _answer(cycle: RequestResponseCycle, status: int, own: bytes, body: bytes | memoryview) -> bool:
    """The answer written to ``cycle``'s ``OnePieceTransport``: ``own``, its header lines,
    after uvicorn's defaults; False (nothing done) when those cannot be written so."""
    defaults = _default_lines(cycle.default_headers)
    if defaults is None:
        return False
    transport = cycle.transport
    assert isinstance(transport, OnePieceTransport)
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
    keep_alive = cycle.keep_alive
    cycle.response_started = True
    cycle.waiting_for_100_continue = False
    cycle.chunked_encoding = False
    cycle.expected_content_length = 0
    transport.write_now(
        b"".join(
            (
                STATUS_LINE[status],
                defaults,
                own,
                b"\r\n" if keep_alive else b"connection: close\r\n\r\n",
                body,
            )
        )
    )
    cycle.response_complete = True
    cycle.message_event.set()
    if not keep_alive:
        transport.close()
    cycle.on_response()
    return True


# Header lines as uvicorn's ``send`` writes them, each name and value one it accepts
# (``HEADER_RE`` finds no character of the name, ``HEADER_VALUE_RE`` none of the value):
# the whole block checked in one match.
_LINES: Final = re.compile(
    rb'(?:[^\x00-\x20\x7f()<>@,;:\[\]={}\\"]+: [^\x00-\x08\x0a-\x1f\x7f]*\r\n)*'
)
# Headers uvicorn's ``send`` reads as well as writes.
_SPECIAL: Final = frozenset({b"content-length", b"transfer-encoding", b"connection"})
# uvicorn's default headers (a new list each second, for its date) and their lines: None
# when one of them is special or refused.
_defaults: tuple[object, bytes | None] = (None, None)


def _default_lines(headers: list[tuple[bytes, bytes]]) -> bytes | None:
    global _defaults
    cached = _defaults
    if cached[0] is headers:
        return cached[1]
    lines: bytes | None = b"".join(b"%s: %s\r\n" % (name.lower(), value) for name, value in headers)
    if (
        any(name.lower() in _SPECIAL for name, _ in headers)
        or _LINES.fullmatch(lines or b"") is None
    ):
        lines = None
    _defaults = (headers, lines)
    return lines


def _one_piece(transport: object) -> bool:
    return type(transport) is OnePieceTransport
