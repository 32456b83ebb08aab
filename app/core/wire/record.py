"""One record per model call: what was asked, what came back, what the loop made of it."""

from __future__ import annotations

from typing import Final, Literal

from pydantic import Field

from app.core.turn.model import Usage
from app.core.wire.base import Wire

TurnType = Literal["normal", "must_return", "retry"]
Outcome = Literal[
    "success",  # a valid answer: the job is done
    "invalid",  # unparseable or failed the schema
    "rejected",  # passed the schema, failed a validator
    "truncated",  # cut off at the output limit
    "tool_calls",  # work: the model called tools
    "explicit_fail",  # the model said it cannot do the task
    "refusal",  # the provider or model refused
    "error",  # the call itself failed (after transport retries)
    "unchecked",  # a validator that calls out could not judge the answer (not the model's fault)
    "cancelled",  # the job was cancelled during the call or before its answer was used
]
# Answers the loop rejected and asked again about (spec 001's retryCount counts these).
REJECTED: Final[frozenset[str]] = frozenset({"invalid", "rejected", "truncated"})
# Calls whose tokens bought nothing. A failed call ("error") is not here: it spent nothing
# we know of.
WASTED: Final[frozenset[str]] = REJECTED | {"refusal", "explicit_fail", "cancelled"}


ToolMode = Literal["client", "http", "local"]
ToolOutcome = Literal[
    "ok",  # the tool answered
    "error",  # the tool failed (its error went to the model)
    "invalid_arguments",  # the model's arguments were not JSON or did not fit the schema
    "unknown_tool",  # the model called a tool the job does not have
    "requires_action",  # a client tool: the job paused for the client's output
    "timeout",  # the tool did not answer in time (an HTTP tool, or the client)
    "refused",  # the outbound guard refused the tool's URL
    "http_error",  # the tool's URL answered an HTTP error (or a redirect, not followed)
    "too_large",  # the tool's answer was over the byte cap
]


class ToolCallRecord(Wire):
    """One tool call of a work turn: who runs it, how it ended, how long, how many bytes."""

    id: str
    name: str
    mode: ToolMode
    outcome: ToolOutcome
    duration_ms: int | None = Field(
        default=None, description="Time to the answer; null while the client has not answered."
    )
    bytes: int = Field(description="Size of the tool's answer as the model got it (UTF-8).")


class TokenUsage(Wire):
    input_tokens: int = Field(description="Every prompt token, cached ones included.")
    output_tokens: int
    cached_input_tokens: int = Field(
        default=0,
        description="Of inputTokens, those the provider read from its prompt cache "
        "(billed at the cached-input price).",
    )
    cache_write_tokens: int = Field(
        default=0,
        description="Of inputTokens, those the provider wrote to its prompt cache "
        "(Anthropic; billed at the cache-write price).",
    )

    @classmethod
    def of(cls, usage: Usage | None) -> TokenUsage:
        """A call's reported usage (zeros when it reported none)."""
        if usage is None:
            return cls(input_tokens=0, output_tokens=0)
        return cls(
            input_tokens=usage.input_tokens,
            output_tokens=usage.output_tokens,
            cached_input_tokens=usage.cached_input_tokens,
            cache_write_tokens=usage.cache_write_tokens,
        )


class TurnRecord(Wire):
    """One model call. ``job_attempt`` is the worker claim it ran under (1 = first)."""

    index: int
    type: TurnType
    outcome: Outcome
    attempt: int
    error_code: str | None
    diagnosis: str | None = Field(description="The precise error fed back to the model.")
    usage: TokenUsage
    cost_usd: float | None
    latency_ms: int
    provider: str | None
    model: str | None
    finish_reason: str | None
    max_output_tokens: int
    prompt_tokens_estimate: int
    message_count: int
    tools_offered: int
    tool_calls: tuple[str, ...]
    tool_call_details: tuple[ToolCallRecord, ...] = Field(
        default=(), description="Each tool call of a work turn, in order."
    )
    transport_retries: int
    transport_wait_ms: int
    escalated: bool
    simplified: bool
    warnings: tuple[str, ...]
    answer: str | None = Field(description="The model's answer, quoted and cut to size.")
    repeat_of: int | None = Field(
        default=None, description="A rejected answer the same as the one of this earlier turn."
    )
    patch: tuple[str, ...] | None = Field(
        default=None,
        description="A field-level re-ask: the JSON Pointers of the parts asked for again "
        "(the answer was merged into the previous one and checked whole).",
    )
    candidates: int | None = Field(
        default=None,
        description="Best-of-N: how many answers the call gave (usage and cost count them all).",
    )
    chosen: int | None = Field(
        default=None, description="Best-of-N: the 0-based index of the answer that was kept."
    )
    started_at: str
    job_attempt: int | None = None

    @property
    def tokens(self) -> int:
        return self.usage.input_tokens + self.usage.output_tokens

    @property
    def wasted(self) -> bool:
        return self.outcome in WASTED


class Rejection(Wire):
    """One entry of a job's error evolution (spec 000): a rejected answer and why."""

    turn: int
    type: TurnType
    outcome: Outcome
    error_code: str | None
    diagnosis: str


class Spend(Wire):
    """What a job's calls cost over all its attempts (kept by the store as turns land)."""

    calls: int = 0
    input_tokens: int = 0
    output_tokens: int = 0
    cost: float = 0.0
    cost_known: bool = True
    cached_input_tokens: int = 0
    cache_write_tokens: int = 0

    def plus(self, other: Spend | None) -> Spend:
        if other is None:
            return self
        return Spend(
            calls=self.calls + other.calls,
            input_tokens=self.input_tokens + other.input_tokens,
            output_tokens=self.output_tokens + other.output_tokens,
            cost=self.cost + other.cost,
            cost_known=self.cost_known and other.cost_known,
            cached_input_tokens=self.cached_input_tokens + other.cached_input_tokens,
            cache_write_tokens=self.cache_write_tokens + other.cache_write_tokens,
        )

    @classmethod
    def of(cls, record: TurnRecord) -> Spend:
        """One call's spend (what the store adds to the running total)."""
        return cls(
            calls=1,
            input_tokens=record.usage.input_tokens,
            output_tokens=record.usage.output_tokens,
            cost=record.cost_usd or 0.0,
            cost_known=record.cost_usd is not None,
            cached_input_tokens=record.usage.cached_input_tokens,
            cache_write_tokens=record.usage.cache_write_tokens,
        )
