"""The result envelope (spec 001) and its execution metadata, camelCase on the wire.

Envelope.success(data, execution=...).to_dict()
# {"status": "success", "data": {...}, "warnings": [], "execution": {"durationMs": ...}}
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from app.core import codes


@dataclass(frozen=True, slots=True)
class Execution:
    """Observability for one job.

    ``retry_count`` keeps spec 001's meaning at the level a client sees: how many times the
    model was asked again because an answer was rejected (0 = first answer accepted).
    Transport retries inside a call are reported apart (``transport_retries``), never in it.
    ``cost`` is ``None`` when any call had no known price: an unknown is never a zero.
    """

    duration_ms: int
    tokens_used: int
    input_tokens: int
    output_tokens: int
    cost: float | None
    model: str | None
    provider: str | None
    retry_count: int
    timestamp: str
    llm_calls: int
    transport_retries: int
    wasted_tokens: int
    wasted_cost: float | None

    def to_dict(self) -> dict[str, Any]:
        return {
            "durationMs": self.duration_ms,
            "tokensUsed": self.tokens_used,
            "inputTokens": self.input_tokens,
            "outputTokens": self.output_tokens,
            "cost": self.cost,
            "model": self.model,
            "provider": self.provider,
            "retryCount": self.retry_count,
            "timestamp": self.timestamp,
            "llmCalls": self.llm_calls,
            "transportRetries": self.transport_retries,
            "wastedTokens": self.wasted_tokens,
            "wastedCost": self.wasted_cost,
        }


@dataclass(frozen=True, slots=True)
class Envelope:
    """``status`` decides which fields mean something: ``data`` on success, ``error`` on error.

    ``error`` is one of ``app.core.codes.ALL_ERRORS``; ``detail`` says why in words and
    ``cause`` gives the code of the last rejected answer when the budget ran out.
    """

    status: codes.ResultStatus
    data: Any = None
    error: str | None = None
    detail: str | None = None
    cause: str | None = None
    confidence: float | None = None
    warnings: tuple[str, ...] = ()
    provenance: str | None = None
    execution: Execution | None = None
    progress: dict[str, Any] | None = field(default=None)

    @classmethod
    def success(cls, data: Any, **kwargs: Any) -> Envelope:
        return cls(status=codes.RESULT_SUCCESS, data=data, **kwargs)

    @classmethod
    def failure(cls, error: str, detail: str, **kwargs: Any) -> Envelope:
        if error not in codes.ALL_ERRORS:
            raise ValueError(f"unknown error constant {error!r}")
        return cls(status=codes.RESULT_ERROR, error=error, detail=detail, **kwargs)

    @classmethod
    def in_progress(cls, progress: dict[str, Any] | None = None) -> Envelope:
        return cls(status=codes.RESULT_IN_PROGRESS, progress=progress)

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {"status": self.status}
        if self.status == codes.RESULT_SUCCESS:
            out["data"] = self.data
        elif self.status == codes.RESULT_ERROR:
            out["error"] = self.error
            out["detail"] = self.detail
            if self.cause is not None:
                out["cause"] = self.cause
        else:
            out["progress"] = self.progress or {}
        if self.confidence is not None:
            out["confidence"] = self.confidence
        out["warnings"] = list(self.warnings)
        if self.provenance is not None:
            out["provenance"] = self.provenance
        if self.execution is not None:
            out["execution"] = self.execution.to_dict()
        return out
