"""Prices of well-known models from a maintained catalog (``genai-prices``, the pydantic
team's, bundled data, no network), for models the providers file gives no price::

    catalog_price("openai", "gpt-4o-mini")     # Price(0.15, 0.6, 0.075, None): input,
                                                # output, cached input, cache write
    catalog_price("openai", "my-finetune")      # None: cost stays unknown, and says so

Why this catalog: it names models as providers' APIs do (so ``OPENAI_MODEL=gpt-4o-mini``
is found as is), covers OpenAI and Anthropic with cached-input prices, ships its data in
the wheel (the service never fetches prices at run time), and is typed. LiteLLM's
``model_prices_and_context_window.json`` needs LiteLLM or a copied file to track by hand;
tokencost wraps that same file.
"""

from __future__ import annotations

from functools import cache
from importlib.metadata import version

from app.providers.pricing import Price

# Our provider kinds → the catalog's provider ids.
_PROVIDERS = {"openai": "openai", "anthropic": "anthropic"}
# Prices are read for this many tokens and scaled to a million: a million tokens in one
# call would be priced at a long-context tier (claude-sonnet-4-5 costs twice as much per
# token past 200k input tokens), which is not the price of an ordinary call.
_SAMPLE = 1_000
_SCALE = 1_000_000 // _SAMPLE


def catalog_source() -> str:
    return f"genai-prices {version('genai-prices')}"


@cache
def catalog_price(kind: str, model: str) -> Price | None:
    """The catalog's price for ``model``, or None when it does not know the model or kind.

    Cached-input and cache-write rates are filled in where the catalog has them.
    """
    provider = _PROVIDERS.get(kind)
    if provider is None:
        return None
    from genai_prices import Usage, calc_price  # the catalog loads its data on first use

    try:
        per_input = calc_price(Usage(input_tokens=_SAMPLE), model_ref=model, provider_id=provider)
        per_output = calc_price(Usage(output_tokens=_SAMPLE), model_ref=model, provider_id=provider)
        # Cache tokens are part of the input in the catalog's usage: input tokens all
        # read from (or written to) the cache cost the cache's rate.
        read = calc_price(
            Usage(input_tokens=_SAMPLE, cache_read_tokens=_SAMPLE),
            model_ref=model,
            provider_id=provider,
        )
        write = calc_price(
            Usage(input_tokens=_SAMPLE, cache_write_tokens=_SAMPLE),
            model_ref=model,
            provider_id=provider,
        )
    except (LookupError, ValueError):
        return None
    rates = read.model_price
    # Without a rate of its own the catalog bills cache tokens as input: unknown here.
    has_read = getattr(rates, "cache_read_mtok", None) is not None
    has_write = getattr(rates, "cache_write_mtok", None) is not None
    return Price(
        float(per_input.total_price * _SCALE),
        float(per_output.total_price * _SCALE),
        float(read.total_price * _SCALE) if has_read else None,
        float(write.total_price * _SCALE) if has_write else None,
    )
