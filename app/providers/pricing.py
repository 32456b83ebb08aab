"""What a call costs: USD per million input and output tokens, per configured model, and
the prompt cache's own rates where the model has them.

An unknown price is ``None`` and says so, never a silent 0::

    price = Price(input_usd_per_mtok=0.15, output_usd_per_mtok=0.60,
                  cached_input_usd_per_mtok=0.075)
    price.cost(Usage(1000, 200))                                 # 0.00027
    price.cost(Usage(1000, 200, cached_input_tokens=800))        # 0.00021
    cost_of(None, Usage(1000, 200), "m")
    # (None, "no price configured for model m; cost unknown")
"""

from __future__ import annotations

from dataclasses import dataclass

from app.core.turn.model import Usage

_PER_MTOK = 1_000_000


@dataclass(frozen=True, slots=True)
class Price:
    """USD per million tokens of each kind.

    Cached input and cache writes (Anthropic) are billed at their own rates when known, else
    at the input rate: an upper bound for reads, and what a model without a known write rate
    is assumed to charge for writes.
    """

    input_usd_per_mtok: float
    output_usd_per_mtok: float
    cached_input_usd_per_mtok: float | None = None
    cache_write_usd_per_mtok: float | None = None

    def cost(self, usage: Usage) -> float:
        total = max(usage.input_tokens, 0)
        cached = min(max(usage.cached_input_tokens, 0), total)
        written = min(max(usage.cache_write_tokens, 0), total - cached)
        plain = total - cached - written
        read_rate = self.input_usd_per_mtok
        if self.cached_input_usd_per_mtok is not None:
            read_rate = self.cached_input_usd_per_mtok
        write_rate = self.input_usd_per_mtok
        if self.cache_write_usd_per_mtok is not None:
            write_rate = self.cache_write_usd_per_mtok
        return (
            plain * self.input_usd_per_mtok
            + cached * read_rate
            + written * write_rate
            + usage.output_tokens * self.output_usd_per_mtok
        ) / _PER_MTOK

    def estimate(self, input_tokens: int, output_tokens: int) -> float:
        """The most a call of that size can cost.

        Every input token at the dearest input rate (a cache write can cost more than plain
        input), none read from the cache.
        """
        rate = max(self.input_usd_per_mtok, self.cache_write_usd_per_mtok or 0.0)
        return (input_tokens * rate + output_tokens * self.output_usd_per_mtok) / _PER_MTOK


def unknown_price_warning(model: str) -> str:
    return f"no price configured for model {model}; cost unknown"


def cost_of(
    price: Price | None, usage: Usage | None, model: str
) -> tuple[float | None, str | None]:
    """``(cost_usd, warning)`` for one call; exactly one of them is ``None``."""
    if price is None:
        return None, unknown_price_warning(model)
    if usage is None:
        return None, f"model {model} reported no token usage; cost unknown"
    return price.cost(usage), None
