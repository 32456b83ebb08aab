"""When a running job's progress reaches Redis: a slow call shows within the worker's flush
bound, a fast job writes its progress only with the commit (no ``write`` script).

Through the HTTP API with an embedded worker, a real redis-server whose ``MONITOR`` counts
the scripts, and a simulator that takes 300 ms per call (3 s for a scripted ``slow`` one).
"""

from __future__ import annotations

import hashlib
from collections.abc import AsyncIterator, Iterator
from typing import Any

import httpx
import pytest

from app.providers.config import ModelConfig, ProviderConfig, ProvidersConfig
from app.store.scripts import script_source
from reprompt_sim.server import SimConfig, serve_in_background
from tests.monitor import monitor, script_runs
from tests.service import KEYS, StartApi, api_keys, scripted
from tests.waiting import until

LATENCY_MS = 300  # every call: well past the old 0.1 s flush, well within FLUSH_AFTER_S
SLOW_S = 3.0  # a scripted "slow" call: long enough to be seen while it runs
WRITE_SHA = hashlib.sha1(script_source("write").encode()).hexdigest()
COMPLETE_SHA = hashlib.sha1(script_source("complete").encode()).hexdigest()


@pytest.fixture(scope="module")
def latent_providers() -> Iterator[ProvidersConfig]:
    config = SimConfig(seed=5, latency_ms=LATENCY_MS, slow_ms=SLOW_S * 1000 - LATENCY_MS)
    with serve_in_background(config) as url:
        yield ProvidersConfig(
            default="sim-model",
            providers={"sim": ProviderConfig(kind="openai", base_url=f"{url}/v1")},
            models={"sim-model": ModelConfig(provider="sim", structured="prompt")},
        )


@pytest.fixture
async def http(start_api: StartApi, latent_providers: ProvidersConfig) -> AsyncIterator[Any]:
    url = start_api(embedded_worker=True, providers_config=latent_providers, api_keys=api_keys())
    headers = {"authorization": f"Bearer {KEYS['alice']}"}
    async with httpx.AsyncClient(base_url=url, headers=headers, timeout=30.0) as client:
        yield client


async def test_a_fast_job_writes_no_progress_only_its_commit(
    http: httpx.AsyncClient, redis_url: str
) -> None:
    with monitor(redis_url) as lines:
        created = await http.post("/v1/jobs", json=scripted("Capital of Peru", ["ok"]))
        job_id = created.json()["id"]
        job = (await http.get(f"/v1/jobs/{job_id}", params={"waitMs": 10_000})).json()
    assert job["status"] == "succeeded"
    # the turn record and its events went with the commit
    assert len(job["turns"]) == 1
    assert script_runs(lines, COMPLETE_SHA, job_id) == 1
    assert script_runs(lines, WRITE_SHA, job_id) == 0


async def test_a_slow_call_shows_its_progress_within_the_flush_bound(
    http: httpx.AsyncClient, redis_url: str
) -> None:
    with monitor(redis_url) as lines:
        created = await http.post("/v1/jobs", json=scripted("Capital of Chile", ["slow", "ok"]))
        job_id = created.json()["id"]

        async def moved() -> dict[str, Any] | None:
            job: dict[str, Any] = (await http.get(f"/v1/jobs/{job_id}")).json()
            progress = job["result"].get("progress")
            # the submit shows phase "queued" until the worker writes
            done = job["status"] not in ("queued", "in_progress")
            return job if done or progress["phase"] != "queued" else None

        job = await until(moved, what="the job's progress to move")
        progress = job["result"].get("progress")
        # seen while the call is still in flight (within the flush bound, FLUSH_AFTER_S
        # after the call began), not with the commit
        assert job["status"] == "in_progress", job["status"]
        assert progress is not None
        assert progress["phase"] == "model-call"
        assert progress["turn"] == 1
        assert job["turns"] == []  # no call has ended yet
        # the event stream has the call's turn_start while it runs, too
        async with http.stream("GET", f"/v1/jobs/{job_id}/events") as stream:
            async for line in stream.aiter_lines():
                if line.startswith("event:"):
                    name = line.removeprefix("event:").strip()
                    if name == "turn_start":
                        break
        job = (await http.get(f"/v1/jobs/{job_id}", params={"waitMs": 10_000})).json()
    assert job["status"] == "succeeded"
    assert [t["outcome"] for t in job["turns"]] == ["success"]
    assert script_runs(lines, WRITE_SHA, job_id) == 1  # the call in flight, once
    assert script_runs(lines, COMPLETE_SHA, job_id) == 1
