"""What a job spent and how it ended: turn records, tokens, cost, warnings, rejections,
and the envelope built from them.

    ledger = Ledger(clock)
    ledger.account(response, messages)        # after every call
    ledger.turns.append(record)
    envelope = ledger.success(data, repairs, grounding)  # or ledger.failure(code, detail, ...)
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from app.core.turn.budget import estimate_tokens
from app.core.turn.clock import Clock, iso
from app.core.turn.model import LLMResponse, Message
from app.core.turn.templates import render
from app.core.wire.envelope import Envelope, Execution, GroundingSpan
from app.core.wire.record import REJECTED, Rejection, TurnRecord
from app.core.wire.spec import FallbackSpec


@dataclass
class Spend:
    input_tokens: int = 0
    output_tokens: int = 0
    cost: float = 0.0
    cost_known: bool = True
    transport_retries: int = 0
    # Of input_tokens, those read from and written to the provider's prompt cache.
    cached_input_tokens: int = 0
    cache_write_tokens: int = 0
    # Of the above, what validators that call a model (judges) spent.
    validator_calls: int = 0
    validator_tokens: int = 0
    validator_cost: float = 0.0
    validator_cost_known: bool = True

    @property
    def tokens(self) -> int:
        return self.input_tokens + self.output_tokens


class Ledger:
    def __init__(self, clock: Clock) -> None:
        self.clock = clock
        self.turns: list[TurnRecord] = []
        self.history: list[Rejection] = []  # spec 000 "error evolution"
        self.spend = Spend()
        self.warnings: list[str] = []
        self.started = clock.monotonic()
        self.started_at = iso(clock.now())

    def warn(self, text: str) -> None:
        if text not in self.warnings:
            self.warnings.append(text)

    def account(
        self, response: LLMResponse, messages: tuple[Message, ...], *, validator: bool = False
    ) -> None:
        """Add one answered call's tokens, cost, transport retries and warnings; a
        ``validator``'s call (a judge) is also counted apart."""
        spend = self.spend
        before = (spend.tokens, spend.cost)
        self._add(response, messages)
        if validator:
            spend.validator_calls += 1
            spend.validator_tokens += spend.tokens - before[0]
            spend.validator_cost += spend.cost - before[1]
            spend.validator_cost_known = (
                spend.validator_cost_known and response.cost_usd is not None
            )

    def _add(self, response: LLMResponse, messages: tuple[Message, ...]) -> None:
        usage = response.usage
        if usage is None:
            # Honest about it: estimated, and said so.
            self.spend.input_tokens += sum(estimate_tokens(m.content) + 4 for m in messages)
            self.spend.output_tokens += estimate_tokens(response.content or "")
            self.warn(f"{response.provider} reported no token usage; tokens were estimated")
        else:
            self.spend.input_tokens += usage.input_tokens
            self.spend.output_tokens += usage.output_tokens
            self.spend.cached_input_tokens += usage.cached_input_tokens
            self.spend.cache_write_tokens += usage.cache_write_tokens
        if response.cost_usd is None:
            self.spend.cost_known = False
        else:
            self.spend.cost += response.cost_usd
        self.spend.transport_retries += response.transport_retries
        for warning in response.warnings:
            self.warn(warning)

    def execution(self, success: bool) -> Execution:
        wasted = [t for t in self.turns if not success or t.wasted]
        # A failed call (outcome "error") spent nothing we know of; any other unknown price
        # makes the whole figure unknown.
        priced = [t for t in wasted if t.outcome != "error"]
        wasted_cost = (
            None
            if any(t.cost_usd is None for t in priced)
            else sum(t.cost_usd or 0.0 for t in priced)
        )
        last = next((t for t in reversed(self.turns) if t.model is not None), None)
        return Execution(
            duration_ms=int((self.clock.monotonic() - self.started) * 1000),
            tokens_used=self.spend.tokens,
            input_tokens=self.spend.input_tokens,
            output_tokens=self.spend.output_tokens,
            cached_input_tokens=self.spend.cached_input_tokens,
            cache_write_tokens=self.spend.cache_write_tokens,
            cost=round(self.spend.cost, 10) if self.spend.cost_known else None,
            model=None if last is None else last.model,
            provider=None if last is None else last.provider,
            retry_count=sum(1 for prev in self.turns[:-1] if prev.outcome in REJECTED),
            timestamp=self.started_at,
            llm_calls=len(self.turns),
            transport_retries=self.spend.transport_retries,
            wasted_tokens=sum(t.tokens for t in wasted),
            wasted_cost=None if wasted_cost is None else round(wasted_cost, 10),
            tool_calls=sum(len(t.tool_calls) for t in self.turns),
            validator_calls=self.spend.validator_calls,
            validator_tokens=self.spend.validator_tokens,
            validator_cost=(
                round(self.spend.validator_cost, 10) if self.spend.validator_cost_known else None
            ),
        )

    def success(
        self,
        data: Any,
        repairs: tuple[str, ...],
        grounding: tuple[GroundingSpan, ...] = (),
        confidence: float | None = None,
    ) -> Envelope:
        provenance = None
        if self.history:
            summary = "; ".join(first_line(h.diagnosis) for h in self.history)
            provenance = render(
                "provenance",
                {"retries": len(self.history), "one": len(self.history) == 1, "summary": summary},
            )
        return Envelope.success(
            data,
            warnings=tuple(repairs) + tuple(self.warnings),
            provenance=provenance,
            grounding=grounding,
            execution=self.execution(True),
            confidence=confidence,
            confidence_source=None if confidence is None else "logprobs",
        )

    def failure(
        self, code: str, detail: str, *, cause: str | None, fallback: FallbackSpec | None
    ) -> Envelope:
        """The error envelope, or spec 004's fallback data when the job configured it."""
        execution = self.execution(False)
        if fallback is not None:
            return Envelope.success(
                fallback.data,
                warnings=(
                    f"all attempts failed ({code}: {first_line(detail)}); "
                    "returned the configured fallback data",
                    *self.warnings,
                ),
                execution=execution,
            )
        return Envelope.failure(
            code, detail, cause=cause, warnings=tuple(self.warnings), execution=execution
        )


def first_line(text: str) -> str:
    lines = [line.strip(" -") for line in text.splitlines() if line.strip()]
    # The first line of a diagnosis is framing; the second names the problem when there is one.
    line = lines[1] if len(lines) > 1 else (lines[0] if lines else "")
    return line if len(line) <= 120 else line[:117] + "..."
