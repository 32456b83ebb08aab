"""The batch API's fixtures, for every test (a plugin: tests/conftest.py's
``pytest_plugins``): a real redis-server, the API with its in-process worker (and batch
runner), the simulator's OpenAI and Anthropic batch APIs with a flaky model; ``batch_alice``
is a client of it (tests/batches calls it ``alice``)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from app.assembly import api_app
from app.providers.config import ModelConfig, ProviderConfig, ProvidersConfig
from app.redis_server import EmbeddedRedis
from reprompt_sim.server import SimConfig, serve_in_background
from tests.service import KEYS, api_keys, client, serve, settings_for

FLAKY: dict[str, float] = {"broken_json": 0.15, "wrong_type": 0.15, "missing_field": 0.1}


def providers_for(sim_url: str) -> ProvidersConfig:
    return ProvidersConfig(
        default="oa",
        providers={
            "openai-sim": ProviderConfig(kind="openai", base_url=f"{sim_url}/v1"),
            "anthropic-sim": ProviderConfig(kind="anthropic", base_url=sim_url),
            "plain": ProviderConfig(kind="openai", base_url=f"{sim_url}/v1", batch_api=False),
        },
        models={
            "oa": ModelConfig(
                provider="openai-sim",
                structured="prompt",
                input_usd_per_mtok=2.0,
                output_usd_per_mtok=8.0,
            ),
            "an": ModelConfig(
                provider="anthropic-sim",
                structured="prompt",
                input_usd_per_mtok=2.0,
                output_usd_per_mtok=8.0,
            ),
            "plain": ModelConfig(
                provider="plain",
                structured="prompt",
                input_usd_per_mtok=2.0,
                output_usd_per_mtok=8.0,
            ),
        },
    )


@pytest.fixture(scope="session")
def batch_redis(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    with EmbeddedRedis(tmp_path_factory.mktemp("batch-redis")) as server:
        yield server.url


@pytest.fixture(scope="session")
def batch_sim() -> Iterator[str]:
    config = SimConfig(seed=30, failure_rates=FLAKY, fix_probability=0.85)
    with serve_in_background(config) as url:
        yield url


@pytest.fixture(scope="session")
def batch_data(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("batch-data")


def batch_settings(redis_url: str, data_dir: Path, **overrides: Any) -> Any:
    values: dict[str, Any] = {
        "key_prefix": "bt",
        "api_keys": api_keys(),
        "batch_poll_ms": 20,
        "batch_max_items": 1000,
        "batch_max_bytes": 2_000_000,
        "batch_max_open_per_tenant": 3,
        **overrides,
    }
    return settings_for(redis_url, data_dir, **values)


@pytest.fixture(scope="session")
def batch_api(batch_redis: str, batch_sim: str, batch_data: Path) -> Iterator[str]:
    # Megabyte bodies one after another (tests/abuse/test_batch_input.py): each counts once
    # per 16 KiB against the tenant's rate, which is not what these tests are about.
    settings = batch_settings(batch_redis, batch_data).model_copy(update={"rate_per_tenant": 0})
    app = api_app(settings, embedded_worker=True, providers=providers_for(batch_sim))
    with serve(app) as url:
        yield url


@pytest.fixture
def batch_alice(batch_api: str) -> Iterator[httpx.Client]:
    with client(batch_api, KEYS["alice"]) as http:
        yield http
