"""A provider's reply is read only up to a cap sized from the output-token limit (issue #10).

A 100 MB completion grew a worker to 1.2 GB, was stored in Redis and returned by GET. Now
a reply is streamed and dropped once it passes ``reply_cap(max_output_tokens)`` (or
declares more): the call fails ``llm-invalid-output`` with a short diagnosis, is not
retried, and nothing of the reply is kept. An error reply is read only for its message.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import httpx
import pytest

from app.core.turn.loop import Runtime, run_job
from app.core.wire import codes
from app.core.wire.errors import ProviderOversized, ProviderUnavailable
from app.core.wire.spec import JobSpec
from app.providers.config import ModelConfig, ProviderConfig, ProvidersConfig
from app.providers.http import make_client
from app.providers.router import build_router
from app.providers.transport import (
    BYTES_PER_TOKEN,
    CEILING_BYTES,
    ENVELOPE_BYTES,
    MAX_ERROR_BYTES,
    Edge,
    post_json,
    reply_cap,
)
from tests.waiting import sync_until

# Retry waits are computed and recorded, never slept (tests/abuse/conftest.py).
pytestmark = pytest.mark.usefixtures("no_sleeping")

HUGE = 100 * 1024 * 1024  # what the hostile provider would send, in bytes
CHUNK = 64 * 1024
# What the server may have written before we hung up: the cap plus socket buffers.
SENT_AT_MOST = 16 * 1024 * 1024


@dataclass
class Hostile:
    """What the server sends: ``status``, and whether it declares a Content-Length."""

    status: int = 200
    declare: bool = False
    requests: int = 0
    sent: list[int] = field(default_factory=list)


class HugeReplies:
    """A loopback provider whose every reply is ``HUGE`` bytes: a chat completion whose
    content never ends (or, for an error status, an endless HTML page)."""

    def __init__(self) -> None:
        self.script = Hostile()
        handler = self._handler()
        self._server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
        self._server.daemon_threads = True
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)

    @property
    def url(self) -> str:
        host, port = self._server.server_address[:2]
        return f"http://{host!s}:{port}"

    def __enter__(self) -> HugeReplies:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._server.shutdown()
        self._server.server_close()
        self._thread.join()

    def _handler(self) -> type[BaseHTTPRequestHandler]:
        outer = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def do_POST(self) -> None:
                self.rfile.read(int(self.headers.get("content-length") or 0))
                script = outer.script
                script.requests += 1
                ok = script.status < 400
                head = b'{"choices": [{"message": {"role": "assistant", "content": "' if ok else b""
                self.send_response(script.status)
                self.send_header("content-type", "application/json" if ok else "text/html")
                if script.declare:
                    self.send_header("content-length", str(HUGE))
                else:
                    self.send_header("transfer-encoding", "chunked")
                self.end_headers()
                sent = 0
                try:
                    for start in range(0, HUGE, CHUNK):
                        data = (head if start == 0 else b"") + b"a" * CHUNK
                        if script.declare:
                            self.wfile.write(data)
                        else:
                            self.wfile.write(b"%x\r\n%s\r\n" % (len(data), data))
                        sent += len(data)
                except OSError:
                    pass  # we hung up: that is the point
                script.sent.append(sent)
                self.close_connection = True

            def log_message(self, format: str, *args: Any) -> None:
                pass

        return Handler


def most_sent(server: HugeReplies) -> int:
    """The most one reply wrote before its reader hung up (waits for every handler)."""
    script = server.script
    sync_until(lambda: len(script.sent) >= script.requests, what="every reader to hang up")
    return max(script.sent)


@pytest.fixture
def hostile() -> Iterator[HugeReplies]:
    with HugeReplies() as server:
        yield server


def _config(url: str) -> ProvidersConfig:
    return ProvidersConfig(
        providers={"p": ProviderConfig(kind="openai", base_url=f"{url}/v1", max_attempts=3)},
        models={"m": ModelConfig(provider="p", structured="prompt")},
    )


JOB = JobSpec.model_validate(
    {"task": "Name a city.", "signature": "{city :string}", "budget": {"maxTurns": 1}}
)


@pytest.mark.parametrize("declare", [False, True], ids=["chunked", "declared"])
async def test_a_huge_completion_fails_the_call_fast_without_being_read_or_kept(
    hostile: HugeReplies, declare: bool
) -> None:
    hostile.script = Hostile(declare=declare)
    async with make_client(trust_env=False) as http:
        result = await run_job(JOB, Runtime(client=build_router(_config(hostile.url), http)))
    envelope = result.envelope
    assert envelope.status == "error"
    assert envelope.error == codes.LLM_INVALID_OUTPUT
    assert "sent a reply over" in (envelope.detail or "")
    # Not retried: one request, and the caller read no more than the cap.
    assert hostile.script.requests == 1
    assert most_sent(hostile) < SENT_AT_MOST
    # Nothing of it is kept: the record of the call is a short diagnosis.
    (turn,) = result.turns
    assert turn.error_code == codes.LLM_INVALID_OUTPUT
    assert len(json.dumps(result.envelope.model_dump(mode="json"))) < 4096
    assert len(turn.model_dump_json()) < 4096
    assert all(len(message.content) < 4096 for message in result.transcript)


async def test_a_huge_error_page_is_read_only_for_its_message(hostile: HugeReplies) -> None:
    hostile.script = Hostile(status=503)
    async with make_client(trust_env=False) as http:
        with pytest.raises(ProviderUnavailable) as failed:
            await post_json(
                http,
                f"{hostile.url}/v1/chat/completions",
                headers={},
                body={},
                timeout_s=30,
                edge=Edge("p", "m"),
            )
    assert len(failed.value.detail) < 1024
    assert most_sent(hostile) < MAX_ERROR_BYTES + SENT_AT_MOST


def test_the_cap_follows_the_output_token_limit_up_to_a_ceiling() -> None:
    assert reply_cap(1024) == ENVELOPE_BYTES + 1024 * BYTES_PER_TOKEN
    assert reply_cap(32_768) == 256 * 1024 + 2 * 1024 * 1024  # the default cap: 2.25 MiB
    assert reply_cap(10**9) == CEILING_BYTES


class SizedReply(BaseHTTPRequestHandler):
    """Answers a POST with a JSON body of exactly ``?size=`` bytes."""

    def do_POST(self) -> None:
        self.rfile.read(int(self.headers.get("content-length", "0")))
        size = int(self.path.partition("size=")[2])
        body = json.dumps({"pad": "x" * (size - len('{"pad": ""}'))}).encode()
        self.send_response(200)
        self.send_header("content-type", "application/json")
        self.send_header("content-length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, format: str, *args: Any) -> None:
        pass


@pytest.fixture
def sized() -> Iterator[str]:
    server = ThreadingHTTPServer(("127.0.0.1", 0), SizedReply)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    host, port = server.server_address[:2]
    yield f"http://{host!s}:{port}"
    server.shutdown()
    server.server_close()


async def test_a_reply_within_the_cap_is_read_and_one_byte_over_is_not(sized: str) -> None:
    limit = reply_cap(16)
    async with httpx.AsyncClient() as http:
        fits, _ = await post_json(
            http,
            f"{sized}/?size={limit}",
            headers={},
            body={},
            timeout_s=5,
            edge=Edge("p", "m"),
            max_bytes=limit,
        )
        assert len(fits["pad"]) > limit - 20
        with pytest.raises(ProviderOversized) as over:
            await post_json(
                http,
                f"{sized}/?size={limit + 1}",
                headers={},
                body={},
                timeout_s=5,
                edge=Edge("p", "m"),
                max_bytes=limit,
            )
    assert over.value.code == codes.LLM_INVALID_OUTPUT
    assert not over.value.retryable
