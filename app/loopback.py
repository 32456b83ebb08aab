"""An ASGI app served by uvicorn in a background thread on a free port: the simulator's
harness, the tests' API server and ``reprompt sim`` share this one way to run uvicorn.

    with serve_in_thread(app, name="reprompt-sim") as base_url:   # "http://127.0.0.1:41234"
        ...
"""

from __future__ import annotations

import asyncio
import socket
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any, Literal

import uvicorn


def uvicorn_server(
    app: Any,
    *,
    host: str,
    port: int,
    log_level: str = "warning",
    lifespan: Literal["on", "off"] = "off",
    graceful_s: int = 2,
    http: type[asyncio.Protocol] | Literal["auto", "h11", "httptools"] = "auto",
) -> uvicorn.Server:
    """A uvicorn server for ``app`` that leaves global logging and websockets alone.

    ``http``: its HTTP protocol (the API's is ``"httptools"``).
    """
    return uvicorn.Server(
        uvicorn.Config(
            app,
            host=host,
            port=port,
            log_level=log_level,
            log_config=None,
            access_log=False,
            lifespan=lifespan,
            ws="none",
            http=http,
            timeout_graceful_shutdown=graceful_s,
        )
    )


def _run(server: uvicorn.Server, sock: socket.socket) -> None:
    """``server.serve`` on a loop of this thread's own: uvloop's when it is installed, as
    uvicorn's ``loop="auto"`` would choose. Not ``server.run``: before uvicorn 0.36 it sets
    uvloop's policy for the whole process, and the main thread's ``get_event_loop()`` then
    fails (pytest-asyncio 0.24: "There is no current event loop")."""
    try:
        import uvloop

        factory: Any = uvloop.new_event_loop
    except ImportError:  # pragma: no cover - uvloop does not build on every platform
        factory = None
    with asyncio.Runner(loop_factory=factory) as runner:
        runner.run(server.serve(sockets=[sock]))


@contextmanager
def serve_in_thread(
    app: Any,
    *,
    name: str,
    host: str = "127.0.0.1",
    lifespan: Literal["on", "off"] = "off",
    graceful_s: int = 2,
    startup_timeout_s: float = 10.0,
    shutdown_timeout_s: float = 10.0,
    http: type[asyncio.Protocol] | Literal["auto", "h11", "httptools"] = "auto",
) -> Iterator[str]:
    """Serve ``app`` until the block ends; waits until it is up, and until it has stopped."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    # IPPROTO_TCP spelled out: asyncio only sets TCP_NODELAY on sockets that say TCP, and
    # without it every keep-alive response waits ~40 ms for a delayed ACK.
    sock = socket.socket(family, socket.SOCK_STREAM, socket.IPPROTO_TCP)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind((host, 0))
        port = sock.getsockname()[1]
        server = uvicorn_server(
            app, host=host, port=port, lifespan=lifespan, graceful_s=graceful_s, http=http
        )
        thread = threading.Thread(
            target=_run, args=(server, sock), name=f"{name}-{port}", daemon=True
        )
        thread.start()
        try:
            deadline = time.monotonic() + startup_timeout_s
            while not server.started:
                if not thread.is_alive() or time.monotonic() > deadline:
                    raise RuntimeError(f"{name} did not start on {host}:{port}")
                time.sleep(0.005)
            netloc = f"[{host}]" if family == socket.AF_INET6 else host
            yield f"http://{netloc}:{port}"
        finally:
            server.should_exit = True
            thread.join(timeout=shutdown_timeout_s)
            if thread.is_alive():
                raise RuntimeError(f"{name} did not shut down within {shutdown_timeout_s} s")
    finally:
        sock.close()
