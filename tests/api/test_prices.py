"""Prices out of the box: a model the catalog knows is priced with no providers file; the
file still overrides; an unknown model's cost stays null and says so."""

from __future__ import annotations

import json
import uuid

from app.providers.catalog import catalog_price, catalog_source
from app.providers.config import ModelConfig, ProviderConfig, ProvidersConfig, load_providers
from app.providers.pricing import Price
from reprompt_sim.server import SimConfig, serve_in_background
from tests.api.test_metrics import scrape, value
from tests.service import KEYS, StartApi, api_keys, client, finished


def job() -> dict[str, object]:
    directive = json.dumps({"script": ["ok"], "expect": {"city": "Oslo"}})
    return {
        "task": f"A city ({uuid.uuid4().hex[:8]})\n[[sim {directive}]]",
        "signature": "{city :string}",
        "budget": {"maxTurns": 1},
    }


def test_the_catalog_knows_well_known_models_and_not_others() -> None:
    assert catalog_price("openai", "gpt-4o-mini") == Price(0.15, 0.6, 0.075)
    price = catalog_price("anthropic", "claude-3-5-haiku-latest")
    assert price is not None
    assert price.output_usd_per_mtok > price.input_usd_per_mtok > 0
    assert catalog_price("openai", "my-own-finetune-7") is None
    assert catalog_price("local", "gpt-4o-mini") is None
    assert catalog_source().startswith("genai-prices ")


def test_the_simulator_posing_as_gpt_4o_mini_is_priced_with_no_providers_file(
    start_api: StartApi, sim_url: str
) -> None:
    config = load_providers(
        {"OPENAI_BASE_URL": f"{sim_url}/v1", "OPENAI_API_KEY": "sim", "OPENAI_MODEL": "gpt-4o-mini"}
    )
    url = start_api(embedded_worker=True, api_keys=api_keys(), providers_config=config)
    with client(url, KEYS["alice"]) as http:
        done = finished(http, http.post("/v1/jobs", json=job()).json()["id"])
        execution = done["result"]["execution"]
        assert done["status"] == "succeeded"
        expected = (execution["inputTokens"] * 0.15 + execution["outputTokens"] * 0.6) / 1e6
        assert execution["cost"] is not None
        assert abs(execution["cost"] - expected) < 1e-12
        assert not any("no price" in w for w in done["result"]["warnings"])
        cost = value(
            scrape(http), "reprompt_llm_cost_usd_total", provider="openai", model="gpt-4o-mini"
        )
        assert cost > 0
        (model,) = http.get("/v1/models").json()["models"]
        assert model["price"] == {
            "inputUsdPerMtok": 0.15,
            "outputUsdPerMtok": 0.6,
            "cachedInputUsdPerMtok": 0.075,
            "cacheWriteUsdPerMtok": None,
            "source": catalog_source(),
        }


def test_the_providers_file_overrides_the_catalog_and_unknown_stays_null(
    start_api: StartApi, sim_url: str
) -> None:
    config = ProvidersConfig(
        default="gpt-4o-mini",
        providers={"sim": ProviderConfig(kind="openai", base_url=f"{sim_url}/v1")},
        models={
            "gpt-4o-mini": ModelConfig(
                provider="sim", input_usd_per_mtok=1.0, output_usd_per_mtok=2.0
            ),
            "mystery": ModelConfig(provider="sim", name="mystery-model-9"),
        },
    )
    url = start_api(embedded_worker=True, api_keys=api_keys(), providers_config=config)
    with client(url, KEYS["alice"]) as http:
        models = {m["name"]: m["price"] for m in http.get("/v1/models").json()["models"]}
        assert models["gpt-4o-mini"] == {
            "inputUsdPerMtok": 1.0,
            "outputUsdPerMtok": 2.0,
            "cachedInputUsdPerMtok": None,
            "cacheWriteUsdPerMtok": None,
            "source": "providers file",
        }
        assert models["mystery"] is None
        done = finished(
            http, http.post("/v1/jobs", json={**job(), "model": "mystery"}).json()["id"]
        )
        assert done["result"]["execution"]["cost"] is None
        assert any("no price" in w for w in done["result"]["warnings"])


def test_cached_tokens_of_the_simulator_posing_as_gpt_4o_mini_are_priced_at_the_cached_rate(
    start_api: StartApi,
) -> None:
    # No providers file: OPENAI_* only, and the catalog's prices (cached input: half). The
    # simulator caches keyless prompts, as OpenAI does: re-asks of a long prompt read its
    # prefix from the cache, and each turn's cost uses the cached rate for those tokens.
    document = " ".join(f"Line {i}: crates of apples go to the Oslo warehouse." for i in range(160))
    directive = json.dumps(
        {
            "script": ["missing_field", "missing_field", "ok"],
            "counter": "requests",
            "expect": {"city": "Oslo", "crates": 7},
        }
    )
    spec = {
        "task": f"How many crates? ({uuid.uuid4().hex[:8]})\n[[sim {directive}]]",
        "input": document,
        "signature": "{city :string, crates :int}",
        "budget": {"maxTurns": 1, "returnRetries": 3},
        "retryMode": "whole",
    }
    with serve_in_background(SimConfig(cache_keyless=True)) as sim:
        config = load_providers(
            {"OPENAI_BASE_URL": f"{sim}/v1", "OPENAI_API_KEY": "sim", "OPENAI_MODEL": "gpt-4o-mini"}
        )
        assert config.models["gpt-4o-mini"].prompt_cache is False  # not OpenAI's URL: no key
        url = start_api(embedded_worker=True, api_keys=api_keys(), providers_config=config)
        with client(url, KEYS["alice"]) as http:
            done = finished(http, http.post("/v1/jobs", json=spec).json()["id"])
            after = scrape(http)
    assert done["status"] == "succeeded", done
    turns = done["turns"]
    assert len(turns) == 3
    assert turns[0]["usage"]["cachedInputTokens"] == 0
    for turn in turns[1:]:
        usage = turn["usage"]
        cached = usage["cachedInputTokens"]
        assert cached > 0
        expected = (
            (usage["inputTokens"] - cached) * 0.15 + cached * 0.075 + usage["outputTokens"] * 0.6
        ) / 1e6
        assert abs(turn["costUsd"] - expected) < 1e-12
    execution = done["result"]["execution"]
    assert execution["cachedInputTokens"] == sum(t["usage"]["cachedInputTokens"] for t in turns)
    assert abs(execution["cost"] - sum(t["costUsd"] for t in turns)) < 1e-12
    cached_metric = value(
        after,
        "reprompt_llm_tokens_total",
        provider="openai",
        model="gpt-4o-mini",
        direction="cached_input",
    )
    assert cached_metric >= execution["cachedInputTokens"]
