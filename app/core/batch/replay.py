"""An item of a batch runs the job's own loop, replayed: the answers its rounds brought back
are given to ``run_job`` in order, and the call after the last one is *deferred*: the loop
stops there and the request it built goes into the next round.

    client = ReplayClient(router, answers)
    try:
        result = await run_job(spec, Runtime(client=client))   # the item ended
    except Deferred as more:
        more.request                                           # the next round's call

Why a replay and not a checkpoint: the loop is deterministic given its answers (the
prompts, the repairs, the validators, the collapsed-context feedback), so an item's state
is only its answers, a few hundred bytes each, and an item is parsed, repaired, validated
and re-asked by exactly the code a job is. ``Deferred`` is a ``BaseException`` so that the
loop's guard against client bugs (``except Exception``) lets it through, as it does a
cancellation. With ``live``, a call past the stored answers goes to the model at once (the
live re-ask policy) and its answer is kept in ``fresh``.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from contextlib import AbstractAsyncContextManager
from dataclasses import dataclass
from typing import Any, Final

from app.core.turn.model import (
    FinishReason,
    LLMRequest,
    LLMResponse,
    ModelClient,
    PromptStyle,
    StructuredMode,
    StructuredOutput,
    StyledClient,
    Usage,
)
from app.core.wire.errors import ProviderError, ProviderUnavailable

__all__ = ["Deferred", "LineFailure", "ReplayClient", "answer_of", "stored"]

_FINISH: Final[frozenset[str]] = frozenset(
    ("stop", "length", "tool_calls", "refusal", "content_filter")
)
_MODES: Final[frozenset[str]] = frozenset(("json_schema", "json_object", "tool", "prompt"))


class Deferred(BaseException):
    """The loop asked for a call no round has answered yet: ``request`` goes next round."""

    def __init__(self, request: LLMRequest) -> None:
        super().__init__("deferred to the next round")
        self.request = request


@dataclass(frozen=True, slots=True)
class LineFailure:
    """A provider batch line that failed for good: replayed as the provider error it was."""

    provider: str
    model: str
    detail: str


Answer = LLMResponse | LineFailure


class ReplayClient:
    """A ``ModelClient`` answering from an item's stored answers, then deferring (or live)."""

    def __init__(
        self,
        client: ModelClient,
        answers: Sequence[Answer],
        *,
        live: bool = False,
        gate: Callable[[], AbstractAsyncContextManager[None]] | None = None,
    ) -> None:
        self._client = client
        self._answers = answers
        self._next = 0
        self._live = live
        # Held around each live call: the low-priority slot of a batch without a batch API.
        self._gate = gate
        self.fresh: list[Answer] = []

    async def complete(self, request: LLMRequest) -> LLMResponse:
        if self._next < len(self._answers):
            answer = self._answers[self._next]
            self._next += 1
            return _given(answer)
        if not self._live:
            raise Deferred(request)
        try:
            if self._gate is None:
                response = await self._client.complete(request)
            else:
                async with self._gate():
                    response = await self._client.complete(request)
        except ProviderError as exc:
            self.fresh.append(LineFailure(exc.provider, exc.model or "", exc.detail))
            raise
        self.fresh.append(response)
        return response

    def structured_mode(self, model: str | None, requested: StructuredOutput) -> StructuredMode:
        return self._client.structured_mode(model, requested)

    def prompt_style(self, model: str | None, requested: StructuredOutput) -> PromptStyle:
        if isinstance(self._client, StyledClient):
            return self._client.prompt_style(model, requested)
        return PromptStyle()

    def estimate_cost(
        self, model: str | None, input_tokens: int, output_tokens: int
    ) -> float | None:
        return self._client.estimate_cost(model, input_tokens, output_tokens)


def _given(answer: Answer) -> LLMResponse:
    if isinstance(answer, LineFailure):
        raise ProviderUnavailable(answer.detail, provider=answer.provider, model=answer.model)
    return answer


def stored(answer: Answer) -> dict[str, Any]:
    """An answer as the compact JSON an item keeps (``answer_of`` reads it back)."""
    if isinstance(answer, LineFailure):
        return {"x": answer.detail, "p": answer.provider, "m": answer.model}
    out: dict[str, Any] = {
        "c": answer.content,
        "f": answer.finish_reason,
        "m": answer.model,
        "p": answer.provider,
        "s": answer.structured_mode,
    }
    if answer.usage is not None:
        u = answer.usage
        out["u"] = [u.input_tokens, u.output_tokens, u.cached_input_tokens, u.cache_write_tokens]
    if answer.refusal is not None:
        out["r"] = answer.refusal
    if answer.cost_usd is not None:
        out["$"] = answer.cost_usd
    if answer.response_model is not None:
        out["rm"] = answer.response_model
    if answer.warnings:
        out["w"] = list(answer.warnings)
    if answer.latency_ms:
        out["l"] = answer.latency_ms
    return out


def answer_of(raw: Mapping[str, Any]) -> Answer:
    """The answer ``stored`` wrote; ``ValueError`` on anything else."""
    if "x" in raw:
        return LineFailure(str(raw.get("p", "")), str(raw.get("m", "")), str(raw["x"]))
    finish = raw["f"]
    mode = raw.get("s", "prompt")
    if finish not in _FINISH or mode not in _MODES:
        raise ValueError("not a stored answer")
    finish_reason: FinishReason = finish
    structured: StructuredMode = mode
    usage = raw.get("u")
    return LLMResponse(
        content=raw.get("c"),
        finish_reason=finish_reason,
        model=str(raw["m"]),
        provider=str(raw["p"]),
        usage=None if usage is None else Usage(*(int(n) for n in usage)),
        refusal=raw.get("r"),
        cost_usd=raw.get("$"),
        structured_mode=structured,
        latency_ms=int(raw.get("l", 0)),
        warnings=tuple(raw.get("w", ())),
        response_model=raw.get("rm"),
    )
