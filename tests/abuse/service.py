"""Real parts for the abuse tests: the API on loopback over an embedded redis-server, with
the simulator as its one model, and the turn loop over a scripted in-process client.

    with api(tmp_path) as url:          # jobs are run by an in-process worker
        httpx.post(f"{url}/v1/jobs", json=spec)
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import httpx

from app.assembly import api_app
from app.loopback import serve_in_thread
from app.providers.config import ModelConfig, ProviderConfig, ProvidersConfig
from app.redis_server import EmbeddedRedis
from app.settings import Settings
from reprompt_sim.server import SimConfig, serve_in_background


def sim_providers(sim_url: str) -> ProvidersConfig:
    return ProvidersConfig(
        default="sim-model",
        providers={"sim": ProviderConfig(kind="openai", base_url=f"{sim_url}/v1")},
        models={"sim-model": ModelConfig(provider="sim", structured="prompt")},
    )


@contextmanager
def api(tmp: Path, **settings: Any) -> Iterator[str]:
    """The API (with an in-process worker) on a free loopback port; yields its URL."""
    with (
        EmbeddedRedis(tmp / "redis") as redis,
        serve_in_background(SimConfig(seed=5)) as sim_url,
    ):
        values: dict[str, Any] = {
            "redis_url": redis.url,
            "data_dir": tmp / "data",
            "key_prefix": f"abuse{uuid.uuid4().hex[:8]}",
            "drain_timeout_s": 1.0,
        }
        app = api_app(
            Settings(**(values | settings)),
            embedded_worker=True,
            providers=sim_providers(sim_url),
        )
        with serve_in_thread(
            app,
            name="abuse-api",
            lifespan="on",
            http="httptools",
            graceful_s=5,
            startup_timeout_s=60,
            shutdown_timeout_s=60,
        ) as url:
            yield url


def problem_field(response: httpx.Response) -> str:
    """The field a 422 problem names (its first ``errors`` entry)."""
    assert response.status_code == 422, response.text
    assert response.headers["content-type"].startswith("application/problem+json")
    body = response.json()
    assert body["code"] == "invalid-input"
    field: str = body["errors"][0]["field"]
    return field
