"""What a call costs: USD per million input and output tokens, per configured model.

An unknown price is ``None`` and says so, never a silent 0::

    price = Price(input_usd_per_mtok=0.15, output_usd_per_mtok=0.60)
    price.cost(Usage(1000, 200))                    # 0.00027
    cost_of(None, Usage(1000, 200), "m")
    # (None, "no price configured for model m; cost unknown")
"""

from __future__ import annotations

from dataclasses import dataclass

from app.core.model import Usage

_PER_MTOK = 1_000_000


@dataclass(frozen=True, slots=True)
class Price:
    input_usd_per_mtok: float
    output_usd_per_mtok: float

    def cost(self, usage: Usage) -> float:
        return self.estimate(usage.input_tokens, usage.output_tokens)

    def estimate(self, input_tokens: int, output_tokens: int) -> float:
        return (
            input_tokens * self.input_usd_per_mtok + output_tokens * self.output_usd_per_mtok
        ) / _PER_MTOK


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
