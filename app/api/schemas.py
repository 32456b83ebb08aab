"""The API's response shapes: what the handlers return and what openapi/openapi.json says.

The envelope, turn records, rejections, transcript entries and the job itself
(``app.core.wire.job.Job``, also the body of a callback) are the ``app.core`` models; the other
responses are declared here. Handlers build these models from the store's typed records
(``public_job(view)``) and serialise them: one definition per shape, so the document
cannot drift from the answers.
"""

from __future__ import annotations

from typing import Any, Final, Literal

from fastapi.responses import Response
from pydantic import ConfigDict, Field, field_validator, model_validator

from app.core.wire.base import Wire
from app.core.wire.job import Job
from app.core.wire.spec import valid_unicode

CircuitStateName = Literal["closed", "open", "half_open"]


class _Out(Wire):
    pass


def respond(body: Wire, status: int = 200, headers: dict[str, str] | None = None) -> Response:
    """``body`` serialised by its own model, as the handler's response."""
    return Response(
        body.model_dump_json(), status_code=status, headers=headers, media_type="application/json"
    )


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


# -- tool outputs --------------------------------------------------------------------------


class ToolOutputIn(_Out):
    """The answer to one tool call: ``output`` (any JSON), or ``error`` (the tool failed)."""

    model_config = ConfigDict(extra="forbid")

    tool_call_id: str = Field(min_length=1, max_length=128)
    output: Any = None
    error: str | None = Field(default=None, max_length=2000)

    @field_validator("tool_call_id", "output", "error", mode="before")
    @classmethod
    def _valid_unicode(cls, value: Any) -> Any:
        return valid_unicode(value)

    @model_validator(mode="after")
    def _one(self) -> ToolOutputIn:
        if self.error is not None and self.output is not None:
            raise ValueError("give output or error, not both")
        # An explicit "output": null is the tool's answer; no answer at all is a mistake.
        if not {"output", "error"} & self.model_fields_set:
            raise ValueError("give output (any JSON) or error (the tool failed)")
        return self


class ToolOutputsBody(_Out):
    """``POST /v1/jobs/{id}/tool-outputs``: one entry per call of ``requiredAction``."""

    model_config = ConfigDict(
        extra="forbid",
        json_schema_extra={
            "examples": [
                {
                    "outputs": [
                        {"toolCallId": "call_1", "output": {"sku": "H-1", "price": 12.5}},
                        {"toolCallId": "call_2", "error": "warehouse API timed out"},
                    ]
                }
            ]
        },
    )

    outputs: list[ToolOutputIn] = Field(min_length=1, max_length=32)


# -- jobs ----------------------------------------------------------------------------------


class JobList(_Out):
    """A page of the caller's jobs, newest first. ``next`` is the cursor of the next page
    (also in the ``Link`` header); null on the last page."""

    jobs: tuple[Job, ...]
    next: str | None


# -- models and health ---------------------------------------------------------------------


class Circuit(_Out):
    state: CircuitStateName
    failures: int = Field(description="Consecutive transient failures.")


class ModelPrice(_Out):
    input_usd_per_mtok: float
    output_usd_per_mtok: float
    cached_input_usd_per_mtok: float | None = Field(
        default=None,
        description="Input read from the provider's prompt cache; null: billed as input.",
    )
    cache_write_usd_per_mtok: float | None = Field(
        default=None,
        description="Input written to the prompt cache (Anthropic); null: billed as input.",
    )
    source: str = Field(description='"providers file", or the catalog and its version.')


class ModelInfo(_Out):
    name: str
    provider: str
    circuit: Circuit | None
    price: ModelPrice | None = Field(
        default=None, description="USD per million tokens; null: unknown (cost: null)."
    )


class RouteInfo(_Out):
    name: str
    models: list[str] = Field(description="Tried in order when one is unavailable.")


class ListedModel(_Out):
    """One model or route in OpenAI's ``model`` shape (``id``, ``object``, ``created``,
    ``owned_by``), with reprompt's own fields beside them."""

    id: str = Field(description="The name a request's `model` uses.")
    object: Literal["model"] = "model"
    created: int = Field(description="Unix seconds: when this service started.")
    owned_by: str = Field(
        alias="owned_by",
        description="The provider's name in the providers file; a route: reprompt.",
    )
    provider: str | None = Field(default=None, description="null for a route.")
    circuit: Circuit | None = None
    price: ModelPrice | None = None
    route: list[str] | None = Field(
        default=None, description="A route's models, tried in order; null for a model."
    )


class Models(_Out):
    """The models and routes a job's ``model`` may name, with each model's circuit.

    ``object`` and ``data`` are OpenAI's list (the SDKs' ``models.list()`` reads them);
    ``default``, ``models`` and ``routes`` are reprompt's own view of the same things."""

    model_config = ConfigDict(
        json_schema_extra={
            "examples": [
                {
                    "object": "list",
                    "data": [
                        {
                            "id": "gpt-4o-mini",
                            "object": "model",
                            "created": 1767225600,
                            "owned_by": "openai",
                            "provider": "openai",
                            "circuit": {"state": "closed", "failures": 0},
                            "price": None,
                            "route": None,
                        },
                        {
                            "id": "fast",
                            "object": "model",
                            "created": 1767225600,
                            "owned_by": "reprompt",
                            "provider": None,
                            "circuit": None,
                            "price": None,
                            "route": ["gpt-4o-mini"],
                        },
                    ],
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

    object: Literal["list"] = "list"
    data: list[ListedModel]
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
    """OpenAPI entries for error statuses, rendered as application/problem+json.

    ``descriptions`` overrides the usual text, keyed ``s503`` and so on. An endpoint that
    authenticates (401) can also answer 429: the per-tenant rate applies to it.
    """
    wanted = sorted(set(statuses) | ({429} if 401 in statuses else set()))
    return {
        status: {
            "model": Problem,
            "description": descriptions.get(f"s{status}", _DESCRIPTIONS[status]),
        }
        for status in wanted
    }


_DESCRIPTIONS: Final[dict[int, str]] = {
    401: "No API key, or an unknown one (when keys are configured).",
    404: "No such job for this tenant (another tenant's job is a 404 too).",
    409: "The job is not waiting for tool outputs (already answered with other outputs, "
    "past requiredAction.expiresAt, or never asked).",
    413: "The request body is over REPROMPT_MAX_BODY_BYTES.",
    415: "The body is not application/json.",
    422: "The job (or a parameter) is invalid; `errors` names each field.",
    429: "Not now, for you: your queue is full, your jobs stored here reach your byte quota, or "
    "you send too fast (each with Retry-After; other callers are not affected).",
    503: "Not now: Redis is unreachable (with Retry-After), or "
    "no model provider is configured (`code` llm-config, `detail` says what to set).",
}
