"""Prompt caching through the API, against the simulator over both wire protocols: a job
whose answers are re-asked repeats its system prompt and task unchanged, the provider
reads them from its cache, the turns and the envelope say how many tokens, the cost is
the cached rate's, and /metrics counts them."""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from app.providers.config import ModelConfig, ProviderConfig, ProvidersConfig
from tests.api.test_metrics import Samples, scrape, value
from tests.service import KEYS, StartApi, api_keys, client, finished

# Four models on one simulator: each wire protocol with its cache, and without it.
PRICES: dict[str, dict[str, float]] = {
    "oa-cached": {"input": 1.0, "output": 2.0, "cached": 0.25},
    "oa-plain": {"input": 1.0, "output": 2.0, "cached": 0.25},
    "an-cached": {"input": 3.0, "output": 15.0, "cached": 0.3, "write": 3.75},
    "an-plain": {"input": 3.0, "output": 15.0, "cached": 0.3, "write": 3.75},
}
DOCUMENT = "Delivery note 1187: 3 crates of pears for the harbour market in Bergen. " * 110


def model(provider: str, name: str, cache: bool) -> ModelConfig:
    rates = PRICES[name]
    return ModelConfig(
        provider=provider,
        name="claude-sonnet-4-5" if provider == "an" else "gpt-4o-mini",
        structured="prompt",
        prompt_cache=cache,
        input_usd_per_mtok=rates["input"],
        output_usd_per_mtok=rates["output"],
        cached_input_usd_per_mtok=rates["cached"],
        cache_write_usd_per_mtok=rates.get("write"),
    )


@pytest.fixture
def http(start_api: StartApi, sim_url: str) -> Iterator[httpx.Client]:
    config = ProvidersConfig(
        default="oa-cached",
        providers={
            "oa": ProviderConfig(kind="openai", base_url=f"{sim_url}/v1"),
            "an": ProviderConfig(kind="anthropic", base_url=sim_url),
        },
        models={
            name: model(name[:2], name, name.endswith("cached"))
            for name in ("oa-cached", "oa-plain", "an-cached", "an-plain")
        },
    )
    url = start_api(embedded_worker=True, api_keys=api_keys(), providers_config=config)
    with client(url, KEYS["alice"]) as http:
        yield http


def reasked(model: str) -> dict[str, Any]:
    """Two wrong answers, then a right one: three calls with the same long prefix (whole
    re-asks: a patch would take the missing field alone and be right at once)."""
    script = ["missing_field", "missing_field", "ok"]
    directive = json.dumps({"script": script, "counter": "requests"})
    return {
        "task": f"How many crates? ({uuid.uuid4().hex[:8]})\n[[sim {directive}]]",
        "input": DOCUMENT,
        "signature": "{city :string, crates :int}",
        "budget": {"maxTurns": 1, "returnRetries": 3},
        "model": model,
        "retryMode": "whole",
    }


def run(http: httpx.Client, model: str) -> dict[str, Any]:
    response = http.post("/v1/jobs", json=reasked(model))
    assert response.status_code == 202, response.text
    done = finished(http, response.json()["id"])
    assert done["status"] == "succeeded", done
    assert len(done["turns"]) == 3
    return done


def priced(name: str, usage: dict[str, int]) -> float:
    """A turn's cost at the model's rates: plain input, cached input, cache writes, output."""
    rates = PRICES[name]
    cached, written = usage["cachedInputTokens"], usage["cacheWriteTokens"]
    plain = usage["inputTokens"] - cached - written
    return (
        plain * rates["input"]
        + cached * rates["cached"]
        + written * rates.get("write", rates["input"])
        + usage["outputTokens"] * rates["output"]
    ) / 1e6


def full_price(name: str, usage: dict[str, int]) -> float:
    rates = PRICES[name]
    return (usage["inputTokens"] * rates["input"] + usage["outputTokens"] * rates["output"]) / 1e6


def grown(before: Samples, after: Samples, labels: dict[str, str], direction: str) -> float:
    name = "reprompt_llm_tokens_total"
    return value(after, name, **labels, direction=direction) - value(
        before, name, **labels, direction=direction
    )


def test_openai_re_asks_read_the_prefix_from_the_cache(http: httpx.Client) -> None:
    before = scrape(http)
    done = run(http, "oa-cached")
    usages = [turn["usage"] for turn in done["turns"]]
    cached = [u["cachedInputTokens"] for u in usages]
    assert cached[0] == 0  # nothing to read on the first call
    assert all(c >= 1024 and c % 128 == 0 for c in cached[1:])
    assert all(u["cacheWriteTokens"] == 0 for u in usages)  # OpenAI charges no writes
    execution = done["result"]["execution"]
    assert execution["cachedInputTokens"] == sum(cached)
    assert execution["inputTokens"] == sum(u["inputTokens"] for u in usages)
    for turn in done["turns"]:
        assert turn["costUsd"] == pytest.approx(priced("oa-cached", turn["usage"]), abs=1e-12)
    # Lower than the same tokens at the input price, by the cached tokens times the gap.
    undiscounted = sum(full_price("oa-cached", u) for u in usages)
    saved = sum(cached) * (1.0 - 0.25) / 1e6
    assert execution["cost"] == pytest.approx(undiscounted - saved, abs=1e-12)
    after = scrape(http)
    labels = {"provider": "oa", "model": "oa-cached"}
    assert grown(before, after, labels, "cached_input") == sum(cached)


def test_anthropic_writes_the_prefix_once_then_reads_it(http: httpx.Client) -> None:
    before = scrape(http)
    done = run(http, "an-cached")
    usages = [turn["usage"] for turn in done["turns"]]
    first, *later = usages
    assert first["cachedInputTokens"] == 0
    assert first["cacheWriteTokens"] >= 1024
    assert [u["cachedInputTokens"] for u in later] == [first["cacheWriteTokens"]] * 2
    assert all(u["cacheWriteTokens"] == 0 for u in later)
    # Our inputTokens count every prompt token (Anthropic's input_tokens leaves cache out).
    assert all(u["inputTokens"] > u["cachedInputTokens"] + u["cacheWriteTokens"] for u in usages)
    execution = done["result"]["execution"]
    assert execution["cachedInputTokens"] == 2 * first["cacheWriteTokens"]
    assert execution["cacheWriteTokens"] == first["cacheWriteTokens"]
    for turn in done["turns"]:
        assert turn["costUsd"] == pytest.approx(priced("an-cached", turn["usage"]), abs=1e-12)
    undiscounted = sum(full_price("an-cached", u) for u in usages)
    written, read = first["cacheWriteTokens"], 2 * first["cacheWriteTokens"]
    difference = (read * (3.0 - 0.3) - written * (3.75 - 3.0)) / 1e6
    assert execution["cost"] == pytest.approx(undiscounted - difference, abs=1e-12)
    assert execution["cost"] < undiscounted
    after = scrape(http)
    labels = {"provider": "an", "model": "an-cached"}
    assert grown(before, after, labels, "cached_input") == read
    assert grown(before, after, labels, "cache_write") == written


@pytest.mark.parametrize("name", ["oa-plain", "an-plain"])
def test_without_prompt_cache_every_token_is_paid_in_full(http: httpx.Client, name: str) -> None:
    done = run(http, name)
    usages = [turn["usage"] for turn in done["turns"]]
    assert all(u["cachedInputTokens"] == u["cacheWriteTokens"] == 0 for u in usages)
    execution = done["result"]["execution"]
    assert execution["cachedInputTokens"] == execution["cacheWriteTokens"] == 0
    assert execution["cost"] == pytest.approx(sum(full_price(name, u) for u in usages), abs=1e-12)


def test_the_same_job_costs_less_with_the_cache_on_both_protocols(http: httpx.Client) -> None:
    for on, off in (("oa-cached", "oa-plain"), ("an-cached", "an-plain")):
        cached, plain = run(http, on)["result"]["execution"], run(http, off)["result"]["execution"]
        # The same prompts (the task's random tag has the same length) and answers' sizes.
        assert abs(cached["inputTokens"] - plain["inputTokens"]) <= 12
        assert cached["cost"] < plain["cost"] * 0.7


def test_models_list_their_cache_rates(http: httpx.Client) -> None:
    models = {m["name"]: m["price"] for m in http.get("/v1/models").json()["models"]}
    assert models["an-cached"] == {
        "inputUsdPerMtok": 3.0,
        "outputUsdPerMtok": 15.0,
        "cachedInputUsdPerMtok": 0.3,
        "cacheWriteUsdPerMtok": 3.75,
        "source": "providers file",
    }
    assert models["oa-cached"]["cacheWriteUsdPerMtok"] is None
