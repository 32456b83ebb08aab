"""A batch survives its worker SIGKILLed mid-round and its API restarted mid-round: every
item ends once, and each round is one provider batch (a resubmission after a crash finds
the batch the round's token made)."""

from __future__ import annotations

import os
import signal
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from app.assembly import api_app
from reprompt_sim.server import SimConfig, serve_in_background
from tests.batches.fixtures import FLAKY, batch_settings
from tests.batches.helpers import batch_body, ended, results, sim_batches
from tests.service import KEYS, client, serve
from tests.worker.harness import WorkerProcess

pytestmark = pytest.mark.slow

Spawn = Callable[[], WorkerProcess]


@pytest.fixture
def slow_sim() -> Iterator[str]:
    """A provider whose batches take a while: the kills land while a round is out."""
    config = SimConfig(seed=31, failure_rates=FLAKY, fix_probability=0.85, batch_turnaround_ms=1500)
    with serve_in_background(config) as url:
        yield url


@pytest.fixture
def spawn(batch_redis: str, slow_sim: str, tmp_path: Path) -> Iterator[Callable[..., Any]]:
    providers = tmp_path / "providers.yaml"
    providers.write_text(
        yaml.safe_dump(
            {
                "default": "oa",
                "providers": {"openai-sim": {"kind": "openai", "base_url": f"{slow_sim}/v1"}},
                "models": {
                    "oa": {
                        "provider": "openai-sim",
                        "structured": "prompt",
                        "input_usd_per_mtok": 2.0,
                        "output_usd_per_mtok": 8.0,
                    }
                },
            }
        )
    )
    prefix = f"d{uuid.uuid4().hex[:8]}"
    base = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith(("REPROMPT_", "OPENAI_", "ANTHROPIC_", "REDIS_"))
    }
    base |= {
        "PYTHONUNBUFFERED": "1",
        "REPROMPT_REDIS_URL": batch_redis,
        "REPROMPT_KEY_PREFIX": prefix,
        "REPROMPT_DATA_DIR": str(tmp_path / "data"),
        "REPROMPT_PROVIDERS": str(providers),
        "REPROMPT_LEASE_MS": "1500",
        "REPROMPT_HEARTBEAT_MS": "300",
        "REPROMPT_BATCH_POLL_MS": "20",
        "REPROMPT_BATCH_LEASE_MS": "1000",
        "REPROMPT_WORKER_METRICS_PORT": "0",
    }
    started: list[WorkerProcess] = []

    def start() -> WorkerProcess:
        name = f"worker-{len(started) + 1}"
        process = WorkerProcess(name, base, tmp_path / f"{name}.log")
        started.append(process)
        return process

    start.prefix = prefix  # type: ignore[attr-defined]
    start.providers = providers  # type: ignore[attr-defined]
    yield start
    for process in started:
        process.kill()


async def test_a_worker_killed_mid_round_and_an_api_restarted_lose_nothing(
    spawn: Any, batch_redis: str, slow_sim: str, tmp_path: Path
) -> None:
    from app.providers.config import load_providers

    providers = load_providers({}, path=str(spawn.providers))
    settings = batch_settings(batch_redis, tmp_path / "api", key_prefix=spawn.prefix)
    first = await spawn().ready()
    with serve(api_app(settings, providers=providers)) as url, client(url, KEYS["alice"]) as http:
        created = http.post("/v1/batches", json=batch_body(60, model="oa", reask="batch"))
        assert created.status_code == 202, created.text
        batch_id = created.json()["id"]
        # Killed as it submits round 1: before, during or after the provider's create.
        await first.wait_log(rf"batch {batch_id}: round 1 submitting")
        first.send(signal.SIGKILL)
        assert await first.exit_code() == -signal.SIGKILL
    # The API is gone mid-round; the next worker takes the batch up when the lease ends.
    second = spawn()
    # Round 1 sent again under its token (the first died before storing the provider's
    # batch id), or polled and round 2 on its way: killed while a round is out.
    await second.wait_log(rf"batch {batch_id}: round (1 sent|2 submitting)")
    second.send(signal.SIGKILL)
    assert await second.exit_code() == -signal.SIGKILL
    third = spawn()
    with serve(api_app(settings, providers=providers)) as url, client(url, KEYS["alice"]) as http:
        batch = ended(http, batch_id)
        lines = results(http, batch_id)
    assert third.logged(rf"batch {batch_id} completed")
    assert batch["counts"]["pending"] == 0
    assert batch["counts"]["succeeded"] + batch["counts"]["failed"] == 60
    assert [line["customId"] for line in lines] == [f"doc-{i}" for i in range(60)]
    assert all(line["status"] in ("succeeded", "failed") for line in lines)
    made = [
        b
        for b in sim_batches(slow_sim)["batches"]
        if (b["idempotencyKey"] or "").startswith(f"{batch_id}-r")
    ]
    keys = [b["idempotencyKey"] for b in made]
    assert len(keys) == len(set(keys)) == batch["round"]  # one provider batch per round
