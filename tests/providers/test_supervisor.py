"""The supervised local model: self-test at start, crashes named, restarts bounded.

A stand-in server (``fake_llama.py``, real processes on loopback) crashes on cue with a
real SIGSEGV; the real llama.cpp server is exercised in tests/e2e/test_local_crash.py.
"""

from __future__ import annotations

import asyncio
import logging
import os
import signal
import sys
from pathlib import Path

import httpx
import pytest

from app.core.turn.model import LLMRequest, Message
from app.core.wire.errors import ProviderConfigError, ProviderCrashed, ProviderUnavailable
from app.providers.config import ProvidersConfig
from app.providers.embedded import open_router
from app.providers.local import LocalModelServer
from app.providers.router import Router
from app.providers.supervisor import Sleep, Supervisor
from tests.waiting import sync_until, until

FAKE = Path(__file__).with_name("fake_llama.py")


async def no_sleep(_: float) -> None:
    return None


def supervisor(
    tmp_path: Path, mode: str, *, sleep: Sleep = no_sleep, max_restarts: int = 5
) -> Supervisor:
    model = tmp_path / "model.gguf"
    model.write_bytes(b"not a model")
    os.environ["FAKE_LLAMA"] = mode  # read by each child at its start
    server = LocalModelServer(
        tmp_path, model_path=model, program=(sys.executable, str(FAKE)), startup_timeout_s=20
    )
    return Supervisor(server, sleep=sleep, self_test_timeout_s=10, max_restarts=max_restarts)


@pytest.fixture(autouse=True)
def fake_mode(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("FAKE_LLAMA", "ok")  # restored after the test


def ask(text: str) -> LLMRequest:
    return LLMRequest(messages=(Message("user", text),), timeout_s=20)


async def test_a_crash_during_a_request_is_named_not_retried_and_the_server_comes_back(
    tmp_path: Path, http: httpx.AsyncClient, caplog: pytest.LogCaptureFixture
) -> None:
    local = supervisor(tmp_path, "crash-on:BOOM")
    async with open_router(http, data_dir=tmp_path, config=ProvidersConfig(), local=local) as r:
        assert r.problem() is None  # self-test passed before open_router yielded
        first_pid = local.server.pid
        caplog.set_level(logging.ERROR)
        with pytest.raises(ProviderCrashed) as crash:
            await r.complete(ask("BOOM"))
        err = crash.value
        assert err.code == "llm-unavailable"
        assert "exited with signal 11 (SIGSEGV)" in err.detail
        assert "general protection fault" in err.detail  # the server's last words
        assert err.transport_retries == 0  # a request that crashed the server is not resent

        await until(lambda: local.restarts == 1 and r.problem() is None, what="the restart")
        # One clear log line saying what happened and what to do.
        lines = [rec.getMessage() for rec in caplog.records if "SIGSEGV" in rec.getMessage()]
        assert len(lines) == 1
        assert "GGML_NATIVE=OFF" in lines[0]
        assert "\n" not in lines[0]
        assert local.server.pid != first_pid
        answer = await r.complete(ask("hello again"))
        assert answer.content == '{"ok": true}'


async def test_readiness_names_the_exit_while_the_server_restarts(
    tmp_path: Path, http: httpx.AsyncClient
) -> None:
    seen: list[str] = []
    looked = asyncio.Event()

    async def held(_: float) -> None:  # the restart's back-off lasts until the test has looked
        problem = local.problem()
        if problem:
            seen.append(problem)
        await looked.wait()

    local = supervisor(tmp_path, "ok", sleep=held)
    async with open_router(http, data_dir=tmp_path, config=ProvidersConfig(), local=local) as r:
        assert local.server.pid is not None
        os.kill(local.server.pid, signal.SIGKILL)
        await until(lambda: r.problem() is not None, what="readiness to name the exit")
        problem = r.problem() or ""
        assert "exited with signal 9 (SIGKILL)" in problem
        assert "restarting (restart 1 of at most 5)" in problem
        looked.set()
        await until(lambda: r.problem() is None, what="the server back")
        assert (await r.complete(ask("after the kill"))).content == '{"ok": true}'
    assert seen
    assert "SIGKILL" in seen[0]


async def test_a_build_that_crashes_on_its_self_test_stops_the_start_with_what_to_do(
    tmp_path: Path, http: httpx.AsyncClient
) -> None:
    local = supervisor(tmp_path, "crash-on-chat")
    with pytest.raises(ProviderConfigError) as failed:
        async with open_router(http, data_dir=tmp_path, config=ProvidersConfig(), local=local):
            pass
    detail = failed.value.detail
    assert "exited with signal 11 (SIGSEGV)" in detail
    assert "self-test" in detail
    assert 'CMAKE_ARGS="-DGGML_NATIVE=OFF"' in detail
    assert local.server.pid is None or not local.server.running  # nothing left running


async def test_restarts_are_bounded_then_readiness_says_it_gave_up(
    tmp_path: Path, http: httpx.AsyncClient
) -> None:
    local = supervisor(tmp_path, "die-after-first", max_restarts=2)
    async with open_router(http, data_dir=tmp_path, config=ProvidersConfig(), local=local) as r:
        await until(lambda: local.state == "failed", what="the supervisor to give up")
        assert local.restarts == 2
        problem = r.problem() or ""
        assert "gave up after 2 restarts" in problem
        assert "SIGSEGV" in problem
        with pytest.raises(ProviderUnavailable, match="gave up"):
            await r.complete(ask("anyone there?"))


def test_router_without_a_local_model_has_no_problem(http: httpx.AsyncClient) -> None:
    router = Router({}, {}, default=None, circuits=None, retrier=None)  # type: ignore[arg-type]
    assert router.problem() is None


def test_a_restart_does_not_mistake_a_stranger_on_the_old_port_for_the_model(
    tmp_path: Path,
) -> None:
    import http.server
    import threading

    server = supervisor(tmp_path, "ok").server
    server.start()
    try:
        old_port = server.port
        assert server.pid is not None
        os.kill(server.pid, signal.SIGKILL)
        sync_until(lambda: not server.running, what="the server to be gone")

        class Anything(http.server.BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                self.send_response(200)
                self.send_header("content-length", "2")
                self.end_headers()
                self.wfile.write(b"{}")

            def log_message(self, *args: object) -> None:
                pass

        stranger = http.server.HTTPServer(("127.0.0.1", old_port), Anything)
        threading.Thread(target=stranger.serve_forever, daemon=True).start()
        try:
            server.start()
            assert server.running
            assert server.port != old_port  # not fooled by the stranger's 200
        finally:
            stranger.shutdown()
            stranger.server_close()
    finally:
        server.stop()
