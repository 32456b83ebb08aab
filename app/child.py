"""A child server process reprompt manages (redis-server, the llama.cpp server): the few
things every one needs, written once.

    port = free_loopback_port()
    process = spawn([binary, "--port", str(port)], log_path)   # own session, output to log
    spawn(args, log_path, die_with_parent=True)   # Linux: SIGTERM when we die, even SIGKILLed
    describe_exit(process.returncode)        # "exited with signal 11 (SIGSEGV)"
    log_tail(log_path, lines=5)              # what it said last
    terminate(process, grace_s=10)           # SIGTERM to its group, SIGKILL after grace_s

``ManagedServer`` is the shape both managed servers share: ``start()``/``stop()``, the
same in a thread (``astart``/``astop``), and ``with`` / ``async with``.
"""

from __future__ import annotations

import asyncio
import contextlib
import ctypes
import ctypes.util
import functools
import os
import signal
import socket
import subprocess
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from types import TracebackType
from typing import Final, Self

TAIL_BYTES: Final = 4000
_PR_SET_PDEATHSIG: Final = 1  # <linux/prctl.h>


@functools.cache
def _prctl() -> Callable[..., int] | None:
    """libc's ``prctl``, looked up before any fork (the child only calls it), or ``None``."""
    if not sys.platform.startswith("linux"):
        return None
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6", use_errno=True)
    except OSError:
        return None
    function: Callable[..., int] = libc.prctl
    return function


def _dies_with(parent: int, prctl: Callable[..., int]) -> Callable[[], None]:
    """A ``preexec_fn``: the child gets SIGTERM when its parent dies (even SIGKILLed).

    SIGTERM, not SIGKILL: redis-server shuts down cleanly on it (its AOF flushed). If the
    parent died before the call, the child stops itself at once.
    """

    def arm() -> None:
        prctl(_PR_SET_PDEATHSIG, signal.SIGTERM, 0, 0, 0)
        if os.getppid() != parent:
            os.kill(os.getpid(), signal.SIGTERM)

    return arm


def free_loopback_port() -> int:
    """A TCP port free on 127.0.0.1 right now (another process may take it before we bind)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def spawn(
    args: Sequence[str],
    log_path: Path,
    *,
    append: bool = False,
    pass_fds: Sequence[int] = (),
    env: dict[str, str] | None = None,
    stdin: bytes | None = None,
    umask: int = -1,
    die_with_parent: bool = False,
) -> subprocess.Popen[bytes]:
    """Start ``args`` in a session of its own, output to ``log_path``.

    Its own process group: a Ctrl-C meant for us does not reach it, and ``terminate``
    signals the group. ``stdin``: bytes written to the child's standard input, then closed
    (a secret passed so never shows in ``ps``); ``umask``: the child's, e.g. ``0o077``.
    ``die_with_parent`` (Linux): the child gets SIGTERM when the thread that started it
    ends, so a parent killed by SIGKILL or the OOM killer leaves no orphan behind; start
    such a child from a thread that lives as long as the process needs it.
    """
    prctl = _prctl() if die_with_parent else None
    log_path.parent.mkdir(parents=True, exist_ok=True)
    with log_path.open("ab" if append else "wb") as log:
        process = subprocess.Popen(
            list(args),
            stdin=subprocess.DEVNULL if stdin is None else subprocess.PIPE,
            stdout=log,
            stderr=subprocess.STDOUT,
            pass_fds=tuple(pass_fds),
            start_new_session=True,
            env=env,
            umask=umask,
            preexec_fn=None if prctl is None else _dies_with(os.getpid(), prctl),
        )
    if process.stdin is not None:
        with contextlib.suppress(BrokenPipeError), process.stdin:  # it may die at once
            process.stdin.write(stdin or b"")
    return process


def describe_exit(returncode: int) -> str:
    """``"exited with signal 11 (SIGSEGV)"`` or ``"exited with code 1"``.

    Popen reports death by a signal as a negative code; a shell in between reports it as
    128 + the signal, which is read the same way.
    """
    number = -returncode if returncode < 0 else returncode - 128 if returncode > 128 else 0
    if number:
        try:
            name = signal.Signals(number).name
        except ValueError:
            name = "unknown signal"
        return f"exited with signal {number} ({name})"
    return f"exited with code {returncode}"


def crashed(returncode: int) -> bool:
    """A death by a signal that means a fault in the program (not a polite stop)."""
    number = -returncode if returncode < 0 else returncode - 128 if returncode > 128 else 0
    return number in (signal.SIGSEGV, signal.SIGILL, signal.SIGBUS, signal.SIGFPE, signal.SIGABRT)


def log_tail(path: Path, *, lines: int | None = None, max_bytes: int = TAIL_BYTES) -> str:
    """The end of a log: its last ``max_bytes``, or only its last ``lines`` non-empty lines."""
    try:
        with path.open("rb") as log:
            log.seek(0, os.SEEK_END)
            log.seek(max(0, log.tell() - max_bytes))
            text = log.read().decode("utf-8", errors="replace").strip()
    except OSError as exc:
        return f"(log unreadable: {exc})"
    if lines is not None:
        text = "\n".join([line for line in text.splitlines() if line.strip()][-lines:])
    return text or "(empty log)"


def terminate(process: subprocess.Popen[bytes], grace_s: float) -> None:
    """SIGTERM to the process group, SIGKILL after ``grace_s``; reaps the process."""
    if process.poll() is not None:
        # Reaped: its pid (and so its group id) may already belong to someone else.
        return
    _signal_group(process, signal.SIGTERM)
    try:
        process.wait(grace_s)
    except subprocess.TimeoutExpired:
        _signal_group(process, signal.SIGKILL)
        process.wait()


def _signal_group(process: subprocess.Popen[bytes], sig: signal.Signals) -> None:
    with contextlib.suppress(ProcessLookupError):
        os.killpg(process.pid, sig)


class ManagedServer:
    """A child server with blocking ``start()``/``stop()``; the rest is derived here."""

    def start(self) -> object:
        raise NotImplementedError

    def stop(self) -> None:
        raise NotImplementedError

    async def astart(self) -> Self:
        """``start()`` in a worker thread: servers take seconds to come up."""
        await asyncio.to_thread(self.start)
        return self

    async def astop(self) -> None:
        await asyncio.to_thread(self.stop)

    def __enter__(self) -> Self:
        self.start()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()

    async def __aenter__(self) -> Self:
        return await self.astart()

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.astop()
