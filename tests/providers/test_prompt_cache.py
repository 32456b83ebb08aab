"""Prompt caching at the providers' edge: each provider's cached-token usage normalised
(ours counts every prompt token in ``input_tokens``), priced at the cache's rates, and
switched per model in the providers file."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from app.core.turn.model import LLMRequest, Message, ToolCall, Usage
from app.core.wire.errors import InvalidInput
from app.providers import anthropic, openai
from app.providers.catalog import catalog_price
from app.providers.config import ModelConfig, load_providers
from app.providers.pricing import Price

CLAUDE = ModelConfig(provider="p", name="claude-sonnet-4-5", structured="tool", prompt_cache=True)


def openai_body(usage: dict[str, Any]) -> dict[str, Any]:
    message = {"role": "assistant", "content": "{}"}
    return {"choices": [{"message": message, "finish_reason": "stop"}], "usage": usage}


def anthropic_body(usage: dict[str, Any]) -> dict[str, Any]:
    return {"content": [{"type": "text", "text": "{}"}], "stop_reason": "end_turn", "usage": usage}


def openai_usage(raw: dict[str, Any]) -> Usage | None:
    body = openai_body(raw)
    return openai.parse_response(body, model="m", provider="p", mechanism="prompt").usage


def anthropic_usage(raw: dict[str, Any]) -> Usage | None:
    body = anthropic_body(raw)
    return anthropic.parse_response(body, model="m", provider="p", mechanism="prompt").usage


def test_openai_prompt_tokens_already_count_the_cached_ones() -> None:
    usage = openai_usage(
        {
            "prompt_tokens": 2006,
            "completion_tokens": 300,
            "prompt_tokens_details": {"cached_tokens": 1920, "audio_tokens": 0},
        }
    )
    assert usage == Usage(2006, 300, cached_input_tokens=1920)


@pytest.mark.parametrize(
    "raw",
    [
        {"prompt_tokens": 50, "completion_tokens": 5},
        {"prompt_tokens": 50, "completion_tokens": 5, "prompt_tokens_details": None},
        {"prompt_tokens": 50, "completion_tokens": 5, "prompt_tokens_details": {}},
    ],
)
def test_openai_without_cache_details_has_no_cached_tokens(raw: dict[str, Any]) -> None:
    assert openai_usage(raw) == Usage(50, 5)


def test_anthropic_input_tokens_leave_out_cache_reads_and_writes() -> None:
    usage = anthropic_usage(
        {
            "input_tokens": 21,
            "cache_read_input_tokens": 1800,
            "cache_creation_input_tokens": 188,
            "output_tokens": 90,
        }
    )
    assert usage == Usage(2009, 90, cached_input_tokens=1800, cache_write_tokens=188)


def test_anthropic_without_cache_fields_is_plain_input() -> None:
    assert anthropic_usage({"input_tokens": 21, "output_tokens": 9}) == Usage(21, 9)


def test_cached_input_and_cache_writes_are_priced_at_their_rates() -> None:
    price = Price(3.0, 15.0, cached_input_usd_per_mtok=0.3, cache_write_usd_per_mtok=3.75)
    usage = Usage(2009, 90, cached_input_tokens=1800, cache_write_tokens=188)
    expected = (21 * 3.0 + 1800 * 0.3 + 188 * 3.75 + 90 * 15.0) / 1e6
    assert price.cost(usage) == pytest.approx(expected)
    assert price.cost(usage) < Price(3.0, 15.0).cost(usage)


def test_without_cache_rates_cached_tokens_cost_the_input_price() -> None:
    usage = Usage(2000, 100, cached_input_tokens=1500)
    assert Price(1.0, 2.0).cost(usage) == pytest.approx((2000 * 1.0 + 100 * 2.0) / 1e6)


def test_the_budget_estimate_assumes_the_dearest_input_rate() -> None:
    price = Price(3.0, 15.0, cached_input_usd_per_mtok=0.3, cache_write_usd_per_mtok=3.75)
    assert price.estimate(1000, 100) == pytest.approx((1000 * 3.75 + 100 * 15.0) / 1e6)
    assert Price(3.0, 15.0).estimate(1000, 100) == pytest.approx((3000 + 1500) / 1e6)


def test_the_catalog_carries_cache_rates() -> None:
    mini = catalog_price("openai", "gpt-4o-mini")
    assert mini == Price(0.15, 0.6, cached_input_usd_per_mtok=0.075)
    haiku = catalog_price("anthropic", "claude-haiku-4-5")
    assert haiku is not None
    assert haiku.cached_input_usd_per_mtok == pytest.approx(0.1)
    assert haiku.cache_write_usd_per_mtok == pytest.approx(1.25)
    # An ordinary call's price, not the long-context tier (past 200k input tokens).
    assert catalog_price("anthropic", "claude-sonnet-4-5") == Price(3.0, 15.0, 0.3, 3.75)
    old = catalog_price("openai", "gpt-3.5-turbo")
    assert old is not None
    assert old.cached_input_usd_per_mtok is None


PROVIDERS = """
[providers.openai]
kind = "openai"
[providers.anthropic]
kind = "anthropic"
[providers.vllm]
kind = "openai"
base_url = "http://127.0.0.1:8000/v1"

[models.gpt]
provider = "openai"
input_usd_per_mtok = 0.15
output_usd_per_mtok = 0.60
cached_input_usd_per_mtok = 0.075
[models.claude]
provider = "anthropic"
input_usd_per_mtok = 3.0
output_usd_per_mtok = 15.0
cached_input_usd_per_mtok = 0.30
cache_write_usd_per_mtok = 3.75
[models.qwen]
provider = "vllm"
[models.qwen-cached]
provider = "vllm"
prompt_cache = true
[models.claude-plain]
provider = "anthropic"
prompt_cache = false
"""


def test_prompt_cache_is_on_for_the_vendors_and_off_for_other_servers(tmp_path: Path) -> None:
    path = tmp_path / "providers.toml"
    path.write_text(PROVIDERS)
    models = load_providers({}, path=str(path)).models
    assert {name: m.prompt_cache for name, m in models.items()} == {
        "gpt": True,
        "claude": True,
        "qwen": False,
        "qwen-cached": True,
        "claude-plain": False,
    }
    assert models["claude"].price == Price(3.0, 15.0, 0.30, 3.75)
    assert models["gpt"].price == Price(0.15, 0.60, 0.075, None)


@pytest.mark.parametrize(
    ("line", "field"),
    [
        ("cached_input_usd_per_mtok = -1", "models.m.cached_input_usd_per_mtok"),
        ("cache_write_usd_per_mtok = 'cheap'", "models.m.cache_write_usd_per_mtok"),
        ("prompt_cache = 'yes please'", "models.m.prompt_cache"),
    ],
)
def test_a_bad_cache_setting_is_invalid_input_naming_the_field(
    tmp_path: Path, line: str, field: str
) -> None:
    path = tmp_path / "providers.toml"
    path.write_text(f'[providers.p]\nkind = "openai"\n[models.m]\nprovider = "p"\n{line}\n')
    with pytest.raises(InvalidInput) as caught:
        load_providers({}, path=str(path))
    assert caught.value.field == field


def test_a_cache_rate_without_the_model_prices_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "providers.toml"
    path.write_text(
        '[providers.p]\nkind = "openai"\n[models.m]\nprovider = "p"\n'
        "cached_input_usd_per_mtok = 0.1\n"
    )
    with pytest.raises(InvalidInput) as caught:
        load_providers({}, path=str(path))
    assert "need input_usd_per_mtok" in caught.value.detail
    assert caught.value.field == "models.m"


LONG = "Reference text the model reads on every call. " * 120  # ~1,400 tokens


def test_a_prefix_that_ends_at_the_system_prompt_marks_the_system_block() -> None:
    request = LLMRequest(
        messages=(Message("system", LONG), Message("user", "Ada, 36")), cache_prefix=1
    )
    body, _ = anthropic.request_body(request, spec=CLAUDE, mechanism="prompt")
    assert body["system"] == [
        {"type": "text", "text": LONG, "cache_control": {"type": "ephemeral"}}
    ]
    assert "cache_control" not in json.dumps(body["messages"])


def test_a_prefix_that_ends_in_tool_results_marks_the_last_result_before_the_note() -> None:
    calls = (ToolCall("t1", "lookup", "{}"), ToolCall("t2", "lookup", '{"q": 2}'))
    request = LLMRequest(
        messages=(
            Message("system", "You extract."),
            Message("user", LONG),
            Message("assistant", "", tool_calls=calls),
            Message("tool", "4.50", tool_call_id="t1"),
            Message("tool", "7.25", tool_call_id="t2"),
            Message("user", "Turn 2 of 3."),
        ),
        cache_prefix=5,
    )
    body, _ = anthropic.request_body(request, spec=CLAUDE, mechanism="prompt")
    last = body["messages"][-1]["content"]
    assert [b["type"] for b in last] == ["tool_result", "tool_result", "text"]
    assert "cache_control" not in last[0]
    assert last[1]["cache_control"] == {"type": "ephemeral"}
    assert "cache_control" not in last[2]
    assert body["system"] == "You extract."
