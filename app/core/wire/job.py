"""The job as a client reads it: ``GET /v1/jobs/{id}``, and the body of its callbacks.

One model for both, so a callback's body is byte for byte what the API answers. The store
builds it from a stored job (``app.store.public_job(view)``); the API serialises it, and so
does the callback sender (``app/worker/callbacks.py``), which must not import the API.
"""

from __future__ import annotations

from typing import Any

from pydantic import ConfigDict, Field

from app.core.turn.checkpoint import RequiredAction
from app.core.turn.conversation import TranscriptEntry
from app.core.wire.base import Wire
from app.core.wire.callback import CallbackStatus
from app.core.wire.envelope import Envelope, JobStatus
from app.core.wire.record import Rejection, TurnRecord

_SUCCESS_EXAMPLE: dict[str, Any] = {
    "status": "success",
    "data": {"name": "Alice Smith", "age": 30},
    "warnings": [],
    "provenance": 'resolved after 1 retry: $.age: expected integer, got string "30 years"',
    "execution": {
        "durationMs": 2310,
        "tokensUsed": 612,
        "inputTokens": 570,
        "outputTokens": 42,
        "cost": 0.000121,
        "model": "gpt-4o-mini",
        "provider": "openai",
        "retryCount": 1,
        "timestamp": "2026-11-22T05:40:01.120Z",
        "llmCalls": 2,
        "transportRetries": 0,
        "wastedTokens": 301,
        "wastedCost": 0.00006,
    },
}

_TURN_EXAMPLE: dict[str, Any] = {
    "index": 1,
    "type": "must_return",
    "outcome": "invalid",
    "attempt": 1,
    "errorCode": "llm-invalid-output",
    "diagnosis": '$.age: expected integer, got string "30 years"',
    "usage": {"inputTokens": 280, "outputTokens": 21},
    "costUsd": 0.00006,
    "latencyMs": 1040,
    "provider": "openai",
    "model": "gpt-4o-mini",
    "finishReason": "stop",
    "maxOutputTokens": 1024,
    "promptTokensEstimate": 270,
    "messageCount": 2,
    "toolsOffered": 0,
    "toolCalls": [],
    "transportRetries": 0,
    "transportWaitMs": 0,
    "escalated": False,
    "simplified": False,
    "warnings": [],
    "answer": '{"name": "Alice Smith", "age": "30 years"}',
    "startedAt": "2026-11-22T05:39:58.810Z",
    "jobAttempt": 1,
}

JOB_EXAMPLE: dict[str, Any] = {
    "id": "job_01jd5a8x3k6q2v9w0e4r7t1y5u",
    "status": "succeeded",
    "createdAt": "2026-11-22T05:39:58.790Z",
    "startedAt": "2026-11-22T05:39:58.801Z",
    "finishedAt": "2026-11-22T05:40:01.120Z",
    "attempts": 1,
    "result": _SUCCESS_EXAMPLE,
    "turns": [_TURN_EXAMPLE],
    "history": [],
    "transcript": [],
    "metadata": {},
    "model": "gpt-4o-mini",
    "idempotencyKey": None,
}


class Job(Wire):
    """A job. ``result`` is the envelope at every moment (``in-progress`` until it ends);
    ``turns`` has one record per model call so far."""

    model_config = ConfigDict(json_schema_extra={"examples": [JOB_EXAMPLE]})

    id: str
    status: JobStatus
    created_at: str
    started_at: str | None
    finished_at: str | None
    attempts: int = Field(description="Times a worker claimed the job (1 unless a worker died).")
    result: Envelope
    turns: tuple[TurnRecord, ...]
    history: tuple[Rejection, ...] = Field(description="One entry per rejected answer.")
    transcript: tuple[TranscriptEntry, ...] = Field(
        description="The final conversation, when done."
    )
    metadata: dict[str, str]
    model: str | None = Field(description="The model or route the job targets.")
    idempotency_key: str | None
    required_action: RequiredAction | None = Field(
        default=None,
        description="While requires_action: the tool calls to answer with "
        "POST /v1/jobs/{id}/tool-outputs, and until when.",
    )
    callback: CallbackStatus | None = Field(
        default=None,
        description="With a callback: where it goes and how each delivery went "
        "(docs/callbacks.md).",
    )
