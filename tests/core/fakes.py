"""In-process fakes for unit tests of the pure core (no HTTP here: see tests/providers)."""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

from app.core.turn.model import (
    FinishReason,
    LLMRequest,
    LLMResponse,
    StructuredMode,
    StructuredOutput,
    ToolCall,
    Usage,
)
from app.core.wire.errors import InvalidInput


@dataclass
class FakeClock:
    t: float = 1000.0
    start: datetime = datetime(2026, 1, 2, 3, 4, 5, tzinfo=UTC)

    def monotonic(self) -> float:
        return self.t

    def now(self) -> datetime:
        return self.start + timedelta(seconds=self.t - 1000.0)

    def advance(self, seconds: float) -> None:
        self.t += seconds


def reply(
    content: str | None = None,
    *,
    finish: FinishReason = "stop",
    tool_calls: Sequence[ToolCall] = (),
    refusal: str | None = None,
    usage: tuple[int, int] | None = (100, 20),
    cost: float | None = 0.001,
    model: str = "fake-model",
) -> LLMResponse:
    return LLMResponse(
        content=content,
        finish_reason=finish,
        model=model,
        provider="fake",
        usage=None if usage is None else Usage(*usage),
        tool_calls=tuple(tool_calls),
        refusal=refusal,
        cost_usd=cost,
    )


def answer(value: Any, **kwargs: Any) -> LLMResponse:
    return reply(json.dumps(value), **kwargs)


def call(name: str, args: dict[str, Any] | None = None, id: str = "call_1") -> LLMResponse:
    return reply(
        None,
        finish="tool_calls",
        tool_calls=[ToolCall(id=id, name=name, arguments=json.dumps(args or {}))],
    )


Step = LLMResponse | Exception | Callable[[LLMRequest], LLMResponse]


@dataclass
class ScriptedClient:
    """Answers from a script, one step per call; records every request it saw."""

    script: list[Step]
    mode: StructuredMode = "prompt"
    price_per_token: float | None = 0.00001
    clock: FakeClock | None = None
    seconds_per_call: float = 0.0
    requests: list[LLMRequest] = field(default_factory=list)

    async def complete(self, request: LLMRequest) -> LLMResponse:
        self.requests.append(request)
        if self.clock is not None:
            self.clock.advance(self.seconds_per_call)
        if not self.script:
            raise AssertionError("the loop called the model more often than the script allows")
        step = self.script.pop(0)
        if isinstance(step, Exception):
            raise step
        if callable(step):
            return step(request)
        return step

    def structured_mode(self, model: str | None, requested: StructuredOutput) -> StructuredMode:
        if requested == "native" and (self.mode == "prompt" or model == "prompt-only"):
            raise InvalidInput(f"structuredOutput: {model} has no native mode", field="x")
        return "prompt" if requested == "prompt" else self.mode

    def estimate_cost(
        self, model: str | None, input_tokens: int, output_tokens: int
    ) -> float | None:
        if self.price_per_token is None:
            return None
        return (input_tokens + output_tokens) * self.price_per_token
