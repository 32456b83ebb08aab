"""Both adapters against the simulator (reprompt_sim), which speaks both wire formats."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from app.core.turn.model import LLMRequest, Message
from app.core.wire.errors import ProviderRateLimited
from app.providers.config import ProvidersConfig
from app.providers.router import build_router
from reprompt_sim.server import SimConfig, serve_in_background
from tests.providers.upstream import one_model

SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {"city": {"type": "string"}, "population": {"type": "integer"}},
    "required": ["city", "population"],
    "additionalProperties": False,
}


@pytest.fixture(scope="module")
def sim_url() -> Iterator[str]:
    with serve_in_background(SimConfig(seed=1)) as url:
        yield url


def ask(
    script: list[str], task: str = "Name a city and its population.", **fields: Any
) -> LLMRequest:
    directive = json.dumps({"script": script, "retry_after": 2})
    return LLMRequest(
        messages=(
            Message("system", "Answer with JSON only."),
            Message("user", f"{task} [[sim {directive}]]"),
        ),
        output_schema=SCHEMA,
        **fields,
    )


def sim(url: str, kind: str, **fields: Any) -> ProvidersConfig:
    return one_model(url, kind=kind, model="sim", name="reprompt-sim", **fields)


@pytest.mark.parametrize(("kind", "mode"), [("openai", "json_schema"), ("anthropic", "tool")])
async def test_a_clean_answer_satisfies_the_schema(
    sim_url: str, http: httpx.AsyncClient, kind: str, mode: str
) -> None:
    response = await build_router(sim(sim_url, kind), http).complete(ask(["ok"]))

    assert response.finish_reason == "stop"
    assert response.structured_mode == mode
    answer = json.loads(response.content or "")
    assert set(answer) == {"city", "population"}
    assert response.usage is not None
    assert response.usage.input_tokens > 0


@pytest.mark.parametrize("kind", ["openai", "anthropic"])
async def test_scripted_transport_faults_become_transport_retries(
    sim_url: str, http: httpx.AsyncClient, kind: str
) -> None:
    request = ask(["rate_limit", "overloaded", "ok"], task=f"Faults over {kind}.")
    response = await build_router(sim(sim_url, kind), http).complete(request)

    assert response.finish_reason == "stop"
    assert response.transport_retries == 2
    assert response.transport_wait_ms >= 2000


@pytest.mark.parametrize("kind", ["openai", "anthropic"])
async def test_rate_limits_carry_the_simulated_retry_after(
    sim_url: str, http: httpx.AsyncClient, kind: str
) -> None:
    request = ask(["rate_limit", "ok"], task=f"Rate limit over {kind}.")

    with pytest.raises(ProviderRateLimited) as caught:
        await build_router(sim(sim_url, kind, max_attempts=1), http).complete(request)

    assert caught.value.retry_after_s == pytest.approx(2.0, abs=1.0)


@pytest.mark.parametrize("kind", ["openai", "anthropic"])
async def test_a_simulated_refusal_is_an_answer(
    sim_url: str, http: httpx.AsyncClient, kind: str
) -> None:
    request = ask(["refusal"], task=f"Refuse over {kind}.")
    response = await build_router(sim(sim_url, kind), http).complete(request)

    assert response.finish_reason == "refusal"
    assert response.refusal
