"""A scripted receiver on loopback: real HTTP (or HTTPS), no mocking library.

::

    with Receiver() as receiver:                  # http://127.0.0.1:PORT
        receiver.script(Reply(503), Reply(200, b'{"ok": true}'))
        ...                                       # call receiver.url
        receiver.seen[0].headers["webhook-id"]    # what arrived

A reply may be a function of the request (``lambda seen: Reply(...)``), to answer with
what arrived or check a signature.
"""

from __future__ import annotations

import contextlib
import ssl
import threading
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from types import TracebackType
from typing import Any


@dataclass(frozen=True)
class Seen:
    path: str
    headers: dict[str, str]
    body: bytes


@dataclass(frozen=True)
class Reply:
    status: int = 200
    body: bytes = b"{}"
    headers: dict[str, str] = field(default_factory=dict)
    delay_s: float = 0.0
    # Send this many bytes after ``body`` with no Content-Length (the end is the close).
    stream_bytes: int = 0


Script = Reply | Callable[[Seen], Reply]


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    tls: ssl.SSLContext | None = None

    def finish_request(self, request: Any, client_address: Any) -> None:
        if self.tls is None:
            super().finish_request(request, client_address)
            return
        # The handshake runs in the connection's thread, never in the accepting one.
        wrapped = self.tls.wrap_socket(request, server_side=True)
        try:
            super().finish_request(wrapped, client_address)
        finally:
            wrapped.close()

    def handle_error(self, request: object, client_address: object) -> None:
        pass  # a client that gave up (timeouts, caps, refused certificates) is the test


class Receiver:
    """Answers POSTs with scripted replies in order; the last one repeats."""

    def __init__(self, *, host: str = "127.0.0.1", tls: ssl.SSLContext | None = None) -> None:
        self._replies: deque[Script] = deque([Reply(200, b"{}")])
        self.seen: list[Seen] = []
        self.streamed: list[int] = []  # bytes of each streamed reply sent before the hang-up
        self._lock = threading.Lock()
        self._server = _Server((host, 0), self._handler())
        self._server.tls = tls
        self._thread = threading.Thread(
            target=self._server.serve_forever, kwargs={"poll_interval": 0.01}, daemon=True
        )

    @property
    def port(self) -> int:
        return int(self._server.server_address[1])

    @property
    def url(self) -> str:
        scheme = "https" if self._server.tls else "http"
        return f"{scheme}://{self._server.server_address[0]!s}:{self.port}"

    def script(self, *replies: Script) -> None:
        with self._lock:
            self._replies = deque(replies)

    def _next(self, seen: Seen) -> Reply:
        with self._lock:
            self.seen.append(seen)
            script = self._replies.popleft() if len(self._replies) > 1 else self._replies[0]
        return script(seen) if callable(script) else script

    def __enter__(self) -> Receiver:
        self._thread.start()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self._server.shutdown()
        self._server.server_close()
        self._thread.join()

    def _handler(self) -> type[BaseHTTPRequestHandler]:
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def do_POST(self) -> None:
                length = int(self.headers.get("content-length") or 0)
                body = self.rfile.read(length)
                headers = {k.lower(): v for k, v in self.headers.items()}
                reply = receiver._next(Seen(self.path, headers, body))
                if reply.delay_s:
                    time.sleep(reply.delay_s)
                with contextlib.suppress(OSError):  # the client stopped reading (caps, timeouts)
                    self._send(reply)
                self.close_connection = True

            def _send(self, reply: Reply) -> None:
                self.send_response(reply.status)
                if not reply.stream_bytes:
                    self.send_header("content-length", str(len(reply.body)))
                self.send_header("connection", "close")
                for name, value in reply.headers.items():
                    self.send_header(name, value)
                self.end_headers()
                self.wfile.write(reply.body)
                chunk = b"x" * 65536
                left = reply.stream_bytes
                try:
                    while left > 0:
                        self.wfile.write(chunk[:left])
                        left -= len(chunk)
                finally:
                    if reply.stream_bytes:  # how much went out before the client hung up
                        receiver.streamed.append(reply.stream_bytes - max(left, 0))

            def log_message(self, format: str, *args: Any) -> None:
                pass

        return Handler
