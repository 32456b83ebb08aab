"""A scripted provider on loopback: real HTTP, recorded bodies, no mocking library.

::

    upstream.script(recorded("openai_429"), recorded("openai_success"))
    ...                                   # call something pointing at upstream.url
    upstream.seen[0].body["messages"]     # what we sent
"""

from __future__ import annotations

import json
import threading
import time
from collections import deque
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

from pydantic import SecretStr

from app.providers.config import ModelConfig, ProviderConfig, ProvidersConfig

RECORDED = Path(__file__).parent / "recorded"


@dataclass(frozen=True)
class Reply:
    status: int = 200
    body: Any = None
    headers: dict[str, str] = field(default_factory=dict)
    delay_s: float = 0.0


@dataclass(frozen=True)
class Seen:
    path: str
    headers: dict[str, str]
    body: Any


def recorded(name: str, **changes: Any) -> Reply:
    """A reply from ``recorded/<name>.json`` (``{"status", "headers", "body"}``)."""
    data = json.loads((RECORDED / f"{name}.json").read_text(encoding="utf-8"))
    reply = Reply(status=data["status"], body=data["body"], headers=data.get("headers", {}))
    return Reply(**{**reply.__dict__, **changes})


class _QuietServer(ThreadingHTTPServer):
    daemon_threads = True

    def handle_error(self, request: object, client_address: object) -> None:
        pass  # a client that timed out and left is part of the script


class Upstream:
    """Answers POSTs with scripted replies in order; the last one repeats."""

    def __init__(self) -> None:
        self._replies: deque[Reply] = deque([Reply(500, {"error": {"message": "unscripted"}})])
        self.seen: list[Seen] = []
        self._lock = threading.Lock()
        self._server = _QuietServer(("127.0.0.1", 0), self._handler())
        self._thread = threading.Thread(
            target=self._server.serve_forever, kwargs={"poll_interval": 0.01}, daemon=True
        )

    @property
    def url(self) -> str:
        host, port = self._server.server_address[:2]
        return f"http://{host!s}:{port}"

    def script(self, *replies: Reply) -> None:
        with self._lock:
            self._replies = deque(replies)

    def _next(self, seen: Seen) -> Reply:
        with self._lock:
            self.seen.append(seen)
            return self._replies.popleft() if len(self._replies) > 1 else self._replies[0]

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._server.shutdown()
        self._server.server_close()
        self._thread.join()

    def _handler(self) -> type[BaseHTTPRequestHandler]:
        upstream = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def do_POST(self) -> None:
                length = int(self.headers.get("content-length") or 0)
                raw = self.rfile.read(length)
                try:
                    body = json.loads(raw)
                except ValueError:
                    body = raw.decode("utf-8", "replace")
                headers = {k.lower(): v for k, v in self.headers.items()}
                reply = upstream._next(Seen(self.path, headers, body))
                if reply.delay_s:
                    time.sleep(reply.delay_s)
                if isinstance(reply.body, str):
                    payload = reply.body.encode()
                    content_type = "text/html"
                else:
                    payload = json.dumps(reply.body).encode()
                    content_type = "application/json"
                try:
                    self.send_response(reply.status)
                    self.send_header("content-type", content_type)
                    self.send_header("content-length", str(len(payload)))
                    self.send_header("connection", "close")
                    for name, value in reply.headers.items():
                        if name.lower() not in ("content-type", "content-length"):
                            self.send_header(name, value)
                    self.end_headers()
                    self.wfile.write(payload)
                except OSError:
                    pass  # the client gave up (timeout tests)
                self.close_connection = True

            def log_message(self, format: str, *args: Any) -> None:
                pass

        return Handler


TEST_KEY = "sk-test-Zx81QwErTyUiOp0987654321LkJhGf"


def one_model(
    url: str,
    *,
    kind: str = "openai",
    model: str = "m",
    key: str | None = TEST_KEY,
    max_attempts: int = 3,
    timeout_s: float = 5.0,
    **model_fields: Any,
) -> ProvidersConfig:
    """A config with provider ``p`` (at ``url``) and one model."""
    base = url + "/v1" if kind == "openai" else url
    return ProvidersConfig(
        providers={
            "p": ProviderConfig(
                kind=kind,  # type: ignore[arg-type]
                base_url=base,
                api_key=SecretStr(key) if key else None,
                max_attempts=max_attempts,
                timeout_s=timeout_s,
            )
        },
        models={model: ModelConfig(provider="p", **model_fields)},
    )
