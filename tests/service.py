"""The API over real HTTP on loopback: uvicorn in a thread, a real redis-server, the
simulator. Helpers for the tests that call it (tests/api, tests/abuse, tests/deploy, …);
the fixtures (``api``, ``alice``, ``bob``, ``start_api``, …) are tests/api/fixtures.py's,
shared with every test by tests/conftest.py.

    with client(api, KEYS["alice"]) as http:
        job = http.post("/v1/jobs", json=scripted("Name a city", ["ok"])).json()
        assert finished(http, job["id"])["status"] == "succeeded"
"""

from __future__ import annotations

import hashlib
import json
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import httpx
from fastapi import FastAPI

from app.loopback import serve_in_thread
from app.settings import Settings
from tests.waiting import sync_until

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
    "max_images": 3,  # #34's image caps
    "max_image_bytes": 4096,
    "max_images_bytes": 8192,
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


def client(base_url: str, key: str | None = None) -> httpx.Client:
    headers = {"authorization": f"Bearer {key}"} if key else {}
    return httpx.Client(base_url=base_url, headers=headers, timeout=30.0)


# ``start_api(**settings)`` (tests/api/fixtures.py): another API instance; its URL.
StartApi = Callable[..., str]


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


def finished(http: httpx.Client, job_id: str) -> dict[str, Any]:
    """The job once it has ended (long-polling)."""

    def ended() -> dict[str, Any] | None:
        response = http.get(f"/v1/jobs/{job_id}", params={"waitMs": 5000})
        assert response.status_code == 200, response.text
        job: dict[str, Any] = response.json()
        return job if job["status"] in ("succeeded", "failed", "cancelled") else None

    # A long-poll returns at once while the job waits for tools: look less often then.
    return sync_until(ended, what=f"job {job_id} to end", every=0.05)


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
