"""Routes and fallback, who answered, cost, structured modes: the ModelClient the loop sees."""

from __future__ import annotations

from typing import Any

import httpx
import pytest

from app.core.turn.model import LLMRequest, Message, ModelClient
from app.core.wire.errors import (
    InvalidInput,
    ProviderConfigError,
    ProviderRateLimited,
    ProviderTimeout,
    ProviderTokenLimit,
    ProviderUnavailable,
)
from app.providers.config import (
    CircuitConfig,
    ModelConfig,
    ProviderConfig,
    ProvidersConfig,
    RouteConfig,
)
from app.providers.openai import OpenAIAdapter
from app.providers.router import Router, build_router
from tests.providers.upstream import Upstream, one_model, recorded

ASK = LLMRequest(messages=(Message("user", "hi"),))
SCHEMA = {"type": "object", "properties": {"x": {"type": "integer"}}}
OPENAI = "/v1/chat/completions"
ANTHROPIC = "/v1/messages"


def route_config(
    url: str,
    *,
    max_attempts: int = 1,
    timeout_s: float = 5.0,
    a: dict[str, Any] | None = None,
    b: dict[str, Any] | None = None,
    **top: Any,
) -> ProvidersConfig:
    """Route "fast" = a (openai kind) then b (anthropic kind), both served by one upstream."""
    common: dict[str, Any] = {"max_attempts": max_attempts, "timeout_s": timeout_s}
    return ProvidersConfig(
        providers={
            "oa": ProviderConfig(kind="openai", base_url=url + "/v1", **common),
            "an": ProviderConfig(kind="anthropic", base_url=url, **common),
        },
        models={
            "a": ModelConfig(provider="oa", name="gpt-a", **(a or {})),
            "b": ModelConfig(provider="an", name="claude-b", **(b or {})),
        },
        routes={"fast": RouteConfig(models=["a", "b"])},
        default="fast",
        **top,
    )


def paths(upstream: Upstream) -> list[str]:
    return [seen.path for seen in upstream.seen]


async def test_unavailable_model_falls_back_to_the_next_and_says_who_answered(
    upstream: Upstream, http: httpx.AsyncClient
) -> None:
    upstream.script(recorded("openai_503"), recorded("anthropic_success"))
    router = build_router(route_config(upstream.url), http)

    response = await router.complete(ASK)

    assert (response.model, response.provider) == ("b", "an")
    assert response.content == "Hello! How can I help you today?"
    assert "fell back from a to b: llm-unavailable" in response.warnings
    assert paths(upstream) == [OPENAI, ANTHROPIC]


async def test_rate_limited_model_falls_back_after_its_transport_retries(
    upstream: Upstream, http: httpx.AsyncClient
) -> None:
    upstream.script(recorded("openai_429"), recorded("openai_429"), recorded("anthropic_success"))
    router = build_router(route_config(upstream.url, max_attempts=2), http)

    response = await router.complete(ASK)

    assert response.model == "b"
    assert "fell back from a to b: llm-rate-limit" in response.warnings
    assert response.transport_retries == 1
    assert response.transport_wait_ms == 7000
    assert paths(upstream) == [OPENAI, OPENAI, ANTHROPIC]


async def test_a_timed_out_model_falls_back_while_time_is_left(
    upstream: Upstream, http: httpx.AsyncClient
) -> None:
    # Margins wide enough for a loaded machine: b, which answers at once, must answer
    # within the per-call timeout too (50 ms was not always enough in a full run).
    upstream.script(recorded("openai_success", delay_s=2.0), recorded("anthropic_success"))
    router = build_router(route_config(upstream.url, timeout_s=0.4), http)

    response = await router.complete(ASK)

    assert response.model == "b"
    assert "fell back from a to b: llm-timeout" in response.warnings


async def test_no_fallback_once_the_deadline_is_spent(
    upstream: Upstream, http: httpx.AsyncClient
) -> None:
    # Margins wide enough for a loaded machine: the request must reach the upstream first.
    upstream.script(recorded("openai_success", delay_s=3.0), recorded("anthropic_success"))
    router = build_router(route_config(upstream.url), http)

    with pytest.raises(ProviderTimeout, match=r"within 0\.8s"):
        await router.complete(LLMRequest(messages=ASK.messages, timeout_s=0.8))

    assert paths(upstream) == [OPENAI]


@pytest.mark.parametrize(
    ("name", "error"),
    [
        ("openai_401", ProviderConfigError),
        ("openai_404", ProviderConfigError),
        ("openai_context_length_exceeded", ProviderTokenLimit),
    ],
)
async def test_non_retryable_errors_do_not_fall_over(
    upstream: Upstream, http: httpx.AsyncClient, name: str, error: type[Exception]
) -> None:
    upstream.script(recorded(name), recorded("anthropic_success"))
    router = build_router(route_config(upstream.url), http)

    with pytest.raises(error):
        await router.complete(ASK)

    assert paths(upstream) == [OPENAI]


async def test_when_every_model_fails_the_last_error_is_raised_with_the_route_totals(
    upstream: Upstream, http: httpx.AsyncClient
) -> None:
    upstream.script(
        recorded("openai_503"),
        recorded("openai_503"),
        recorded("anthropic_429"),
        recorded("anthropic_429"),
    )
    router = build_router(route_config(upstream.url, max_attempts=2), http)

    with pytest.raises(ProviderRateLimited, match=r"after trying a, b") as caught:
        await router.complete(ASK)

    assert (caught.value.provider, caught.value.model) == ("an", "b")
    assert caught.value.transport_retries == 2
    assert caught.value.retry_after_s == 12.0
    assert len(upstream.seen) == 4


async def test_an_open_circuit_moves_on_without_calling_the_model(
    upstream: Upstream, http: httpx.AsyncClient
) -> None:
    config = route_config(upstream.url).model_copy(
        update={"circuit": CircuitConfig(failure_threshold=1, cooldown_s=60)}
    )
    router = build_router(config, http)
    upstream.script(recorded("openai_500"), recorded("anthropic_success"))
    await router.complete(ASK)

    response = await router.complete(ASK)

    assert response.model == "b"
    assert response.warnings[0] == "fell back from a to b: llm-unavailable"
    assert paths(upstream) == [OPENAI, ANTHROPIC, ANTHROPIC]
    assert router.snapshot()["oa/a"]["state"] == "open"


async def test_naming_a_model_of_the_route_calls_only_that_model(
    upstream: Upstream, http: httpx.AsyncClient
) -> None:
    upstream.script(recorded("openai_503"))
    router = build_router(route_config(upstream.url), http)

    with pytest.raises(ProviderUnavailable):
        await router.complete(LLMRequest(messages=ASK.messages, model="a"))

    assert paths(upstream) == [OPENAI]


async def test_unknown_model_is_invalid_input_naming_the_field(http: httpx.AsyncClient) -> None:
    router = build_router(route_config("http://127.0.0.1:9"), http)

    with pytest.raises(InvalidInput, match="unknown model or route 'nope'") as caught:
        await router.complete(LLMRequest(messages=ASK.messages, model="nope"))

    assert caught.value.field == "model"


def test_the_default_is_the_configured_default_else_the_first_route_else_the_first_model(
    http: httpx.AsyncClient,
) -> None:
    config = route_config("http://127.0.0.1:9")
    assert build_router(config, http).resolve(None) == ("a", "b")
    assert build_router(config.model_copy(update={"default": "b"}), http).resolve(None) == ("b",)
    no_routes = config.model_copy(update={"default": None, "routes": {}})
    assert build_router(no_routes, http).resolve(None) == ("a",)


async def test_cost_is_priced_per_model_and_unknown_prices_warn(
    upstream: Upstream, http: httpx.AsyncClient
) -> None:
    prices = {"input_usd_per_mtok": 0.15, "output_usd_per_mtok": 0.60}
    router = build_router(route_config(upstream.url, a=prices), http)

    upstream.script(recorded("openai_success"))
    priced = await router.complete(ASK)
    upstream.script(recorded("anthropic_success"))
    unpriced = await router.complete(LLMRequest(messages=ASK.messages, model="b"))

    assert priced.cost_usd == pytest.approx((19 * 0.15 + 10 * 0.60) / 1_000_000)
    assert priced.warnings == ()
    assert unpriced.cost_usd is None
    assert unpriced.warnings == ("no price configured for model b; cost unknown",)


def test_estimate_cost_is_the_dearest_model_of_a_route_or_none_when_unknown(
    http: httpx.AsyncClient,
) -> None:
    cheap = {"input_usd_per_mtok": 1.0, "output_usd_per_mtok": 2.0}
    dear = {"input_usd_per_mtok": 3.0, "output_usd_per_mtok": 15.0}
    router = build_router(route_config("http://127.0.0.1:9", a=cheap, b=dear), http)
    half_priced = build_router(route_config("http://127.0.0.1:9", a=cheap), http)

    assert router.estimate_cost("a", 1_000_000, 1_000_000) == 3.0
    assert router.estimate_cost("fast", 1_000_000, 1_000_000) == 18.0
    assert router.estimate_cost(None, 1_000_000, 0) == 3.0
    assert half_priced.estimate_cost("fast", 10, 10) is None
    assert half_priced.estimate_cost("a", 10, 10) == pytest.approx(30 / 1_000_000)


def test_structured_mode_reports_the_weakest_model_of_a_route(http: httpx.AsyncClient) -> None:
    router = build_router(route_config("http://127.0.0.1:9"), http)

    assert router.structured_mode("a", "auto") == "json_schema"
    assert router.structured_mode("b", "native") == "tool"
    assert router.structured_mode("fast", "auto") == "tool"
    assert router.structured_mode("fast", "prompt") == "prompt"
    # Worked out once per (model, request): asked again, the same answers.
    assert router.structured_mode("a", "auto") == "json_schema"
    assert router.structured_mode("fast", "auto") == "tool"
    assert router.prompt_style("fast", "auto") is router.prompt_style("fast", "auto")


def test_a_refused_structured_mode_is_refused_every_time(http: httpx.AsyncClient) -> None:
    router = build_router(route_config("http://127.0.0.1:9", b={"structured": "prompt"}), http)
    for _ in range(2):
        with pytest.raises(InvalidInput, match="b can only be prompted"):
            router.structured_mode("fast", "native")
        with pytest.raises(InvalidInput, match="unknown model"):
            router.structured_mode("nope", "auto")
    assert router.structured_mode("fast", "auto") == "prompt"


async def test_native_structured_output_on_a_prompt_only_model_is_invalid_input(
    upstream: Upstream, http: httpx.AsyncClient
) -> None:
    config = route_config(upstream.url, b={"structured": "prompt"})
    router = build_router(config, http)
    assert router.structured_mode("fast", "auto") == "prompt"

    with pytest.raises(InvalidInput, match="b can only be prompted") as caught:
        await router.complete(
            LLMRequest(messages=ASK.messages, output_schema=SCHEMA, structured_output="native")
        )

    assert caught.value.field == "structuredOutput"
    assert upstream.seen == []


async def test_latency_is_measured_on_the_injected_clock(
    upstream: Upstream, http: httpx.AsyncClient
) -> None:
    ticks = iter(range(0, 1000, 2))
    router = build_router(one_model(upstream.url), http, clock=lambda: float(next(ticks)))
    upstream.script(recorded("openai_success"))

    response = await router.complete(ASK)

    assert response.latency_ms > 0


def test_router_is_a_model_client(http: httpx.AsyncClient) -> None:
    client: ModelClient = build_router(route_config("http://127.0.0.1:9"), http)
    assert isinstance(client, Router)
    assert "fast" in client.names()


# -- several answers per call (best-of-N) ---------------------------------------------------------


async def test_n_answers_on_an_openai_wire_are_one_request_with_n(
    upstream: Upstream, http: httpx.AsyncClient
) -> None:
    one = recorded("openai_success")
    body = dict(one.body)
    body["choices"] = [{**body["choices"][0], "index": i} for i in range(3)]
    upstream.script(recorded("openai_success", body=body))
    router = build_router(route_config(upstream.url), http)

    response = await router.complete(LLMRequest(messages=ASK.messages, model="a", n=3))

    assert paths(upstream) == [OPENAI]
    assert upstream.seen[0].body["n"] == 3
    assert len(response.choices) == 3


async def test_n_answers_on_a_wire_without_n_are_n_calls_whose_failures_are_left_out(
    upstream: Upstream, http: httpx.AsyncClient
) -> None:
    upstream.script(
        recorded("anthropic_success"), recorded("anthropic_401"), recorded("anthropic_success")
    )
    router = build_router(route_config(upstream.url), http)

    response = await router.complete(LLMRequest(messages=ASK.messages, model="b", n=3))

    assert paths(upstream) == [ANTHROPIC] * 3
    assert "n" not in upstream.seen[0].body
    assert len(response.choices) == 2  # the failed call gave no answer
    single = await router.complete(LLMRequest(messages=ASK.messages, model="b"))
    assert single.usage is not None
    assert response.usage is not None
    assert response.usage.input_tokens == 2 * single.usage.input_tokens


async def test_n_calls_on_a_wire_without_n_are_seeded_apart(
    upstream: Upstream, http: httpx.AsyncClient
) -> None:
    class OneAnswerEach(OpenAIAdapter):  # as llama.cpp's server: no ``n``
        supports_n = False

    upstream.script(*[recorded("openai_success")] * 3)
    config = route_config(upstream.url)
    adapter = OneAnswerEach(http, provider="oa", config=config.providers["oa"])
    router = build_router(config, http, adapters={"oa": adapter})

    await router.complete(LLMRequest(messages=ASK.messages, model="a", n=3, seed=7))

    assert sorted(s.body["seed"] for s in upstream.seen) == [7, 8, 9]
    assert all("n" not in s.body for s in upstream.seen)


async def test_a_server_that_ignores_n_gets_the_missing_answers_as_calls_of_their_own(
    upstream: Upstream, http: httpx.AsyncClient
) -> None:
    # llama.cpp's OpenAI-compatible server takes ``n`` and answers once.
    upstream.script(*[recorded("openai_success")] * 3)
    router = build_router(route_config(upstream.url), http)

    response = await router.complete(LLMRequest(messages=ASK.messages, model="a", n=3, seed=7))

    assert paths(upstream) == [OPENAI] * 3
    assert [s.body.get("n") for s in upstream.seen] == [3, None, None]
    assert sorted(s.body["seed"] for s in upstream.seen[1:]) == [8, 9]
    assert len(response.choices) == 3
    single = await router.complete(LLMRequest(messages=ASK.messages, model="a"))
    assert single.usage is not None
    assert response.usage is not None
    assert response.usage.output_tokens == 3 * single.usage.output_tokens


async def test_n_calls_that_all_fail_raise_the_failure(
    upstream: Upstream, http: httpx.AsyncClient
) -> None:
    upstream.script(recorded("anthropic_401"))
    router = build_router(route_config(upstream.url), http)

    with pytest.raises(ProviderConfigError):
        await router.complete(LLMRequest(messages=ASK.messages, model="b", n=2))
