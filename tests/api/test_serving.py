"""Each answer of the API leaves in one write (``app.api.serving.OnePieceHttp``).

uvicorn writes a response's head and its body apart: two system calls and two TCP
segments for every answer. The API's protocol hands on both in one write. Measured from
the client's side of a real loopback connection: the kernel's count of data segments the
socket received (``TCP_INFO``), for ``reprompt api`` as it starts from the command line,
and for the same app under uvicorn's own protocol as the control.
"""

from __future__ import annotations

import os
import socket
import struct
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from app.api.serving import OnePieceHttp
from app.assembly import api_app
from app.child import free_loopback_port
from app.loopback import serve_in_thread
from app.settings import Settings

ROOT = Path(__file__).resolve().parents[2]
STARTUP_S = 60.0
# struct tcp_info (linux/tcp.h): tcpi_data_segs_in, segments that carried data
_DATA_SEGS_IN = 152

pytestmark = pytest.mark.skipif(
    not sys.platform.startswith("linux"), reason="TCP_INFO's layout is Linux's"
)


def _data_segments(sock: socket.socket) -> int:
    raw = sock.getsockopt(socket.IPPROTO_TCP, socket.TCP_INFO, 256)
    count: int = struct.unpack_from("I", raw, _DATA_SEGS_IN)[0]
    return count


def _exchange(sock: socket.socket, request: bytes) -> tuple[bytes, bytes, int]:
    """Send ``request``; the answer's head and body, and the data segments they took."""
    before = _data_segments(sock)
    sock.sendall(request)
    data = b""
    while b"\r\n\r\n" not in data:
        data += _recv(sock)
    head, _, body = data.partition(b"\r\n\r\n")
    length = next(
        int(line.split(b":", 1)[1])
        for line in head.split(b"\r\n")
        if line.lower().startswith(b"content-length:")
    )
    while len(body) < length:
        body += _recv(sock)
    time.sleep(0.05)  # anything still in flight lands (and would be counted)
    return head, body, _data_segments(sock) - before


def _recv(sock: socket.socket) -> bytes:
    chunk = sock.recv(65536)
    assert chunk, "the server closed the connection mid-answer"
    return chunk


def _connect(port: int) -> socket.socket:
    sock = socket.create_connection(("127.0.0.1", port), timeout=10)
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    return sock


def _get(path: str) -> bytes:
    return f"GET {path} HTTP/1.1\r\nHost: x\r\n\r\n".encode()


@pytest.fixture
def reprompt_api(tmp_path: Path) -> Iterator[int]:
    """``reprompt api`` (its embedded redis-server, API keys on) on a free port."""
    port = free_loopback_port()
    env = {k: v for k, v in os.environ.items() if not k.startswith(("REPROMPT_", "REDIS_"))}
    env |= {
        "REPROMPT_DATA_DIR": str(tmp_path / "data"),
        "REPROMPT_API_KEYS": "ops:" + "0" * 64,
        "REPROMPT_MAX_BODY_BYTES": "2000",
    }
    log = tmp_path / "api.log"
    with log.open("wb") as out:
        proc = subprocess.Popen(
            [sys.executable, "-m", "app.cli", "api", "--port", str(port)],
            cwd=ROOT,
            env=env,
            stdout=out,
            stderr=subprocess.STDOUT,
        )
    try:
        deadline = time.monotonic() + STARTUP_S
        while True:
            assert proc.poll() is None, log.read_text()
            try:
                if httpx.get(f"http://127.0.0.1:{port}/healthz", timeout=2).status_code == 200:
                    break
            except httpx.TransportError:
                pass
            assert time.monotonic() < deadline, "reprompt api did not start"
            time.sleep(0.1)
        yield port
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(timeout=30)


def test_reprompt_api_answers_in_one_segment_each(reprompt_api: int) -> None:
    with _connect(reprompt_api) as sock:
        # keep-alive: several answers on one connection, each whole and in one piece
        head, body, segments = _exchange(sock, _get("/healthz"))
        assert head.startswith(b"HTTP/1.1 200 ")
        assert body == b'{"status":"ok"}'
        assert segments == 1
        head, body, segments = _exchange(sock, _get("/v1/jobs/job_x"))
        assert head.startswith(b"HTTP/1.1 401 ")
        assert b"content-type: application/problem+json" in head.lower()
        assert b'"code":"unauthorized"' in body
        assert segments == 1
        head, body, segments = _exchange(sock, _get("/healthz"))
        assert head.startswith(b"HTTP/1.1 200 ")
        assert segments == 1


def test_an_answer_that_closes_the_connection_is_sent_whole_first(reprompt_api: int) -> None:
    """413 with ``Connection: close``: what is held is written before the socket closes."""
    with _connect(reprompt_api) as sock:
        request = (
            b"POST /v1/jobs HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
            b"Content-Length: 5000\r\n\r\n"
        )
        head, body, segments = _exchange(sock, request)
        assert head.startswith(b"HTTP/1.1 413 ")
        assert b"connection: close" in head.lower()
        assert b'"code":"content-too-large"' in body
        assert segments == 1
        assert sock.recv(65536) == b""  # then the server closed it


@pytest.mark.parametrize(("http", "expected"), [(OnePieceHttp, 1), ("auto", 2)])
def test_uvicorns_own_protocol_takes_two_segments_the_apis_one(
    http: type[OnePieceHttp] | str, expected: int, tmp_path: Path
) -> None:
    """The control: the same app under uvicorn's own httptools protocol."""
    app = api_app(Settings(data_dir=tmp_path))
    with (
        serve_in_thread(app, name="serving", http=http) as url,  # type: ignore[arg-type]
        _connect(int(url.rsplit(":", 1)[1])) as sock,
    ):
        for _ in range(3):
            _, body, segments = _exchange(sock, _get("/healthz"))
            assert body == b'{"status":"ok"}'
            assert segments == expected
