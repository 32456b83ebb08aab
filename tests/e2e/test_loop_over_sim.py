"""The turn loop through the real router over HTTP against the simulator."""

from __future__ import annotations

import json
import logging
from typing import Any

import pytest

from app.core.turn.loop import JobResult, Runtime, run_job
from app.core.wire import codes
from app.core.wire.spec import JobSpec
from app.providers.config import ModelConfig, ProviderConfig, ProvidersConfig
from app.providers.embedded import open_router
from app.providers.http import make_client
from app.providers.retry import set_testing


@pytest.fixture(autouse=True)
def no_sleep() -> Any:
    set_testing(True)
    yield
    set_testing(False)


def sim_config(url: str, **model: Any) -> ProvidersConfig:
    return ProvidersConfig(
        providers={"sim": ProviderConfig(kind="openai", base_url=f"{url}/v1", api_key_env=None)},
        models={"sim-model": ModelConfig(provider="sim", **{"structured": "prompt", **model})},
    )


async def run(url: str, job: dict[str, Any], tmp_path: Any, **model: Any) -> JobResult:
    spec = JobSpec.model_validate(job)
    async with (
        make_client() as http,
        open_router(http, data_dir=tmp_path, config=sim_config(url, **model)) as router,
    ):
        return await run_job(spec, Runtime(client=router))


def scripted(task: str, script: list[str], **extra: Any) -> dict[str, Any]:
    return {
        # "requests": the sim counts its answers per task; a collapsed prompt shows only one
        "task": f"{task}\n[[sim {json.dumps({'script': script, 'counter': 'requests'})}]]",
        "signature": "{city :string, population :int}",
        "budget": {"maxTurns": 1, "returnRetries": 3},
        **extra,
    }


async def test_broken_json_then_missing_field_then_valid(sim_url: str, tmp_path: Any) -> None:
    script = ["broken_json", "missing_field", "ok"]
    result = await run(sim_url, scripted("Capital of France", script), tmp_path)
    env = result.envelope.model_dump(mode="json")
    assert env["status"] == "success"
    assert [t.outcome for t in result.turns] == ["invalid", "invalid", "success"]
    assert [t.type for t in result.turns] == ["must_return", "retry", "retry"]
    assert env["execution"]["retryCount"] == 2
    assert env["execution"]["llmCalls"] == 3
    assert env["execution"]["model"] == "sim-model"
    assert env["execution"]["wastedTokens"] > 0
    # the simulator's usage is what we count
    assert env["execution"]["tokensUsed"] == sum(t.tokens for t in result.turns)
    assert "line" in (result.turns[0].diagnosis or "")


async def test_repairable_answers_cost_no_retry(sim_url: str, tmp_path: Any) -> None:
    result = await run(sim_url, scripted("Capital of Spain", ["python_literals"]), tmp_path)
    assert result.envelope.status == "success"
    assert len(result.turns) == 1
    assert any(w.startswith("repair:") for w in result.envelope.warnings)


async def test_transport_retries_are_not_turns(sim_url: str, tmp_path: Any) -> None:
    result = await run(
        sim_url, scripted("Capital of Italy", ["rate_limit", "server_error", "ok"]), tmp_path
    )
    env = result.envelope.model_dump(mode="json")
    assert env["status"] == "success"
    assert len(result.turns) == 1
    assert env["execution"]["llmCalls"] == 1
    assert env["execution"]["retryCount"] == 0
    assert env["execution"]["transportRetries"] == 2
    assert result.turns[0].transport_retries == 2


async def test_truncation_is_retried_with_a_larger_limit(sim_url: str, tmp_path: Any) -> None:
    # the simulator writes a ~400-token preamble before its JSON in this mode
    job = scripted("Capital of Peru", ["truncation"], maxOutputTokens=300)
    result = await run(sim_url, job, tmp_path)
    assert result.envelope.status == "success"
    assert [t.outcome for t in result.turns] == ["truncated", "success"]
    assert [t.max_output_tokens for t in result.turns] == [300, 600]


async def test_refusal_ends_the_job(sim_url: str, tmp_path: Any) -> None:
    result = await run(sim_url, scripted("Capital of Chile", ["refusal"]), tmp_path)
    assert result.envelope.error == codes.LLM_REFUSAL
    assert len(result.turns) == 1


async def test_unknown_price_means_null_cost_and_a_warning(sim_url: str, tmp_path: Any) -> None:
    result = await run(sim_url, scripted("Capital of Japan", ["ok"]), tmp_path)
    env = result.envelope.model_dump(mode="json")
    assert env["execution"]["cost"] is None
    assert any("no price configured" in w for w in env["warnings"])


async def test_configured_price_gives_cost(sim_url: str, tmp_path: Any) -> None:
    result = await run(
        sim_url,
        scripted("Capital of Kenya", ["missing_field", "ok"]),
        tmp_path,
        input_usd_per_mtok=1.0,
        output_usd_per_mtok=2.0,
    )
    env = result.envelope.model_dump(mode="json")
    turns = result.turns
    expected = sum(t.usage.input_tokens * 1e-6 + t.usage.output_tokens * 2e-6 for t in turns)
    assert env["execution"]["cost"] == pytest.approx(expected)
    assert env["execution"]["wastedCost"] == pytest.approx(
        turns[0].usage.input_tokens * 1e-6 + turns[0].usage.output_tokens * 2e-6
    )


async def test_no_key_reaches_records_or_logs(
    sim_url: str, tmp_path: Any, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    secret = "sk-test-SECRET-0123456789abcdef"
    monkeypatch.setenv("SIM_KEY", secret)
    caplog.set_level(logging.DEBUG)
    config = ProvidersConfig.model_validate(
        {
            "providers": {
                "sim": {"kind": "openai", "base_url": f"{sim_url}/v1", "api_key": secret}
            },
            "models": {"sim-model": {"provider": "sim", "structured": "prompt"}},
        }
    )
    spec = JobSpec.model_validate(
        scripted("Capital of Peru", ["server_error", "broken_json", "ok"])
    )
    async with make_client() as http, open_router(http, data_dir=tmp_path, config=config) as router:
        result = await run_job(spec, Runtime(client=router))
    everything = json.dumps(
        {
            "envelope": result.envelope.model_dump(mode="json"),
            "turns": [t.model_dump(mode="json") for t in result.turns],
            "history": [h.model_dump(mode="json") for h in result.history],
            "transcript": [m.content for m in result.transcript],
        }
    )
    assert result.envelope.status == "success"
    assert secret not in everything
    assert secret not in caplog.text
    assert secret not in repr(config)
