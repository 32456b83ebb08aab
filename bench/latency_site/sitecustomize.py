"""Hop timestamps for bench/latency.py, in every process it starts (API, workers, simulator).

Active only when ``RP_LATENCY_TRACE`` names a directory (bench/latency.py puts this
directory first on ``PYTHONPATH`` and sets it): nothing of it runs in a normal process,
and nothing in ``app/`` knows of it. It wraps a few functions of the modules below as they
are imported and records ``(time.monotonic_ns(), label, detail)`` in memory
(CLOCK_MONOTONIC is system-wide, so timestamps compare across processes); SIGUSR1 (or the
process's exit) writes them to ``$RP_LATENCY_TRACE/<pid>.txt`` and starts afresh.
"""

from __future__ import annotations

import atexit
import importlib.abc
import importlib.machinery
import os
import signal
import socket
import sys
import time
from typing import Any

OUT = os.environ.get("RP_LATENCY_TRACE")
EVENTS: list[tuple[int, str, str]] = []
_now = time.monotonic_ns


def mark(label: str, detail: Any = "") -> None:
    EVENTS.append((_now(), label, str(detail)))


def dump(*_: Any) -> None:
    if not OUT:
        return
    events, EVENTS[:] = list(EVENTS), []
    role = _role()
    with open(os.path.join(OUT, f"{os.getpid()}.txt"), "a") as fh:
        for ns, label, detail in events:
            fh.write(f"{ns}\t{label}\t{detail}\t{role}\n")


def _role() -> str:
    argv = sys.argv
    if argv and argv[0].endswith("reprompt_sim/__main__.py"):
        return "sim"
    for name in ("api", "worker", "serve"):
        if name in argv[1:2]:
            return name
    return "bench"


def _wrap_async(owner: Any, name: str, label: str, detail: Any = None) -> None:
    original = getattr(owner, name)

    async def wrapped(*args: Any, **kwargs: Any) -> Any:
        mark(label + ".in", "" if detail is None else detail(args, kwargs, None))
        result = await original(*args, **kwargs)
        mark(label + ".out", "" if detail is None else detail(args, kwargs, result))
        return result

    wrapped.__wrapped__ = original  # type: ignore[attr-defined]
    setattr(owner, name, wrapped)


def _wrap_sync(owner: Any, name: str, label: str, detail: Any = None, after: bool = False) -> None:
    original = getattr(owner, name)

    def wrapped(*args: Any, **kwargs: Any) -> Any:
        if not after:
            mark(label, "" if detail is None else detail(args, kwargs))
        result = original(*args, **kwargs)
        if after:
            mark(label, "" if detail is None else detail(args, kwargs))
        return result

    wrapped.__wrapped__ = original  # type: ignore[attr-defined]
    setattr(owner, name, wrapped)


class _Tx:
    """A transport proxy recording each write: the API's and the simulator's responses."""

    __slots__ = ("_t",)

    def __init__(self, transport: Any) -> None:
        self._t = transport

    def write(self, data: Any) -> None:
        mark("http.write", len(data))
        self._t.write(data)

    def writelines(self, data: Any) -> None:
        mark("http.write", "lines")
        self._t.writelines(data)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._t, name)


def _nodelay(transport: Any) -> str:
    sock = transport.get_extra_info("socket")
    if sock is None:
        return "?"
    try:
        return str(sock.getsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY))
    except OSError:
        return "?"


def _patch_uvicorn(module: Any) -> None:
    proto = module.HttpToolsProtocol
    connection_made = proto.connection_made
    data_received = proto.data_received

    def made(self: Any, transport: Any) -> None:
        mark("http.conn", "nodelay=" + _nodelay(transport))
        connection_made(self, transport)
        self.transport = _Tx(self.transport)

    def received(self: Any, data: bytes) -> None:
        mark("http.rx", data[:4].decode("latin-1"))
        data_received(self, data)

    proto.connection_made = made
    proto.data_received = received


def _patch_batching(module: Any) -> None:
    line = getattr(module, "_Line", None)
    if line is None:  # a Batcher of redis-py pipelines (today's, and the first one)
        batcher = module.Batcher
        send = batcher._send

        async def sent(self: Any, batch: Any) -> None:
            mark("redis.send", " ".join(str(b[0][0]) for b in batch))
            await send(self, batch)
            mark("redis.recv", len(batch))

        batcher._send = sent
        return
    write = line.send

    def written(self: Any, command: Any, future: Any) -> None:
        mark("redis.send", command[0][:24])
        write(self, command, future)

    line.send = written
    _wrap_sync(line, "data_received", "redis.recv", lambda a, k: len(a[1]))


def _patch_hub(module: Any) -> None:
    cls = module.Hub
    dispatch = cls._dispatch

    def dispatched(self: Any, channel: str, data: Any) -> None:
        mark("hub.msg", channel.rsplit(":", 1)[-1][:12])
        dispatch(self, channel, data)
        mark("hub.done")

    cls._dispatch = dispatched


def _patch_jobs(module: Any) -> None:
    cls = module.JobStore
    _wrap_async(cls, "submit", "api.submit", lambda a, k, r: "" if r is None else r[0].id)
    _wrap_async(cls, "wait", "api.wait", lambda a, k, r: a[1] if r is None else r.status)
    _wrap_async(cls, "get", "api.get")


def _patch_leases(module: Any) -> None:
    cls = module.Leases
    heard = "_heard_own" if hasattr(cls, "_heard_own") else "_heard_handoff"
    _wrap_sync(cls, heard, "w.heard", lambda a, k: a[1])
    _wrap_async(cls, "handed", "w.handed", lambda a, k, r: "" if r is None else len(r))
    _wrap_async(cls, "claim", "w.claim", lambda a, k, r: "" if r is None else len(r))
    _wrap_async(cls, "complete", "w.complete", lambda a, k, r: a[1].job_id)
    _wrap_async(cls, "wait_for_work", "w.idle")


def _patch_claims(module: Any) -> None:
    _wrap_sync(module.Claims, "start", "w.start", lambda a, k: a[1].job_id)


def _patch_commit(module: Any) -> None:
    _wrap_async(module.Committer, "commit", "w.commit")


def _patch_running(module: Any) -> None:
    cls = module.Runner
    _wrap_async(cls, "process", "w.process")
    _wrap_async(cls, "execute", "w.execute")
    run_job = module.run_job

    async def traced(*args: Any, **kwargs: Any) -> Any:
        mark("loop.in")
        result = await run_job(*args, **kwargs)
        mark("loop.out")
        return result

    module.run_job = traced


def _patch_aiohttp_transport(module: Any) -> None:  # the provider client's transport
    cls = module.AiohttpTransport
    call = cls.handle_async_request

    async def traced(self: Any, request: Any) -> Any:
        mark("prov.call.in")
        response = await call(self, request)
        mark("prov.head")  # aiohttp returns once the reply's head is read
        return response

    traced.__wrapped__ = call  # type: ignore[attr-defined]
    cls.handle_async_request = traced


def _patch_aiohttp_request(module: Any) -> None:
    _wrap_async(module.ClientRequest, "send", "prov.write")


def _patch_anyio_stream(module: Any) -> None:  # the load generator's httpx
    cls = module.AnyIOStream
    _wrap_async(cls, "write", "cli.write")
    read = cls.read

    async def got(self: Any, max_bytes: int, timeout: float | None = None) -> bytes:  # noqa: ASYNC109
        data: bytes = await read(self, max_bytes, timeout)
        mark("cli.read", len(data))
        return data

    got.__wrapped__ = read  # type: ignore[attr-defined]
    cls.read = got


PATCHES = {
    "uvicorn.protocols.http.httptools_impl": _patch_uvicorn,
    "app.store.batching": _patch_batching,
    "app.store.hub": _patch_hub,
    "app.store.jobs": _patch_jobs,
    "app.store.leases": _patch_leases,
    "app.worker.claims": _patch_claims,
    "app.worker.running": _patch_running,
    "app.worker.commit": _patch_commit,
    "httpx_aiohttp.transport": _patch_aiohttp_transport,
    "aiohttp.client_reqrep": _patch_aiohttp_request,
    "httpcore._backends.anyio": _patch_anyio_stream,
}


class _Loader(importlib.abc.Loader):
    def __init__(self, inner: Any, patch: Any) -> None:
        self._inner = inner
        self._patch = patch

    def create_module(self, spec: Any) -> Any:
        return self._inner.create_module(spec)

    def exec_module(self, module: Any) -> None:
        self._inner.exec_module(module)
        self._patch(module)


class _Finder(importlib.abc.MetaPathFinder):
    def find_spec(self, name: str, path: Any, target: Any = None) -> Any:
        patch = PATCHES.get(name)
        if patch is None:
            return None
        spec = importlib.machinery.PathFinder.find_spec(name, path)
        if spec is not None and spec.loader is not None:
            spec.loader = _Loader(spec.loader, patch)
        return spec


if OUT:
    sys.meta_path.insert(0, _Finder())
    signal.signal(signal.SIGUSR1, dump)
    atexit.register(dump)
