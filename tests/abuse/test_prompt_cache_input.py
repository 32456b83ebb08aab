"""Hostile input around prompt caching: cache prices and switches in the providers file,
cache figures in a provider's reply, and cache fields sent to the simulator.

A providers file with an infinite, negative or non-numeric cache price stops start-up
naming the field (an infinite price would make every cost, and the JSON, unusable). A
provider that reports more cached tokens than the prompt had, or negative ones, is
bounded; one that sends text where a count belongs is a malformed reply, not a crash.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from app.core.turn.model import LLMRequest, Message, Usage
from app.core.wire.errors import InvalidInput, ProviderUnavailable
from app.providers.config import load_providers
from app.providers.http import make_client
from app.providers.retry import set_testing
from app.providers.router import build_router
from reprompt_sim.server import SimConfig, serve_in_background
from tests.providers.upstream import Reply, Upstream, one_model


@pytest.mark.parametrize(
    ("line", "field"),
    [
        ("cached_input_usd_per_mtok = inf", "models.m.cached_input_usd_per_mtok"),
        ("cache_write_usd_per_mtok = nan", "models.m.cache_write_usd_per_mtok"),
        ("cached_input_usd_per_mtok = -0.5", "models.m.cached_input_usd_per_mtok"),
        ("cache_write_usd_per_mtok = [1, 2]", "models.m.cache_write_usd_per_mtok"),
        ("input_usd_per_mtok = inf", "models.m.input_usd_per_mtok"),
        ("prompt_cache = 3", "models.m.prompt_cache"),
    ],
)
def test_a_hostile_cache_setting_stops_start_up_naming_the_field(
    tmp_path: Path, line: str, field: str
) -> None:
    path = tmp_path / "providers.toml"
    prices = "" if line.startswith("input") else "input_usd_per_mtok = 1\n"
    path.write_text(
        '[providers.p]\nkind = "openai"\n[models.m]\nprovider = "p"\n'
        f"{prices}output_usd_per_mtok = 2\n{line}\n"
    )
    with pytest.raises(InvalidInput) as caught:
        load_providers({}, path=str(path))
    assert caught.value.field == field


@pytest.fixture
def upstream() -> Iterator[Upstream]:
    server = Upstream()
    server.start()
    set_testing(True)
    try:
        yield server
    finally:
        set_testing(False)
        server.stop()


@pytest.fixture
async def http() -> AsyncIterator[httpx.AsyncClient]:
    async with make_client(trust_env=False) as client:
        yield client


def chat(usage: dict[str, Any]) -> Reply:
    message = {"role": "assistant", "content": "{}"}
    return Reply(body={"choices": [{"message": message, "finish_reason": "stop"}], "usage": usage})


def messages(usage: dict[str, Any]) -> Reply:
    content = [{"type": "text", "text": "{}"}]
    return Reply(body={"content": content, "stop_reason": "end_turn", "usage": usage})


ASK = LLMRequest(messages=(Message("user", "hi"),), cache_key="k", cache_prefix=1)


@pytest.mark.parametrize(
    ("kind", "reply", "expected"),
    [
        ("openai", chat({"prompt_tokens": 10, "completion_tokens": 1,
                         "prompt_tokens_details": {"cached_tokens": 10**12}}),
         Usage(10, 1, cached_input_tokens=10)),
        ("openai", chat({"prompt_tokens": 10, "completion_tokens": 1,
                         "prompt_tokens_details": {"cached_tokens": -5}}),
         Usage(10, 1)),
        ("anthropic", messages({"input_tokens": 4, "output_tokens": 1,
                                "cache_read_input_tokens": -100,
                                "cache_creation_input_tokens": 6}),
         Usage(10, 1, cache_write_tokens=6)),
    ],
)  # fmt: skip
async def test_impossible_cache_counts_are_bounded(
    upstream: Upstream, http: httpx.AsyncClient, kind: str, reply: Reply, expected: Usage
) -> None:
    upstream.script(reply)
    router = build_router(
        one_model(upstream.url, kind=kind, input_usd_per_mtok=1.0, output_usd_per_mtok=1.0), http
    )
    response = await router.complete(ASK)
    assert response.usage == expected
    assert response.cost_usd is not None
    assert 0 <= response.cost_usd < 1e-3


@pytest.mark.parametrize(
    ("kind", "reply"),
    [
        ("openai", chat({"prompt_tokens": 10, "completion_tokens": 1,
                         "prompt_tokens_details": {"cached_tokens": "lots"}})),
        ("anthropic", messages({"input_tokens": 4, "output_tokens": 1,
                                "cache_read_input_tokens": {"n": 1}})),
    ],
)  # fmt: skip
async def test_a_cache_count_that_is_not_a_number_is_a_malformed_reply(
    upstream: Upstream, http: httpx.AsyncClient, kind: str, reply: Reply
) -> None:
    upstream.script(reply)
    router = build_router(one_model(upstream.url, kind=kind, max_attempts=1), http)
    with pytest.raises(ProviderUnavailable) as caught:
        await router.complete(ASK)
    assert "malformed" in caught.value.detail


@pytest.fixture(scope="module")
def sim() -> Iterator[httpx.Client]:
    with serve_in_background(SimConfig(seed=3)) as url, httpx.Client(base_url=url) as client:
        yield client


def test_the_simulator_bounds_what_it_remembers_of_huge_keyed_prompts(sim: httpx.Client) -> None:
    big = "x" * 2_000_000
    for i in range(3):
        body = {
            "model": "m",
            "messages": [{"role": "system", "content": big}, {"role": "user", "content": str(i)}],
            "prompt_cache_key": "k" * 10_000,
        }
        r = sim.post("/v1/chat/completions", json=body, timeout=30)
        assert r.status_code == 200
    assert r.json()["usage"]["prompt_tokens_details"]["cached_tokens"] >= 499_968


@pytest.mark.parametrize(
    "block",
    [
        {"type": "text", "text": "a", "cache_control": "ephemeral"},
        {"type": "text", "text": "a", "cache_control": {"type": ["ephemeral"]}},
        {"type": "text", "text": "a", "cache_control": None, "extra": 1},
    ],
)
def test_the_simulator_refuses_a_malformed_cache_control(
    sim: httpx.Client, block: dict[str, Any]
) -> None:
    body = {"model": "m", "max_tokens": 10, "messages": [{"role": "user", "content": [block]}]}
    r = sim.post("/v1/messages", json=body)
    if block.get("cache_control") is None:
        assert r.status_code == 200  # no mark at all
    else:
        assert r.status_code == 400
        assert "cache_control" in r.json()["error"]["message"]


def test_the_simulator_refuses_a_flood_of_cache_marks(sim: httpx.Client) -> None:
    mark = {"type": "ephemeral"}
    blocks = [{"type": "text", "text": str(i), "cache_control": mark} for i in range(10_000)]
    body = {"model": "m", "max_tokens": 10, "messages": [{"role": "user", "content": blocks}]}
    r = sim.post("/v1/messages", json=body)
    assert r.status_code == 400
    assert "Found 10000" in r.json()["error"]["message"]
