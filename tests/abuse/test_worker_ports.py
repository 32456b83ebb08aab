"""Several workers on one host each get a metrics port (issue #10).

A second ``reprompt worker`` on a host died because the first held metrics port 9101. A
worker now takes the first free port of ``REPROMPT_WORKER_METRICS_PORT`` and the next 31,
then any free port, and logs the one it bound.
"""

from __future__ import annotations

import os
import re
import socket
from collections.abc import Callable, Iterator
from pathlib import Path

import httpx
import pytest

from app import metrics
from app.assembly import METRICS_PORT_SPAN
from app.child import free_loopback_port
from app.redis_server import EmbeddedRedis
from tests.worker.harness import WorkerProcess

Spawn = Callable[[int], WorkerProcess]
# Two workers start in a few seconds; the bound is generous for a busy machine.
READY_S = 60.0


@pytest.fixture
def spawn(tmp_path: Path) -> Iterator[Spawn]:
    """``spawn(metrics_port)``: a ``reprompt worker`` on a private Redis; killed after."""
    started: list[WorkerProcess] = []
    with EmbeddedRedis(tmp_path / "redis") as redis:
        env = {
            k: v
            for k, v in os.environ.items()
            if not k.startswith(("REPROMPT_", "OPENAI_", "ANTHROPIC_", "REDIS_"))
        }
        env |= {
            "PYTHONUNBUFFERED": "1",
            "REPROMPT_REDIS_URL": redis.url,
            "REPROMPT_DATA_DIR": str(tmp_path / "data"),
            "OPENAI_BASE_URL": "http://127.0.0.1:9/v1",  # configured, never called here
        }

        def start(port: int) -> WorkerProcess:
            name = f"worker-{len(started) + 1}"
            extra = {"REPROMPT_WORKER_METRICS_PORT": str(port)}
            process = WorkerProcess(name, env | extra, tmp_path / f"{name}.log")
            started.append(process)
            return process

        try:
            yield start
        finally:
            for process in started:
                process.kill()


def _metrics_port(worker: WorkerProcess) -> int:
    found = re.search(r"metrics on http://127\.0\.0\.1:(\d+)/metrics", worker.log())
    assert found, worker.log()
    return int(found.group(1))


def _scrape(port: int) -> str:
    response = httpx.get(f"http://127.0.0.1:{port}/metrics", timeout=5)
    assert response.status_code == 200
    return response.text


async def test_two_workers_on_one_host_both_start_and_both_serve_metrics(spawn: Spawn) -> None:
    port = free_loopback_port()
    first = await spawn(port).ready()
    second = spawn(port)
    await second.wait_log(r"worker \S+ started", within=READY_S)
    assert first.proc.poll() is None
    assert second.proc.poll() is None
    assert _metrics_port(first) == port
    other = _metrics_port(second)
    assert other != port
    assert second.logged(rf"\({port} was taken\)")
    for bound in (port, other):
        assert "reprompt_jobs_in_progress" in _scrape(bound)


def test_a_taken_port_moves_to_the_next_free_one() -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        bound, stop = metrics.serve("127.0.0.1", port, span=METRICS_PORT_SPAN)
        try:
            assert bound != port
            assert "reprompt_" in _scrape(bound)
        finally:
            stop()


def test_with_every_port_of_the_span_taken_any_free_port_is_used() -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        bound, stop = metrics.serve("127.0.0.1", port, span=1)
        try:
            assert bound not in (0, port)
            assert "reprompt_" in _scrape(bound)
        finally:
            stop()


def test_an_address_that_cannot_be_bound_is_still_an_error() -> None:
    with pytest.raises(OSError, match=r"(?i)assign"):  # TEST-NET-1 is not this machine's
        metrics.serve("192.0.2.1", free_loopback_port(), span=METRICS_PORT_SPAN)
