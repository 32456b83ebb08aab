"""Spec 000's unified budget: work turns, then correction turns, never more calls than both.

    state = TurnBudget(max_turns=3, return_retries=1)
    state.phase      # "normal" while more than one work turn is left
    state.consume()  # after a turn that did not finish the job

Resource limits (tokens, cost, deadline) are checked before each call by ``Limits``.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Literal

from app.core.wire import codes
from app.core.wire.record import TurnType
from app.core.wire.spec import Budget

Phase = Literal["normal", "must_return", "retry", "exhausted"]
# USD for a call of (input_tokens, output_tokens) on the model about to be called; None = no price.
CostEstimator = Callable[[int, int], float | None]


@dataclass(slots=True)
class TurnBudget:
    max_turns: int
    return_retries: int
    work_remaining: int = -1
    retry_remaining: int = -1

    def __post_init__(self) -> None:
        if self.max_turns < 1:
            raise ValueError("max_turns must be >= 1")
        if self.return_retries < 0:
            raise ValueError("return_retries must be >= 0")
        if self.work_remaining < 0:
            self.work_remaining = self.max_turns
        if self.retry_remaining < 0:
            self.retry_remaining = self.return_retries

    @property
    def phase(self) -> Phase:
        if self.work_remaining > 1:
            return "normal"
        if self.work_remaining == 1:
            return "must_return"
        if self.retry_remaining > 0:
            return "retry"
        return "exhausted"

    @property
    def turn_type(self) -> TurnType:
        phase = self.phase
        if phase == "exhausted":
            raise RuntimeError("no turn left")
        return phase

    @property
    def tools_available(self) -> bool:
        return self.work_remaining > 1

    @property
    def calls_left(self) -> int:
        return self.work_remaining + self.retry_remaining

    @property
    def retry_attempt(self) -> int:
        """1-based number of the correction turn about to run (0 outside the retry phase)."""
        return self.return_retries - self.retry_remaining + 1 if self.phase == "retry" else 0

    def consume(self) -> None:
        """A turn ended without finishing the job: spend a work turn if any, else a retry."""
        if self.work_remaining > 0:
            self.work_remaining -= 1
        elif self.retry_remaining > 0:
            self.retry_remaining -= 1
        else:
            raise RuntimeError("budget already exhausted")


@dataclass(frozen=True, slots=True)
class Allowance:
    """Whether a call may go ahead, and with how many output tokens at most."""

    ok: bool
    max_output_tokens: int = 0
    error: str | None = None
    detail: str | None = None


@dataclass(frozen=True, slots=True)
class Limits:
    max_tokens: int | None
    max_cost_usd: float | None
    min_output_tokens: int = 32

    @classmethod
    def of(cls, budget: Budget) -> Limits:
        """A job's token and cost caps (``maxTokens``, ``maxCostUsd``)."""
        max_cost = budget.max_cost_usd
        return cls(budget.max_tokens, None if max_cost is None else float(max_cost))

    def check(
        self,
        *,
        prompt_tokens: int,
        max_output_tokens: int,
        tokens_spent: int,
        cost_spent: float,
        estimate_cost: CostEstimator,
    ) -> Allowance:
        """Shrink the output limit to what the budget still allows; refuse below a floor.

        An upper-bound estimate (the whole prompt plus every output token at full price)
        keeps the job from overspending: it stops rather than crossing a limit.
        """
        out = max_output_tokens
        if self.max_tokens is not None:
            room = self.max_tokens - tokens_spent - prompt_tokens
            if room < min(self.min_output_tokens, out):
                return Allowance(
                    False,
                    error=codes.TOKEN_BUDGET,
                    detail=(
                        f"maxTokens {self.max_tokens} would be exceeded: {tokens_spent} spent, "
                        f"the next call needs about {prompt_tokens} prompt tokens plus output"
                    ),
                )
            out = min(out, room)
        if self.max_cost_usd is not None:
            full = estimate_cost(prompt_tokens, out)
            if full is None:
                return Allowance(
                    False,
                    error=codes.COST_LIMIT,
                    detail="maxCostUsd is set but the model has no configured price",
                )
            room_usd = self.max_cost_usd - cost_spent
            if full > room_usd:
                prompt_only = estimate_cost(prompt_tokens, 0) or 0.0
                per_token = (full - prompt_only) / out if out else 0.0
                fits = int((room_usd - prompt_only) / per_token) if per_token > 0 else out
                if fits < min(self.min_output_tokens, out):
                    return Allowance(
                        False,
                        error=codes.COST_LIMIT,
                        detail=(
                            f"maxCostUsd {self.max_cost_usd} would be exceeded: "
                            f"{cost_spent:.6f} spent, the next call could cost {full:.6f}"
                        ),
                    )
                out = min(out, fits)
        return Allowance(True, max_output_tokens=out)


def estimate_tokens(text: str) -> int:
    """A provider-neutral upper-ish estimate: about four characters a token."""
    return (len(text) + 3) // 4
