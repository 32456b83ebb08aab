"""One record per model call: what was asked, what came back, what the loop made of it."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal

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
]


@dataclass(frozen=True, slots=True)
class TurnRecord:
    index: int
    type: TurnType
    outcome: Outcome
    attempt: int
    error_code: str | None
    diagnosis: str | None
    input_tokens: int
    output_tokens: int
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
    transport_retries: int
    transport_wait_ms: int
    escalated: bool
    simplified: bool
    warnings: tuple[str, ...]
    answer: str | None
    started_at: str

    def to_dict(self) -> dict[str, Any]:
        return {
            "index": self.index,
            "type": self.type,
            "outcome": self.outcome,
            "attempt": self.attempt,
            "errorCode": self.error_code,
            "diagnosis": self.diagnosis,
            "usage": {"inputTokens": self.input_tokens, "outputTokens": self.output_tokens},
            "costUsd": self.cost_usd,
            "latencyMs": self.latency_ms,
            "provider": self.provider,
            "model": self.model,
            "finishReason": self.finish_reason,
            "maxOutputTokens": self.max_output_tokens,
            "promptTokensEstimate": self.prompt_tokens_estimate,
            "messageCount": self.message_count,
            "toolsOffered": self.tools_offered,
            "toolCalls": list(self.tool_calls),
            "transportRetries": self.transport_retries,
            "transportWaitMs": self.transport_wait_ms,
            "escalated": self.escalated,
            "simplified": self.simplified,
            "warnings": list(self.warnings),
            "answer": self.answer,
            "startedAt": self.started_at,
        }
