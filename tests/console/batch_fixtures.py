"""The console's batch fixtures (a plugin: tests/conftest.py's ``pytest_plugins``).

* ``batch_console`` — a service for the batch pages (session): the console's tenants and
  operator key, its own simulator, where model ``slow`` is a batch API whose batches take
  ten minutes (they run until cancelled) and ``plain`` has none (its batches run on the
  worker and end soon).
* ``batch_signed_in(key)`` — an ``httpx.Client`` with a console session of that key.
* ``hostile_batch_done`` — alice's ended batch whose metadata and failed items' diagnoses
  carry ``<script>`` and ``<img onerror>`` payloads.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterator
from contextlib import ExitStack
from pathlib import Path
from typing import Any

import httpx
import pytest

from app.assembly import api_app
from app.providers.config import ModelConfig, ProviderConfig, ProvidersConfig
from reprompt_sim.server import SimConfig, serve_in_background
from tests.batches.helpers import batch_body, ended
from tests.console.fixtures import SignedIn, console_settings
from tests.service import KEYS, client, serve
from tests.waiting import sync_until

SCRIPT = "<script>alert('xss-script')</script>"
IMG = "<img src=x onerror=\"alert('xss-img')\">"


def _providers(sim_url: str) -> ProvidersConfig:
    """``slow``: a batch API whose batches take ten minutes (they stay running until
    cancelled); ``plain``: no batch API, so its batches run on the worker and end soon."""
    return ProvidersConfig(
        default="plain",
        providers={
            "batchy": ProviderConfig(kind="openai", base_url=f"{sim_url}/v1"),
            "plain": ProviderConfig(kind="openai", base_url=f"{sim_url}/v1", batch_api=False),
        },
        models={
            name: ModelConfig(
                provider=provider,
                structured="prompt",
                input_usd_per_mtok=2.5,
                output_usd_per_mtok=10.0,
            )
            for name, provider in (("slow", "batchy"), ("plain", "plain"))
        },
    )


@pytest.fixture(scope="session")
def batch_console(redis_url: str, data_dir: Path) -> Iterator[str]:
    with serve_in_background(SimConfig(seed=32, batch_turnaround_ms=600_000)) as sim_url:
        settings = console_settings(redis_url, data_dir, batch_poll_ms=20)
        with serve(api_app(settings, embedded_worker=True, providers=_providers(sim_url))) as url:
            yield url


@pytest.fixture
def batch_signed_in(batch_console: str) -> Iterator[SignedIn]:
    with ExitStack() as stack:

        def signed(key: str) -> httpx.Client:
            http = stack.enter_context(httpx.Client(base_url=batch_console, timeout=30.0))
            assert http.post("/console/signin", data={"key": key}).status_code == 303
            return http

        yield signed


def hostile_batch(n: int, failing: int) -> dict[str, Any]:
    """``n`` items on the worker pool; the first ``failing`` are answered with a city the
    schema's enum refuses, given no re-ask: they fail with a diagnosis quoting it."""
    body = batch_body(n, model="plain", metadata={"src": IMG, "note": SCRIPT})
    del body["template"]["signature"]
    body["template"]["schema"] = {
        "type": "object",
        "properties": {
            "city": {"type": "string", "enum": ["Paris", "Lyon"]},
            "population": {"type": "integer"},
        },
        "required": ["city", "population"],
        "additionalProperties": False,
    }
    for i, item in enumerate(body["items"]):
        city = f"{SCRIPT} {IMG}" if i < failing else "Paris"
        directive = json.dumps({"script": ["ok"], "expect": {"city": city, "population": 7}})
        item["override"] = {
            "task": f"Name the city ({uuid.uuid4().hex[:8]})\n[[sim {directive}]]",
            "budget": {"maxTurns": 1, "returnRetries": 0},
        }
    return body


@pytest.fixture(scope="session")
def hostile_batch_done(batch_console: str) -> dict[str, Any]:
    with client(batch_console, KEYS["alice"]) as alice:
        created = alice.post("/v1/batches", json=hostile_batch(6, failing=2))
        assert created.status_code == 202, created.text
        batch = ended(alice, created.json()["id"])
    assert batch["status"] == "completed"
    assert batch["counts"] == {"pending": 0, "succeeded": 4, "failed": 2}
    return batch


def running_batch(service: str) -> str:
    with client(service, KEYS["alice"]) as alice:
        created = alice.post("/v1/batches", json=batch_body(4, model="slow"))
        assert created.status_code == 202, created.text
        batch_id: str = created.json()["id"]

        def sent() -> bool | None:
            return alice.get(f"/v1/batches/{batch_id}").json()["phase"] == "poll" or None

        sync_until(sent, what="round 1 at the provider")
    return batch_id
