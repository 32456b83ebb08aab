"""Liveness, readiness, the models listing, and a service with a dependency missing."""

from __future__ import annotations

import time

import httpx
import pytest

from app.providers import embedded
from app.providers.config import ProvidersConfig
from tests.service import StartApi, assert_problem, scripted


def test_healthz_says_ok(api: str) -> None:
    response = httpx.get(f"{api}/healthz")
    assert response.status_code == 200
    assert response.json() == {"status": "ok"}


def test_readyz_is_200_with_redis_and_a_provider(api: str) -> None:
    response = httpx.get(f"{api}/readyz")
    assert response.status_code == 200
    assert response.json() == {"status": "ready", "checks": {"redis": "ok", "provider": "ok"}}


def test_models_lists_models_routes_default_and_circuits(alice: httpx.Client) -> None:
    response = alice.get("/v1/models")
    assert response.status_code == 200
    body = response.json()
    created = body["data"][0]["created"]
    assert 0 < created <= time.time()  # when the service started
    assert body == {
        "object": "list",
        "data": [
            {
                "id": "sim-model",
                "object": "model",
                "created": created,
                "owned_by": "sim",
                "provider": "sim",
                "circuit": {"state": "closed", "failures": 0},
                "price": None,
                "route": None,
            },
            {
                "id": "fast",
                "object": "model",
                "created": created,
                "owned_by": "reprompt",
                "provider": None,
                "circuit": None,
                "price": None,
                "route": ["sim-model"],
            },
        ],
        "default": "sim-model",
        "models": [
            {
                "name": "sim-model",
                "provider": "sim",
                "circuit": {"state": "closed", "failures": 0},
                "price": None,
            }
        ],
        "routes": [{"name": "fast", "models": ["sim-model"]}],
    }


def test_a_job_may_name_a_route(alice: httpx.Client) -> None:
    response = alice.post("/v1/generate", json=scripted("Capital of Togo", ["ok"], model="fast"))
    assert response.status_code == 200
    assert response.json()["model"] == "fast"
    assert response.json()["result"]["execution"]["model"] == "sim-model"


def test_with_redis_down_readyz_and_submissions_are_503(start_api: StartApi) -> None:
    url = start_api(redis_url="redis://127.0.0.1:1/0")
    with httpx.Client(base_url=url, timeout=30) as http:
        assert http.get("/healthz").status_code == 200
        ready = assert_problem(http.get("/readyz"), 503, "not-ready")
        assert ready["checks"]["redis"] == "not reachable"
        response = http.post("/v1/jobs", json=scripted("Capital of Chad", ["ok"]))
        assert_problem(response, 503, "store-unavailable")
        assert response.headers["retry-after"]


def test_with_no_provider_the_api_starts_and_says_what_to_configure(
    start_api: StartApi, monkeypatch: pytest.MonkeyPatch
) -> None:
    # As on a machine without the local model: nothing configured, nothing to fall back to.
    monkeypatch.setattr(embedded, "local_available", lambda: False)
    url = start_api(embedded_worker=True, providers_config=ProvidersConfig())
    with httpx.Client(base_url=url, timeout=30) as http:
        assert http.get("/healthz").status_code == 200
        ready = assert_problem(http.get("/readyz"), 503, "llm-config")
        assert "OPENAI_API_KEY" in ready["detail"]
        assert ready["checks"]["redis"] == "ok"
        submitted = http.post("/v1/jobs", json=scripted("Capital of Fiji", ["ok"]))
        assert "OPENAI_API_KEY" in assert_problem(submitted, 503, "llm-config")["detail"]
        assert_problem(http.get("/v1/models"), 503, "llm-config")
        assert http.get("/metrics").status_code == 200
