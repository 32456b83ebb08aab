"""The API's fixtures, for every test (a plugin: tests/conftest.py's ``pytest_plugins``).

* ``api`` — the main service (session): auth on (tenants ``alice`` and ``bob``), an
  in-process worker, the simulator as provider, small caps so every cap is testable.
* ``alice`` / ``bob`` — ``httpx.Client``s with each tenant's key.
* ``start_api(**settings)`` — another instance on the same Redis, by default without a
  worker and with its own key prefix: jobs there stay queued (cancel, pagination, queue
  depth and queue-full tests).
* ``redis_url``, ``sim_url``, ``providers``, ``data_dir`` — what they run on (session). A
  folder whose tests need other ones defines its own in its conftest (tests/worker).

The helpers that go with them (``client``, ``scripted``, ``finished``, ``assert_problem``,
…) are plain functions in tests/service.py, imported where they are used.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from contextlib import ExitStack
from pathlib import Path
from typing import Any

import httpx
import pytest

from app.assembly import api_app as create_app
from app.providers.config import ModelConfig, ProviderConfig, ProvidersConfig, RouteConfig
from app.redis_server import EmbeddedRedis
from app.tracing import Tracing
from reprompt_sim.server import SimConfig, serve_in_background
from tests.service import KEYS, SLOW_MS, StartApi, api_keys, client, serve, settings_for


@pytest.fixture(scope="session")
def redis_url(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    with EmbeddedRedis(tmp_path_factory.mktemp("api-redis")) as server:
        yield server.url


@pytest.fixture(scope="session")
def sim_url() -> Iterator[str]:
    with serve_in_background(SimConfig(seed=11, slow_ms=SLOW_MS)) as url:
        yield url


@pytest.fixture(scope="session")
def providers(sim_url: str) -> ProvidersConfig:
    return ProvidersConfig(
        default="sim-model",
        providers={"sim": ProviderConfig(kind="openai", base_url=f"{sim_url}/v1")},
        models={"sim-model": ModelConfig(provider="sim", structured="prompt")},
        routes={"fast": RouteConfig(models=["sim-model"])},
    )


@pytest.fixture(scope="session")
def data_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("api-data")


@pytest.fixture(scope="session")
def api(redis_url: str, data_dir: Path, providers: ProvidersConfig) -> Iterator[str]:
    settings = settings_for(redis_url, data_dir, api_keys=api_keys())
    with serve(create_app(settings, embedded_worker=True, providers=providers)) as url:
        yield url


@pytest.fixture
def alice(api: str) -> Iterator[httpx.Client]:
    with client(api, KEYS["alice"]) as http:
        yield http


@pytest.fixture
def bob(api: str) -> Iterator[httpx.Client]:
    with client(api, KEYS["bob"]) as http:
        yield http


@pytest.fixture
def start_api(redis_url: str, data_dir: Path, providers: ProvidersConfig) -> Iterator[StartApi]:
    """Start another API instance; keyword arguments override its settings."""
    with ExitStack() as stack:

        def start(
            *,
            embedded_worker: bool = False,
            providers_config: ProvidersConfig | None = None,
            tracing: Tracing | None = None,
            **overrides: Any,
        ) -> str:
            overrides.setdefault("key_prefix", f"t{uuid.uuid4().hex[:12]}")
            url = overrides.pop("redis_url", redis_url)
            settings = settings_for(url, data_dir, **overrides)
            app = create_app(
                settings,
                embedded_worker=embedded_worker,
                providers=providers if providers_config is None else providers_config,
                tracing=tracing,
            )
            return stack.enter_context(serve(app))

        yield start
