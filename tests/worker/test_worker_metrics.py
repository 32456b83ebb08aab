"""A worker's /metrics shows its circuit breakers (``reprompt_circuit_state``) and its heartbeats.

The workers make the model calls, so their breakers are the ones that open; an API process
(``reprompt api``) makes none and its breakers stay closed. Before this, only the API's
/metrics carried the gauge, and a dashboard of a deployment with separate workers showed
every circuit closed while the workers failed fast.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from app.child import free_loopback_port
from tests.both import Store
from tests.worker.harness import WorkerProcess, eventually, finished, job, scrape, submit

pytestmark = pytest.mark.slow

Spawn = Callable[..., WorkerProcess]
# The worker copies its breakers into the gauge every CIRCUIT_GAUGES_S (5 s).
GAUGE_S = 20.0


async def test_a_workers_metrics_show_a_closed_circuit_after_a_good_call(
    store: Store, spawn: Spawn
) -> None:
    port = free_loopback_port()
    await spawn(worker_metrics_port=port).ready()
    view = await finished(store, await submit(store, job(name="circuit-closed")))
    assert view.status == "succeeded"
    assert await _gauge(port, "openai/gpt-4o-mini", 0)  # closed (the sample is there)


async def _gauge(port: int, target: str, want: float) -> bool:
    """Whether the worker's gauge for ``target`` reads ``want`` within ``GAUGE_S``."""

    async def check() -> bool:
        value = await asyncio.to_thread(scrape, port, "reprompt_circuit_state", target=target)
        return value == want

    return await eventually(check, what=f"the circuit gauge of {target} at {want}", within=GAUGE_S)


async def test_a_workers_metrics_show_its_open_circuit(
    store: Store, spawn: Spawn, tmp_path: Path
) -> None:
    # A provider nobody listens on (connection refused), one failure opens its circuit.
    providers = tmp_path / "dead.toml"
    providers.write_text(
        f'[providers.dead]\nkind = "openai"\nbase_url = "http://127.0.0.1:{free_loopback_port()}/v1"\n'
        "max_attempts = 1\n\n"
        '[models.dead-model]\nprovider = "dead"\nstructured = "prompt"\n\n'
        "[circuit]\nfailure_threshold = 1\ncooldown_s = 600\n",
        encoding="utf-8",
    )
    port = free_loopback_port()
    env: dict[str, str | None] = {"REPROMPT_PROVIDERS": str(providers), "OPENAI_BASE_URL": None}
    await spawn(env=env, worker_metrics_port=port).ready()
    view = await finished(store, await submit(store, job(name="circuit-open")))
    assert view.status == "failed"
    assert view.result is not None
    assert view.result.error == "llm-unavailable"
    assert await _gauge(port, "dead/dead-model", 2)  # open


async def test_a_workers_metrics_show_its_heartbeats(store: Store, spawn: Spawn) -> None:
    # A slow answer (3 s) holds the job across several heartbeats (every 300 ms): each
    # renews its lease, and the loop's timestamp moves on while the job runs.
    port = free_loopback_port()
    await spawn(worker_metrics_port=port).ready()
    before = await asyncio.to_thread(
        scrape, port, "reprompt_lease_renewals_total", outcome="renewed"
    )
    assert before == 0
    started = time.time()
    view = await finished(store, await submit(store, job(["slow"], name="heartbeats")))
    assert view.status == "succeeded"
    renewed = await asyncio.to_thread(
        scrape, port, "reprompt_lease_renewals_total", outcome="renewed"
    )
    assert renewed is not None
    assert renewed >= 3
    for outcome in ("lost", "failed"):
        count = await asyncio.to_thread(
            scrape, port, "reprompt_lease_renewals_total", outcome=outcome
        )
        assert count == 0
    beat = await asyncio.to_thread(scrape, port, "reprompt_worker_heartbeat_timestamp_seconds")
    assert beat is not None
    assert beat >= started + 2
