"""Errors in OpenAI's shape, so the SDKs raise their usual exception types.

    {"error": {"message": "...", "type": "invalid_request_error", "param": "messages[0]",
               "code": "invalid-input"}}

``code`` is reprompt's error code (``invalid-input``, ``llm-invalid-output``, …); the SDKs
pick the exception by status: 400 ``BadRequestError``, 401 ``AuthenticationError``, 422
``UnprocessableEntityError``, 429 ``RateLimitError`` (``Retry-After`` honoured), 5xx
``InternalServerError``.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Final

from pydantic import ValidationError
from starlette.responses import JSONResponse

from app.core.wire import codes
from app.core.wire.errors import InvalidInput, RepromptError

# What a job's error code means over this dialect: the status the SDKs map to an exception.
JOB_STATUS: Final[Mapping[str, int]] = {
    codes.INVALID_INPUT: 400,
    codes.LLM_INVALID_OUTPUT: 422,
    codes.BUDGET_EXHAUSTED: 422,
    codes.EXPLICIT_FAIL: 422,
    codes.LLM_REFUSAL: 422,
    codes.LLM_TOKEN_LIMIT: 422,
    codes.COST_LIMIT: 422,
    codes.TOKEN_BUDGET: 422,
    codes.LLM_RATE_LIMIT: 429,
    codes.LLM_CONFIG: 503,
    codes.LLM_UNAVAILABLE: 502,
    codes.LLM_TIMEOUT: 504,
    codes.DEADLINE_EXCEEDED: 504,
    codes.TOOL_TIMEOUT: 504,
    codes.CANCELLED: 409,
}


def error_type(status: int) -> str:
    """OpenAI's ``type`` for a status."""
    if status == 401:
        return "authentication_error"
    if status == 404:
        return "not_found_error"
    if status == 429:
        return "rate_limit_error"
    if status >= 500:
        return "api_error"
    return "invalid_request_error"


class ChatError(Exception):
    """An error answered in OpenAI's shape. ``extra`` goes into ``error`` too (``job_id``)."""

    def __init__(
        self,
        status: int,
        code: str,
        message: str,
        *,
        param: str | None = None,
        retry_after_s: float | None = None,
        headers: Mapping[str, str] | None = None,
        extra: Mapping[str, object] | None = None,
    ) -> None:
        super().__init__(message)
        self.status = status
        self.code = code
        self.message = message
        self.param = param
        self.retry_after_s = retry_after_s
        self.headers = dict(headers or {})
        self.extra = dict(extra or {})

    @classmethod
    def of(cls, error: RepromptError) -> ChatError:
        """One of the service's own errors (auth, fairness, caps, the store, a provider)."""
        param = None
        if isinstance(error, InvalidInput):
            param = error.field
        status = 400 if error.status == 422 else error.status
        return cls(status, error.code, error.detail, param=param, retry_after_s=error.retry_after_s)

    @classmethod
    def invalid(cls, exc: ValidationError, prefix: str = "") -> ChatError:
        """A body that does not validate: the first field's error (pydantic's loc, dotted)."""
        first = exc.errors()[0]
        param = _dotted(first.get("loc", ()), prefix)
        message = str(first.get("msg", "invalid value")).removeprefix("Value error, ")
        count = exc.error_count()
        more = f" (and {count - 1} more)" if count > 1 else ""
        return cls(
            400, codes.INVALID_INPUT, f"{param or 'body'}: {message}{more}", param=param or None
        )

    def body(self) -> dict[str, object]:
        """``{"error": {...}}``: the response's body, and a stream's error event's data."""
        error: dict[str, object] = {
            "message": self.message,
            "type": error_type(self.status),
            "param": self.param,
            "code": self.code,
        }
        error.update({k: v for k, v in self.extra.items() if k not in error})
        return {"error": error}

    def response(self, headers: Mapping[str, str] | None = None) -> JSONResponse:
        out = {**self.headers, **(headers or {})}
        if self.retry_after_s is not None and self.status in (429, 503):
            out["Retry-After"] = str(max(1, math.ceil(self.retry_after_s)))
        return JSONResponse(self.body(), status_code=self.status, headers=out)


def _dotted(loc: tuple[int | str, ...] | list[int | str], prefix: str) -> str:
    """``("messages", 0, "content")`` as ``messages[0].content``; pydantic's union tags
    (``str``, ``list[...]``, ``function-after[...]``) left out."""
    out = prefix
    for part in loc:
        if isinstance(part, int):
            out += f"[{part}]"
        elif "[" in part or part in ("str", "int", "float", "bool", "dict", "list", "none"):
            continue
        else:
            out += f".{part}" if out else part
    return out
