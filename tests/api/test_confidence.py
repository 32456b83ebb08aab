"""The envelope's confidence through the API: from the provider's token log-probabilities
(the simulator gives them when asked), and absent where no honest source exists."""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from app.assembly import api_app as create_app
from app.providers.config import ModelConfig, ProviderConfig, ProvidersConfig
from tests.service import KEYS, api_keys, client, finished, serve, settings_for


@pytest.fixture(scope="module")
def http(
    redis_url: str, sim_url: str, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[httpx.Client]:
    providers = ProvidersConfig(
        default="plain",
        providers={"sim": ProviderConfig(kind="openai", base_url=f"{sim_url}/v1")},
        models={
            "plain": ModelConfig(provider="sim", structured="prompt"),
            "sure": ModelConfig(provider="sim", structured="prompt", logprobs=True),
        },
    )
    data: Path = tmp_path_factory.mktemp("confidence")
    settings = settings_for(redis_url, data, api_keys=api_keys(), key_prefix="confidence")
    with (
        serve(create_app(settings, embedded_worker=True, providers=providers)) as url,
        client(url, KEYS["alice"]) as http,
    ):
        yield http


def job(script: list[str], **extra: Any) -> dict[str, Any]:
    directive = json.dumps({"script": script, "counter": "requests", "expect": {"city": "Lyon"}})
    return {
        "task": f"Name the city ({uuid.uuid4().hex[:8]})\n[[sim {directive}]]",
        "signature": "{city :string}",
        "budget": {"maxTurns": 1, "returnRetries": 2},
        **extra,
    }


def run(http: httpx.Client, body: dict[str, Any]) -> dict[str, Any]:
    created = http.post("/v1/jobs", json=body)
    assert created.status_code == 202, created.text
    done = finished(http, created.json()["id"])
    assert done["status"] == "succeeded", done
    result: dict[str, Any] = done["result"]
    return result


def test_confidence_comes_from_logprobs_when_the_model_gives_them(http: httpx.Client) -> None:
    result = run(http, job(["ok"], model="sure"))
    assert result.get("confidenceSource") == "logprobs", result
    assert 0.95 <= result["confidence"] <= 1


def test_a_wrong_answer_the_checks_cannot_see_has_a_low_confidence(http: httpx.Client) -> None:
    # The simulated model is unsure of a wrong answer: a client threshold would catch it.
    result = run(http, job(["semantic"], model="sure"))
    assert result["data"] != {"city": "Lyon"}
    assert result["confidence"] < 0.6


def test_no_confidence_without_a_source(http: httpx.Client) -> None:
    result = run(http, job(["ok"], model="plain"))
    assert "confidence" not in result
    assert "confidenceSource" not in result
