"""Field-level re-asks and best-of-N through the API (issue 14, parts 2 and 3): a worker
runs the jobs against the simulator, whose journal shows what each request asked for."""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from app.providers.config import ModelConfig, ProviderConfig, ProvidersConfig
from reprompt_sim.server import SimConfig, serve_in_background
from tests.service import KEYS, StartApi, api_keys, client, finished

EXPECT = {"city": "Paris", "population": 2100000}


@pytest.fixture(scope="module")
def own_sim() -> Iterator[str]:
    """A simulator of this module's own: its journal holds only these tests' requests."""
    with serve_in_background(SimConfig(seed=4)) as url:
        yield url


@pytest.fixture
def http(start_api: StartApi, own_sim: str) -> Iterator[httpx.Client]:
    config = ProvidersConfig(
        default="sim-schema",
        providers={
            "sim": ProviderConfig(kind="openai", base_url=f"{own_sim}/v1"),
            "claude": ProviderConfig(kind="anthropic", base_url=own_sim),
            "claude-once": ProviderConfig(kind="anthropic", base_url=own_sim, max_attempts=1),
        },
        models={
            "sim-schema": ModelConfig(provider="sim", structured="json_schema"),
            "sim-prompt": ModelConfig(provider="sim", structured="prompt"),
            "sim-claude": ModelConfig(provider="claude", structured="prompt"),
            "sim-claude-once": ModelConfig(provider="claude-once", structured="prompt"),
        },
    )
    url = start_api(embedded_worker=True, providers_config=config, api_keys=api_keys())
    with client(url, KEYS["alice"]) as http:
        http.delete(f"{own_sim}/sim/requests")
        yield http


def journal(own_sim: str) -> list[dict[str, Any]]:
    entries: list[dict[str, Any]] = httpx.get(f"{own_sim}/sim/requests").json()
    return entries


def job(script: list[str], **extra: Any) -> dict[str, Any]:
    directive = {"script": script, "counter": "requests", "expect": EXPECT}
    directive |= extra.pop("directive", {})
    return {
        "task": f"The capital of France ({uuid.uuid4().hex[:8]})\n[[sim {json.dumps(directive)}]]",
        "signature": "{city :string, population :int}",
        "budget": {"maxTurns": 1, "returnRetries": 3},
        **extra,
    }


def run(http: httpx.Client, body: dict[str, Any]) -> dict[str, Any]:
    created = http.post("/v1/jobs", json=body)
    assert created.status_code == 202, created.text
    return finished(http, created.json()["id"])


def test_a_patch_re_ask_sends_only_the_missing_fields_sub_schema_and_the_merge_succeeds(
    http: httpx.Client, own_sim: str
) -> None:
    done = run(http, job(["missing_field", "ok"]))

    assert done["status"] == "succeeded", done
    assert done["result"]["data"] == EXPECT
    first, second = done["turns"]
    assert first["outcome"] == "invalid"
    assert first["patch"] is None
    (missing,) = [k for k in EXPECT if k not in json.loads(first["answer"])]
    assert second["patch"] == [f"/{missing}"]
    assert second["type"] == "retry"
    assert second["outcome"] == "success"
    requests = journal(own_sim)
    assert [r["schemaKeys"] for r in requests] == [["city", "population"], [f"/{missing}"]]
    assert any(w.startswith("patch: ") for w in done["result"]["warnings"])


def test_in_prompt_mode_a_model_that_answers_whole_is_merged_at_the_paths(
    http: httpx.Client,
) -> None:
    done = run(http, job(["missing_field", "ok"], model="sim-prompt"))

    assert done["status"] == "succeeded", done
    assert done["result"]["data"] == EXPECT
    assert done["turns"][1]["patch"] is not None


def test_retry_mode_whole_asks_for_the_whole_answer_as_before(
    http: httpx.Client, own_sim: str
) -> None:
    done = run(http, job(["missing_field", "ok"], retryMode="whole"))

    assert done["status"] == "succeeded", done
    assert [t["patch"] for t in done["turns"]] == [None, None]
    assert [r["schemaKeys"] for r in journal(own_sim)] == [["city", "population"]] * 2


def test_best_of_n_returns_the_valid_one_among_n_and_counts_every_answer(
    http: httpx.Client, own_sim: str
) -> None:
    choices = {"choices": ["missing_field", "ok", "missing_field"]}
    single = run(http, job([], directive=choices))
    done = run(http, job([], directive=choices, candidates=3))

    assert done["status"] == "succeeded", done
    assert done["result"]["data"] == EXPECT
    (turn,) = done["turns"]
    assert (turn["candidates"], turn["chosen"]) == (3, 1)
    execution = done["result"]["execution"]
    assert execution["llmCalls"] == 1
    assert execution["retryCount"] == 0
    assert execution["outputTokens"] == turn["usage"]["outputTokens"]
    # three answers written (two of them a field short), the prompt read once (n on an
    # OpenAI-compatible wire)
    one = single["result"]["execution"]
    assert execution["outputTokens"] >= 2 * one["outputTokens"]
    assert execution["inputTokens"] < 2 * one["inputTokens"]
    assert [r["n"] for r in journal(own_sim)] == [1, 3]


def test_without_n_on_the_wire_best_of_n_is_n_calls_in_parallel(
    http: httpx.Client, own_sim: str
) -> None:
    single = run(http, job([], model="sim-claude"))
    done = run(http, job([], model="sim-claude", candidates=3))
    assert single["status"] == "succeeded", single

    assert done["status"] == "succeeded", done
    (turn,) = done["turns"]
    assert (turn["candidates"], turn["chosen"]) == (3, 0)
    assert done["result"]["execution"]["llmCalls"] == 1
    # three calls: three prompts paid for
    one = single["result"]["execution"]["inputTokens"]
    assert done["result"]["execution"]["inputTokens"] >= 3 * one - 30
    assert [r["api"] for r in journal(own_sim)] == ["anthropic"] * 4


def test_a_failed_call_among_parallel_candidates_is_named_in_a_warning(
    http: httpx.Client, own_sim: str
) -> None:
    # No transport retries: the first of the three requests to arrive gets a 500 (the sim
    # serves a step's faults to the first requests of a conversation) and stays failed.
    done = run(http, job(["server_error", "ok"], model="sim-claude-once", candidates=3))

    assert done["status"] == "succeeded", done
    (turn,) = done["turns"]
    assert turn["candidates"] == 2
    (warning,) = [w for w in done["result"]["warnings"] if w.startswith("candidates:")]
    assert "1 of 3 calls failed" in warning
    assert "kept the 2 answer(s)" in warning
    assert len(journal(own_sim)) == 3


def test_candidates_on_final_ask_for_several_answers_on_the_simplified_last_call(
    http: httpx.Client, own_sim: str
) -> None:
    body = job(
        ["missing_field", "missing_field"],
        directive={"choices": ["missing_field", "ok"]},
        retryMode="whole",
        simplifyOnFinalAttempt=True,
        candidates={"n": 2, "on": "final"},
        budget={"maxTurns": 1, "returnRetries": 2},
    )
    done = run(http, body)

    assert done["status"] == "succeeded", done
    assert [r["n"] for r in journal(own_sim)] == [1, 1, 2]
    last = done["turns"][-1]
    assert last["simplified"]
    assert (last["candidates"], last["chosen"]) == (2, 1)


def counters(http: httpx.Client) -> dict[str, float]:
    """The patch and best-of-N series of this process's /metrics (the worker runs in it)."""
    wanted = ("reprompt_patch_reasks_total", "reprompt_candidate_")
    values: dict[str, float] = {}
    for line in http.get("/metrics").text.splitlines():
        if line.startswith(wanted):
            name, value = line.rsplit(" ", 1)
            values[name] = float(value)
    return values


def test_patch_re_asks_and_best_of_n_calls_are_counted_in_metrics(http: httpx.Client) -> None:
    before = counters(http)
    patched = run(http, job(["missing_field", "ok"]))
    choices = {"choices": ["missing_field", "ok", "missing_field"]}
    best = run(http, job([], directive=choices, candidates=3))
    after = counters(http)

    assert patched["turns"][1]["patch"]
    assert best["turns"][0]["candidates"] == 3
    grew = {k: v - before.get(k, 0.0) for k, v in after.items() if v != before.get(k, 0.0)}
    assert grew == {
        'reprompt_patch_reasks_total{outcome="success"}': 1.0,
        'reprompt_candidate_calls_total{outcome="success"}': 1.0,
        "reprompt_candidate_answers_total": 3.0,
    }
