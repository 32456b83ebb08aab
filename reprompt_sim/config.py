"""The simulator's settings: seed, failure rates, transport faults and timing.

::

    SimConfig(seed=7, failure_rates={"broken_json": 0.2, "wrong_type": 0.2}, fix_probability=0.8)
    SimConfig(seed=1, failure_rates=parse_rates("prose=0.5,refusal=0.1"))
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Final

# What the model "writes" wrong. Order matters: it is the order rates are walked in.
ANSWER_MODES: Final = (
    "broken_json",
    "wrong_type",
    "missing_field",
    "extra_field",
    "prose",
    "code_fence",
    "python_literals",
    "trailing_comma",
    "refusal",
    "truncation",
    "semantic",
    "missing_comma",
    "runaway_number",
)
# What goes wrong before the model answers. "overloaded" is a 503 (OpenAI) or 529 (Anthropic).
TRANSPORT_MODES: Final = ("rate_limit", "server_error", "overloaded", "slow")
OK: Final = "ok"
SCRIPT_ENTRIES: Final = (OK, *ANSWER_MODES, *TRANSPORT_MODES)

DEFAULT_MODEL: Final = "reprompt-sim"
# The tool a client offers for the answer itself (reprompt's name for it). Every other tool
# is a client tool, which the model calls only when a script says so.
OUTPUT_TOOL: Final = "final_answer"


@dataclass(frozen=True, slots=True)
class SimConfig:
    """How flaky the simulated model is. The defaults describe a perfect, instant model.

    ``failure_rates`` maps answer modes to the probability that a *first* answer has
    that defect; the remaining probability is a correct answer. Re-asks are governed by
    ``fix_probability`` (the feedback names the defect) and ``blind_fix_probability``.
    """

    seed: int = 0
    failure_rates: Mapping[str, float] = field(default_factory=dict)
    fix_probability: float = 0.8
    blind_fix_probability: float = 0.1
    rate_limit_rate: float = 0.0
    retry_after_s: float = 1.0
    server_error_rate: float = 0.0
    latency_ms: float = 0.0
    jitter_ms: float = 0.0
    slow_rate: float = 0.0
    slow_ms: float = 2000.0
    verbose_tokens: int = 400
    # OpenAI also caches prompts sent without a ``prompt_cache_key`` (best effort, routed
    # by their prefix): with this, keyless requests share one cache namespace here.
    cache_keyless: bool = False
    # Batch APIs (reprompt_sim.batch): how long a batch waits before its lines are answered,
    # and, to test expiry, how many lines a batch answers before it expires (None: all).
    batch_turnaround_ms: float = 0.0
    batch_expire_after: int | None = None
    # Streaming (``"stream": true``): the time between two tokens of a streamed answer.
    token_delay_ms: float = 0.0
    # After this many tokens a streamed answer stalls, its connection open, until the client
    # leaves (None: never): a test cancels it knowing every token sent has arrived.
    stall_after_tokens: int | None = None

    def __post_init__(self) -> None:
        check_rates(self.failure_rates)
        for name in (
            "fix_probability",
            "blind_fix_probability",
            "rate_limit_rate",
            "server_error_rate",
            "slow_rate",
        ):
            _check_probability(name, getattr(self, name))
        if self.batch_expire_after is not None and self.batch_expire_after < 0:
            raise ValueError("batch_expire_after must be >= 0")
        for name in (
            "retry_after_s",
            "latency_ms",
            "jitter_ms",
            "slow_ms",
            "batch_turnaround_ms",
            "token_delay_ms",
        ):
            if getattr(self, name) < 0:
                raise ValueError(f"{name} must be >= 0")
        if self.stall_after_tokens is not None and self.stall_after_tokens < 0:
            raise ValueError("stall_after_tokens must be >= 0")
        if self.verbose_tokens < 0:
            raise ValueError("verbose_tokens must be >= 0")


def check_rates(rates: Mapping[str, float]) -> None:
    """Raise ``ValueError`` unless ``rates`` maps answer modes to probabilities summing to <= 1."""
    for mode, rate in rates.items():
        if mode not in ANSWER_MODES:
            hint = " (a transport fault: use its own rate)" if mode in TRANSPORT_MODES else ""
            raise ValueError(
                f"unknown failure mode {mode!r}{hint}; known: {', '.join(ANSWER_MODES)}"
            )
        _check_probability(f"rate of {mode}", rate)
    total = sum(rates.values())
    if total > 1.0 + 1e-9:
        raise ValueError(f"failure rates sum to {total:g}, more than 1")


def parse_rates(text: str) -> dict[str, float]:
    """``"broken_json=0.2,wrong_type=0.1"`` → ``{"broken_json": 0.2, "wrong_type": 0.1}``."""
    rates: dict[str, float] = {}
    for item in text.split(","):
        if not item.strip():
            continue
        mode, sep, value = item.partition("=")
        if not sep:
            raise ValueError(f"expected MODE=RATE, got {item.strip()!r}")
        try:
            rates[mode.strip()] = float(value)
        except ValueError:
            raise ValueError(f"rate of {mode.strip()!r} is not a number: {value!r}") from None
    check_rates(rates)
    return rates


def _check_probability(name: str, value: float) -> None:
    if not 0.0 <= value <= 1.0:
        raise ValueError(f"{name} must be between 0 and 1, got {value!r}")
