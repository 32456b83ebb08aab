"""The result envelope (spec 001) and its execution metadata.

    Envelope.success(data, execution=...).model_dump()
    # {"status": "success", "data": {...}, "warnings": [], "execution": {"durationMs": ...}}
    Envelope.failure(codes.BUDGET_EXHAUSTED, "no valid answer").job_status   # "failed"

``status`` decides which fields are written: ``data`` (and ``grounding``) on success;
``error``, ``detail`` (and ``cause``) on error; ``progress`` while in progress. Optional
fields without a value are left out rather than written as null.
"""

from __future__ import annotations

from typing import Any, Final, Literal, cast

from pydantic import Field, SerializerFunctionWrapHandler, model_serializer

from app.core.wire import codes
from app.core.wire.base import Wire
from app.core.wire.codes import ErrorCode, ResultStatus
from app.core.wire.record import Outcome, Spend, TurnType

JobStatus = Literal["queued", "in_progress", "requires_action", "succeeded", "failed", "cancelled"]
TERMINAL: frozenset[JobStatus] = frozenset({"succeeded", "failed", "cancelled"})
# A cancelled job's error detail, whoever writes its result (the cancel, or its worker's spend).
CANCELLED_BY_CLIENT: Final = "the job was cancelled by the client"


class Execution(Wire):
    """What the job cost and how it went.

    ``cost`` is null when any call had no known price: an unknown is never a zero.
    ``retryCount`` counts re-asks; transport retries are apart (``transportRetries``).
    """

    duration_ms: int
    tokens_used: int
    input_tokens: int
    output_tokens: int
    cost: float | None
    model: str | None
    provider: str | None
    retry_count: int = Field(description="Re-asks after rejected answers (0: first accepted).")
    timestamp: str
    llm_calls: int
    transport_retries: int = Field(description="Retries inside calls; never counted as turns.")
    wasted_tokens: int = Field(description="Tokens spent on rejected answers.")
    wasted_cost: float | None
    tool_calls: int = Field(default=0, description="Tool calls the model made (work turns).")
    validator_calls: int = Field(
        default=0, description="Model calls of judge validators (not in llmCalls)."
    )
    validator_tokens: int = Field(
        default=0, description="Tokens of those calls (included in tokensUsed)."
    )
    validator_cost: float | None = Field(
        default=0.0, description="USD of those calls (included in cost); null when unknown."
    )
    cached_input_tokens: int = Field(
        default=0,
        description="Of inputTokens, those the providers read from their prompt caches "
        "(billed at the cached-input price; 0 where no cache applied).",
    )
    cache_write_tokens: int = Field(
        default=0,
        description="Of inputTokens, those written to a provider's prompt cache (Anthropic; "
        "billed at the cache-write price).",
    )


class Progress(Wire):
    """Where a queued or running job is: ``phase`` and, once a turn started, which."""

    phase: Literal["queued", "model-call", "turn-done", "requires_action"] = "queued"
    turn: int | None = None
    type: TurnType | None = None
    attempt: int | None = None
    remaining: int | None = Field(default=None, description="Correction turns left.")
    calls_left: int | None = None
    model: str | None = None
    last_outcome: Outcome | None = None
    last_error: str | None = None

    # Not annotated: pydantic then documents the model's own fields in the JSON Schema.
    @model_serializer(mode="wrap")
    def _sparse(self, handler: SerializerFunctionWrapHandler):  # type: ignore[no-untyped-def]
        return {key: value for key, value in handler(self).items() if value is not None}


class GroundingSpan(Wire):
    """Where the input holds a value of the answer (a ``grounded`` validator found it).

    Offsets count Unicode code points (not UTF-16 units, not bytes), ``end`` exclusive. For
    a string input they are offsets into the input; for a JSON input, into the string at
    ``inputPath`` (for a number of the input: into its JSON text)."""

    path: str = Field(description="The answer's value, as a concrete path: $.lines[0].sku.")
    start: int = Field(description="Offset of the evidence's first character (code points).")
    end: int = Field(description="Offset just past its last character (exclusive).")
    input_path: str | None = Field(
        default=None, description="JSON input only: the input's string or number that holds it."
    )

    # Not annotated: pydantic then documents the model's own fields in the JSON Schema.
    @model_serializer(mode="wrap")
    def _sparse(self, handler: SerializerFunctionWrapHandler):  # type: ignore[no-untyped-def]
        return {key: value for key, value in handler(self).items() if value is not None}


class Envelope(Wire):
    """The result envelope: ``data`` on success, ``error`` and ``detail`` on error.

    ``progress`` (current turn and phase) while the job is queued or running. Fields that
    do not apply to the status are left out.
    """

    status: ResultStatus
    data: Any = Field(default=None, description="The validated answer (success only).")
    error: ErrorCode | None = Field(default=None, description="The error constant (error only).")
    detail: str | None = None
    cause: str | None = Field(
        default=None, description="Code of the last rejected answer when the budget ran out."
    )
    confidence: float | None = Field(
        default=None,
        ge=0,
        le=1,
        description="Success only, when an honest source gave one: how sure the model was "
        "of the answer's least sure value (0-1).",
    )
    confidence_source: Literal["logprobs"] | None = Field(
        default=None,
        description="Where confidence came from: logprobs (the provider's token "
        "log-probabilities of the answer's values).",
    )
    warnings: tuple[str, ...] = ()
    provenance: str | None = None
    grounding: tuple[GroundingSpan, ...] = Field(
        default=(),
        description="Success only: where the input holds the values grounded validators "
        "checked (left out when there are none).",
    )
    execution: Execution | None = None
    progress: Progress | None = Field(
        default=None, description="In progress only: turn, type, attempt, lastOutcome, …"
    )

    @classmethod
    def success(cls, data: Any, **fields: Any) -> Envelope:
        return cls(status=codes.RESULT_SUCCESS, data=data, **fields)

    @classmethod
    def failure(cls, error: str, detail: str, **fields: Any) -> Envelope:
        if error not in codes.ALL_ERRORS:
            raise ValueError(f"unknown error constant {error!r}")
        return cls(status=codes.RESULT_ERROR, error=cast(ErrorCode, error), detail=detail, **fields)

    @classmethod
    def in_progress(cls, progress: Progress | None = None) -> Envelope:
        return cls(status=codes.RESULT_IN_PROGRESS, progress=progress or Progress())

    def with_earlier(self, earlier: Spend | None) -> Envelope:
        """This envelope counting what earlier attempts of the job spent (their workers were
        lost mid-job): their calls are in ``llmCalls``, tokens and cost, and all wasted."""
        if earlier is None or earlier.calls == 0 or self.execution is None:
            return self
        ex = self.execution
        tokens = earlier.input_tokens + earlier.output_tokens
        cost = None if ex.cost is None or not earlier.cost_known else ex.cost + earlier.cost
        wasted = (
            None
            if ex.wasted_cost is None or not earlier.cost_known
            else ex.wasted_cost + earlier.cost
        )
        execution = ex.model_copy(
            update={
                "llm_calls": ex.llm_calls + earlier.calls,
                "input_tokens": ex.input_tokens + earlier.input_tokens,
                "cached_input_tokens": ex.cached_input_tokens + earlier.cached_input_tokens,
                "cache_write_tokens": ex.cache_write_tokens + earlier.cache_write_tokens,
                "output_tokens": ex.output_tokens + earlier.output_tokens,
                "tokens_used": ex.tokens_used + tokens,
                "cost": None if cost is None else round(cost, 10),
                "wasted_tokens": ex.wasted_tokens + tokens,
                "wasted_cost": None if wasted is None else round(wasted, 10),
            }
        )
        note = (
            f"{earlier.calls} model call(s) of an earlier attempt (its worker was lost) are "
            "counted in execution"
        )
        return self.model_copy(update={"execution": execution, "warnings": (*self.warnings, note)})

    @property
    def job_status(self) -> JobStatus:
        """The job state this envelope means (the one place that decides it)."""
        if self.status == codes.RESULT_SUCCESS:
            return "succeeded"
        if self.status == codes.RESULT_ERROR:
            return "cancelled" if self.error == codes.CANCELLED else "failed"
        return "in_progress"

    # Not annotated: pydantic then documents the model's own fields in the JSON Schema.
    @model_serializer(mode="wrap")
    def _by_status(self, handler: SerializerFunctionWrapHandler):  # type: ignore[no-untyped-def]
        out = handler(self)
        if self.status == codes.RESULT_SUCCESS:
            drop = {"error", "detail", "cause", "progress"}
        elif self.status == codes.RESULT_ERROR:
            drop = {"data", "progress"} | ({"cause"} if self.cause is None else set())
        else:
            drop = {"data", "error", "detail", "cause"}
        for key in ("confidence", "confidenceSource", "provenance", "execution"):
            if out.get(key) is None:
                drop.add(key)
        if not self.grounding:
            drop.add("grounding")
        return {key: value for key, value in out.items() if key not in drop}
