"""The API over real HTTP on loopback: uvicorn in a thread, a real redis-server, the
simulator. Fixtures and helpers for tests/api and tests/abuse.

Fixtures:

* ``api`` — the main service (session): auth on (tenants ``alice`` and ``bob``), an
  in-process worker, the simulator as provider, small caps so every cap is testable.
* ``alice`` / ``bob`` — ``httpx.Client``s with each tenant's key.
* ``start_api(**settings)`` — another instance on the same Redis, by default without a
  worker and with its own key prefix: jobs there stay queued (cancel, pagination, queue
  depth and queue-full tests).
"""

from __future__ import annotations

import hashlib
import json
import time
import uuid
from collections.abc import Callable, Iterator
from contextlib import ExitStack, contextmanager
from pathlib import Path
from typing import Any

import httpx
import pytest
from fastapi import FastAPI

from app.assembly import api_app as create_app
from app.loopback import serve_in_thread
from app.providers.config import ModelConfig, ProviderConfig, ProvidersConfig, RouteConfig
from app.redis_server import EmbeddedRedis
from app.settings import Settings
from app.tracing import Tracing
from reprompt_sim.server import SimConfig, serve_in_background

KEYS = {"alice": "alice-secret-key", "bob": "bob-secret-key"}
SLOW_MS = 2000  # what a "slow" script entry adds to a simulated call

# Small caps so that each one can be crossed with a small request.
CAPS: dict[str, Any] = {
    "max_body_bytes": 32_768,
    "max_schema_bytes": 2048,
    "max_schema_depth": 8,
    "max_task_chars": 4000,
    "max_turns": 5,
    "max_return_retries": 4,
    "max_deadline_ms": 60_000,
    "max_output_tokens": 4096,
    "max_wait_ms": 10_000,
}


@contextmanager
def serve(app: FastAPI, *, startup_timeout_s: float = 60.0) -> Iterator[str]:
    """Run ``app`` (lifespan included) on a free loopback port in a thread; yields its URL."""
    with serve_in_thread(
        app,
        name="reprompt-api",
        lifespan="on",
        http="httptools",
        graceful_s=5,
        startup_timeout_s=startup_timeout_s,
        shutdown_timeout_s=60,
    ) as url:
        yield url


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


def settings_for(redis_url: str, data_dir: Path, **overrides: Any) -> Settings:
    values: dict[str, Any] = {
        "redis_url": redis_url,
        "data_dir": data_dir,
        "key_prefix": "api",
        "lease_ms": 5000,
        "heartbeat_ms": 1000,
        "reap_interval_ms": 1000,
        "drain_timeout_s": 1.0,
        "worker_concurrency": 8,
        **CAPS,
    }
    return Settings(**(values | overrides))


def api_keys() -> list[str]:
    return [f"{tenant}:{hashlib.sha256(key.encode()).hexdigest()}" for tenant, key in KEYS.items()]


@pytest.fixture(scope="session")
def api(redis_url: str, data_dir: Path, providers: ProvidersConfig) -> Iterator[str]:
    settings = settings_for(redis_url, data_dir, api_keys=api_keys())
    with serve(create_app(settings, embedded_worker=True, providers=providers)) as url:
        yield url


def client(base_url: str, key: str | None = None) -> httpx.Client:
    headers = {"authorization": f"Bearer {key}"} if key else {}
    return httpx.Client(base_url=base_url, headers=headers, timeout=30.0)


@pytest.fixture
def alice(api: str) -> Iterator[httpx.Client]:
    with client(api, KEYS["alice"]) as http:
        yield http


@pytest.fixture
def bob(api: str) -> Iterator[httpx.Client]:
    with client(api, KEYS["bob"]) as http:
        yield http


StartApi = Callable[..., str]


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


# -- helpers -------------------------------------------------------------------------------


def scripted(task: str, script: list[str], **extra: Any) -> dict[str, Any]:
    """A job the simulator answers by ``script``; ``task`` must be unique to the test."""
    directive = json.dumps({"script": script, "counter": "requests"})
    return {
        "task": f"{task} ({uuid.uuid4().hex[:8]})\n[[sim {directive}]]",
        "signature": "{city :string, population :int}",
        "budget": {"maxTurns": 1, "returnRetries": 3},
        **extra,
    }


def finished(http: httpx.Client, job_id: str, timeout_s: float = 30.0) -> dict[str, Any]:
    """The job once it has ended (long-polling)."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        response = http.get(f"/v1/jobs/{job_id}", params={"waitMs": 5000})
        assert response.status_code == 200, response.text
        job: dict[str, Any] = response.json()
        if job["status"] in ("succeeded", "failed", "cancelled"):
            return job
        if job["status"] == "requires_action":
            time.sleep(0.2)  # a long-poll returns at once while the job waits for tools
    raise AssertionError(f"job {job_id} did not finish in {timeout_s}s")


def assert_problem(
    response: httpx.Response, status: int, code: str, field: str | None = None
) -> dict[str, Any]:
    """``response`` is problem+json with ``status`` and ``code`` (and names ``field``)."""
    assert response.status_code == status, response.text
    assert response.headers["content-type"].startswith("application/problem+json")
    body: dict[str, Any] = response.json()
    assert body["status"] == status
    assert body["code"] == code
    assert body["type"] == f"https://reprompt.dev/problems/{code}"
    assert body["title"]
    assert body["detail"]
    assert body["instance"] == response.request.url.path
    if field is not None:
        fields = [error["field"] for error in body.get("errors", [])]
        assert field in fields, body
    assert "Traceback" not in response.text
    return body
