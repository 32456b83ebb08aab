"""The simulator reports cached prompt tokens as each provider does: OpenAI for a prefix
repeated under a ``prompt_cache_key``, Anthropic for a prefix marked ``cache_control``."""

from __future__ import annotations

import uuid
from typing import Any

import httpx

from reprompt_sim.cache import PromptCache, Unit
from tests.sim.bodies import anthropic, msg, openai

LONG = "The reference text the model reads on every call. " * 120  # ~6,100 characters


def marked(text: str) -> dict[str, Any]:
    return {"type": "text", "text": text, "cache_control": {"type": "ephemeral"}}


# -- the cache itself --------------------------------------------------------------------------


def test_openai_caches_a_repeated_prefix_under_its_key_in_128_token_steps() -> None:
    cache = PromptCache()
    first = [("tools", ""), ("system", LONG), ("user", "one")]
    again = [("tools", ""), ("system", LONG), ("user", "two, longer")]
    assert cache.openai("k", first, prompt_tokens=1600) == 0
    cached = cache.openai("k", again, prompt_tokens=1600)
    assert cached % 128 == 0
    assert 1024 <= cached <= len(LONG) // 4 < cached + 128
    assert cache.openai("other", again, prompt_tokens=1600) == 0  # another key: its own cache
    assert cache.openai(None, again, prompt_tokens=1600) == 0  # no key: not cached here


def test_openai_keyless_requests_share_one_cache_when_asked_to() -> None:
    cache = PromptCache(keyless=True)
    first = [("tools", ""), ("system", LONG), ("user", "one")]
    again = [("tools", ""), ("system", LONG), ("user", "two, longer")]
    assert cache.openai(None, first, prompt_tokens=1600) == 0
    assert cache.openai(None, again, prompt_tokens=1600) >= 1024
    assert cache.openai("k", again, prompt_tokens=1600) == 0  # a key: its own cache still


def test_openai_never_reports_more_than_the_prompt() -> None:
    cache = PromptCache()
    segments = [("system", LONG)]
    cache.openai("k", segments, prompt_tokens=1100)
    assert cache.openai("k", segments, prompt_tokens=1100) == 1024


def test_openai_caches_nothing_under_1024_tokens() -> None:
    cache = PromptCache()
    short = [("tools", ""), ("system", "x" * 2000), ("user", "q")]
    cache.openai("k", short, prompt_tokens=501)
    assert cache.openai("k", short, prompt_tokens=501) == 0


def test_openai_shares_the_common_prefix_of_a_message_that_grew() -> None:
    cache = PromptCache()
    cache.openai("k", [("system", LONG + "\n\nturn 1 of 3")], prompt_tokens=1600)
    cached = cache.openai("k", [("system", LONG), ("assistant", "{}")], prompt_tokens=1600)
    assert 1024 <= cached <= len(LONG) // 4 < cached + 128


def test_anthropic_writes_a_marked_prefix_then_reads_it_back() -> None:
    cache = PromptCache()
    units = [Unit("system", 4400, marked=True), Unit("user-1", 400)]
    assert cache.anthropic(units, prompt_tokens=1200) == (0, 1100)
    later = [Unit("system", 4400, marked=True), Unit("user-2", 800)]
    assert cache.anthropic(later, prompt_tokens=1300) == (1100, 0)


def test_anthropic_finds_an_earlier_prefix_within_20_blocks_and_writes_the_rest() -> None:
    cache = PromptCache()
    head = [Unit("system", 4400), Unit("task", 400, marked=True)]
    cache.anthropic([*head, Unit("note", 40)], prompt_tokens=1210)
    grown = [Unit("system", 4400), Unit("task", 400), Unit("work", 800, marked=True)]
    assert cache.anthropic(grown, prompt_tokens=1400) == (1200, 200)


def test_anthropic_does_not_cache_a_prefix_under_1024_tokens() -> None:
    cache = PromptCache()
    units = [Unit("system", 1000, marked=True), Unit("user", 40)]
    assert cache.anthropic(units, prompt_tokens=260) == (0, 0)
    assert cache.anthropic(units, prompt_tokens=260) == (0, 0)


# -- over HTTP -----------------------------------------------------------------------------------


def test_openai_reports_cached_tokens_on_a_repeated_prefix(client: httpx.Client) -> None:
    key = f"job-{uuid.uuid4().hex}"
    system = msg("system", LONG)
    first = client.post(
        "/v1/chat/completions",
        json=openai(system, msg("user", "Record Ada's order."), prompt_cache_key=key),
    ).json()
    assert first["usage"]["prompt_tokens_details"] == {"cached_tokens": 0}
    second = client.post(
        "/v1/chat/completions",
        json=openai(system, msg("user", "Record Bob's order."), prompt_cache_key=key),
    ).json()
    usage = second["usage"]
    cached = usage["prompt_tokens_details"]["cached_tokens"]
    assert cached >= 1024
    assert cached % 128 == 0
    assert usage["prompt_tokens"] > cached  # prompt_tokens counts the cached ones too
    keyless = client.post(
        "/v1/chat/completions", json=openai(system, msg("user", "Record Bob's order."))
    ).json()
    assert keyless["usage"]["prompt_tokens_details"] == {"cached_tokens": 0}


def test_anthropic_reports_cache_writes_then_reads(client: httpx.Client) -> None:
    system = [marked(f"{uuid.uuid4().hex} {LONG}")]
    first = client.post(
        "/v1/messages", json=anthropic(msg("user", "Record Ada's order."), system=system)
    ).json()["usage"]
    assert first["cache_read_input_tokens"] == 0
    assert first["cache_creation_input_tokens"] >= 1024
    second = client.post(
        "/v1/messages", json=anthropic(msg("user", "Record Bob's order, please."), system=system)
    ).json()["usage"]
    assert second["cache_read_input_tokens"] == first["cache_creation_input_tokens"]
    assert second["cache_creation_input_tokens"] == 0
    # input_tokens leaves the cached ones out; the three add up to the whole prompt.
    whole = sum(second[k] for k in ("input_tokens", "cache_read_input_tokens"))
    assert whole > second["cache_read_input_tokens"] > second["input_tokens"] > 0


def test_anthropic_refuses_more_than_four_cache_marks(client: httpx.Client) -> None:
    system = [marked(f"part {i}") for i in range(5)]
    r = client.post("/v1/messages", json=anthropic(msg("user", "hi"), system=system))
    assert r.status_code == 400
    assert "maximum of 4 blocks with cache_control" in r.json()["error"]["message"]


def test_anthropic_refuses_an_unknown_cache_control(client: httpx.Client) -> None:
    system = [{"type": "text", "text": "hi", "cache_control": {"type": "forever"}}]
    r = client.post("/v1/messages", json=anthropic(msg("user", "hi"), system=system))
    assert r.status_code == 400
    assert "system.0.cache_control" in r.json()["error"]["message"]


def test_openai_refuses_a_prompt_cache_key_that_is_not_a_string(client: httpx.Client) -> None:
    body = openai(msg("user", "hi"), prompt_cache_key=7)
    r = client.post("/v1/chat/completions", json=body)
    assert r.status_code == 400
    assert "prompt_cache_key" in r.json()["error"]["message"]
