"""The API's response shapes, for the OpenAPI document (camelCase on the wire).

Handlers return the store's dicts directly; these models describe them, with examples,
so that clients in any language can be generated from ``openapi/openapi.json``.
"""

from __future__ import annotations

from typing import Any, Final, Literal

from pydantic import BaseModel, ConfigDict, Field
from pydantic.alias_generators import to_camel

from app.core.codes import ErrorCode, ResultStatus
from app.core.turn import Outcome, TurnType

JobStatus = Literal["queued", "in_progress", "succeeded", "failed", "cancelled"]
CircuitStateName = Literal["closed", "open", "half_open"]


class _Out(BaseModel):
    model_config = ConfigDict(alias_generator=to_camel, populate_by_name=True)


# -- requests: examples of JobSpec ---------------------------------------------------------

JOB_EXAMPLES: dict[str, dict[str, Any]] = {
    "signature": {
        "summary": "Extract fields with a compact signature",
        "value": {
            "task": "Extract the person.",
            "input": "Alice Smith is 30 years old.",
            "signature": "{name :string, age :int}",
            "budget": {"maxTurns": 1, "returnRetries": 2},
        },
    },
    "schema": {
        "summary": "An invoice with a JSON Schema, a semantic check and a deadline",
        "value": {
            "task": "Extract the vendor, the line items and the total from the invoice.",
            "input": "Invoice from ACME Tools. 2 x hammer (H-1) at 12.50, 1 x saw (S-9) at "
            "20.00. Total: 45.00",
            "schema": {
                "type": "object",
                "properties": {
                    "vendor": {"type": "string"},
                    "lines": {
                        "type": "array",
                        "items": {
                            "type": "object",
                            "properties": {
                                "sku": {"type": "string"},
                                "qty": {"type": "integer"},
                                "amount": {"type": "number"},
                            },
                            "required": ["sku", "qty", "amount"],
                        },
                    },
                    "total": {"type": "number"},
                },
                "required": ["vendor", "lines", "total"],
            },
            "validators": [
                {
                    "kind": "sum",
                    "items": "$.lines[*].amount",
                    "equals": "$.total",
                    "tolerance": 0.01,
                    "message": "total must equal the sum of the line amounts",
                }
            ],
            "budget": {"maxTurns": 1, "returnRetries": 3, "deadlineMs": 120000},
            "model": "gpt-4o-mini",
            "metadata": {"invoice": "INV-1042"},
        },
    },
}


# -- the envelope --------------------------------------------------------------------------


class Execution(_Out):
    """What the job cost and how it went. ``cost`` is null when any call had no known price."""

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


class Envelope(_Out):
    """The result envelope: ``data`` on success, ``error`` + ``detail`` on error, and
    ``progress`` (current turn and phase) while the job is queued or running."""

    status: ResultStatus
    data: Any = Field(default=None, description="The validated answer (success only).")
    error: ErrorCode | None = Field(default=None, description="The error constant (error only).")
    detail: str | None = None
    cause: str | None = Field(
        default=None, description="Code of the last rejected answer when the budget ran out."
    )
    confidence: float | None = None
    warnings: list[str] = Field(default_factory=list)
    provenance: str | None = None
    execution: Execution | None = None
    progress: dict[str, Any] | None = Field(
        default=None, description="In progress only: turn, type, attempt, lastOutcome, …"
    )


class Usage(_Out):
    input_tokens: int
    output_tokens: int


class Turn(_Out):
    """One model call: what was asked, what came back, what the loop made of it."""

    index: int
    type: TurnType
    outcome: Outcome
    attempt: int
    error_code: str | None
    diagnosis: str | None = Field(description="The precise error fed back to the model.")
    usage: Usage
    cost_usd: float | None
    latency_ms: int
    provider: str | None
    model: str | None
    finish_reason: str | None
    max_output_tokens: int
    prompt_tokens_estimate: int
    message_count: int
    tools_offered: int
    tool_calls: list[str]
    transport_retries: int
    transport_wait_ms: int
    escalated: bool
    simplified: bool
    warnings: list[str]
    answer: str | None
    started_at: str


# -- jobs ----------------------------------------------------------------------------------

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
    "index": 0,
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


class Job(_Out):
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
    turns: list[Turn]
    history: list[dict[str, Any]] = Field(description="One entry per rejected answer.")
    transcript: list[dict[str, Any]] = Field(description="The final conversation, when done.")
    metadata: dict[str, str]
    model: str | None = Field(description="The model or route the job targets.")
    idempotency_key: str | None


class JobList(_Out):
    """A page of the caller's jobs, newest first. ``next`` is the cursor of the next page
    (also in the ``Link`` header); null on the last page."""

    jobs: list[Job]
    next: str | None


# -- models and health ---------------------------------------------------------------------


class Circuit(_Out):
    state: CircuitStateName
    failures: int = Field(description="Consecutive transient failures.")


class ModelInfo(_Out):
    name: str
    provider: str
    circuit: Circuit | None


class RouteInfo(_Out):
    name: str
    models: list[str] = Field(description="Tried in order when one is unavailable.")


class Models(_Out):
    """The models and routes a job's ``model`` may name, with each model's circuit."""

    model_config = ConfigDict(
        json_schema_extra={
            "examples": [
                {
                    "default": "fast",
                    "models": [
                        {
                            "name": "gpt-4o-mini",
                            "provider": "openai",
                            "circuit": {"state": "closed", "failures": 0},
                        },
                        {
                            "name": "claude-haiku-4-5",
                            "provider": "anthropic",
                            "circuit": {"state": "open", "failures": 5},
                        },
                    ],
                    "routes": [{"name": "fast", "models": ["gpt-4o-mini", "claude-haiku-4-5"]}],
                }
            ]
        }
    )

    default: str | None
    models: list[ModelInfo]
    routes: list[RouteInfo]


class Health(_Out):
    status: Literal["ok"]


class Ready(_Out):
    status: Literal["ready"]
    checks: dict[str, str] = Field(description="Each dependency: ok, or what is wrong.")


# -- problems ------------------------------------------------------------------------------


class FieldError(_Out):
    field: str = Field(description="Dotted camelCase path (budget.maxTurns), or a header.")
    message: str
    position: int | None = Field(default=None, description="Signature errors: 0-based offset.")
    expected: str | None = Field(default=None, description="Signature errors: what fits there.")


class Problem(_Out):
    """RFC 9457 problem details; every error response has this shape."""

    model_config = ConfigDict(
        extra="allow",
        json_schema_extra={
            "examples": [
                {
                    "type": "https://reprompt.dev/problems/invalid-input",
                    "title": "Invalid input",
                    "status": 422,
                    "detail": "budget.maxTurns: Input should be greater than or equal to 1",
                    "instance": "/v1/jobs",
                    "code": "invalid-input",
                    "errors": [
                        {
                            "field": "budget.maxTurns",
                            "message": "Input should be greater than or equal to 1",
                        }
                    ],
                }
            ]
        },
    )

    type: str = Field(description="https://reprompt.dev/problems/<code>")
    title: str
    status: int
    detail: str
    instance: str = Field(description="The request path.")
    code: str = Field(
        description="Stable machine-readable code (an envelope constant or an "
        "edge code such as not-found, queue-full)."
    )
    errors: list[FieldError] | None = Field(default=None, description="422: every bad field.")


def problems(*statuses: int, **descriptions: str) -> dict[int | str, dict[str, Any]]:
    """OpenAPI entries for error statuses (rendered as application/problem+json);
    ``descriptions`` overrides the usual text, keyed ``s503`` and so on."""
    return {
        status: {
            "model": Problem,
            "description": descriptions.get(f"s{status}", _DESCRIPTIONS[status]),
        }
        for status in statuses
    }


_DESCRIPTIONS: Final[dict[int, str]] = {
    401: "No API key, or an unknown one (when keys are configured).",
    404: "No such job for this tenant (another tenant's job is a 404 too).",
    413: "The request body is over REPROMPT_MAX_BODY_BYTES.",
    415: "The body is not application/json.",
    422: "The job (or a parameter) is invalid; `errors` names each field.",
    503: "Not now: the queue is full or Redis is unreachable (both with Retry-After), or "
    "no model provider is configured (`code` llm-config, `detail` says what to set).",
}
