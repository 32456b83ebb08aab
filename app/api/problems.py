"""RFC 9457 problem details: the errors only the HTTP edge raises, and the one renderer.

Every error response is ``application/problem+json``::

    {"type": "https://reprompt.dev/problems/invalid-input", "title": "Invalid input",
     "status": 422, "detail": "budget.maxTurns: at most 20", "instance": "/v1/jobs",
     "code": "invalid-input", "errors": [{"field": "budget.maxTurns", "message": "..."}]}

``code`` is stable and machine-readable: the envelope's error constant where one applies
(``invalid-input``, ``llm-config``), else one of the edge codes below. ``type`` is
``PROBLEM_BASE + code``. The edge errors extend ``app.core.wire.errors.RepromptError``, so they
carry their HTTP status like every other error; foreign exceptions (FastAPI's validation
errors, Starlette's 404/405, anything unexpected) are mapped in ``install``::

    RepromptError                     status from the class, code from the class
    ├── InvalidInput / SignatureError 422 invalid-input, ``errors`` names the field
    ├── NotFound                      404 not-found (also another tenant's job)
    ├── Unauthorized                  401 unauthorized, WWW-Authenticate: Bearer
    ├── UnsupportedMediaType          415 unsupported-media-type
    ├── ContentTooLarge               413 content-too-large
    ├── NotReady                      503 llm-config or not-ready, names what to configure
    ├── (app.store) QueueFull         429 queue-full, Retry-After (per tenant)
    ├── (app.store) TenantQuota       429 quota-exceeded, Retry-After (per tenant)
    ├── (app.store) StoreUnavailable  503 store-unavailable, Retry-After: Redis is down
    └── (app.store) StoreFull         503 store-full, Retry-After: Redis is at maxmemory
    anything else                     500 internal-error, logged, no details in the answer

Every ``RepromptError`` is rendered by ``render`` from its own ``code``, ``status`` and
``retry_after_s``: there is no special case per class beyond the headers a kind needs.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Mapping, Sequence
from http import HTTPStatus
from typing import Any, Final

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from starlette.exceptions import HTTPException
from starlette.responses import JSONResponse, Response
from starlette.routing import Match

from app.api.fairness import TOO_MANY_REQUESTS
from app.core.wire import codes
from app.core.wire.errors import InvalidInput, RepromptError, SignatureError
from app.store.errors import CONFLICT, QUEUE_FULL, QUOTA_EXCEEDED, STORE_FULL, STORE_UNAVAILABLE

log = logging.getLogger(__name__)

PROBLEM_BASE: Final = "https://reprompt.dev/problems/"
MEDIA_TYPE: Final = "application/problem+json"

NOT_FOUND: Final = "not-found"
UNAUTHORIZED: Final = "unauthorized"
METHOD_NOT_ALLOWED: Final = "method-not-allowed"
UNSUPPORTED_MEDIA_TYPE: Final = "unsupported-media-type"
CONTENT_TOO_LARGE: Final = "content-too-large"
NOT_READY: Final = "not-ready"
BAD_REQUEST: Final = "bad-request"

# A short, stable summary per problem type (RFC 9457 §3.1.3: the title does not vary).
TITLES: Final[dict[str, str]] = {
    codes.INVALID_INPUT: "Invalid input",
    codes.INTERNAL_ERROR: "Internal error",
    codes.LLM_CONFIG: "No model provider configured",
    codes.LLM_UNAVAILABLE: "Model provider unavailable",
    NOT_FOUND: "Not found",
    UNAUTHORIZED: "Unauthorized",
    METHOD_NOT_ALLOWED: "Method not allowed",
    UNSUPPORTED_MEDIA_TYPE: "Unsupported media type",
    CONTENT_TOO_LARGE: "Content too large",
    QUEUE_FULL: "Queue full",
    QUOTA_EXCEEDED: "Quota exceeded",
    TOO_MANY_REQUESTS: "Too many requests",
    STORE_UNAVAILABLE: "Job store unavailable",
    STORE_FULL: "Job store full",
    NOT_READY: "Not ready",
    CONFLICT: "Conflict",
    BAD_REQUEST: "Bad request",
}
_BY_STATUS: Final[dict[int, str]] = {
    400: BAD_REQUEST,
    401: UNAUTHORIZED,
    404: NOT_FOUND,
    405: METHOD_NOT_ALLOWED,
    413: CONTENT_TOO_LARGE,
    415: UNSUPPORTED_MEDIA_TYPE,
    422: codes.INVALID_INPUT,
    500: codes.INTERNAL_ERROR,
}


class NotFound(RepromptError):
    code = NOT_FOUND
    status = 404


class Unauthorized(RepromptError):
    """``error`` is RFC 6750's ``invalid_token`` when a key was given but is not known."""

    code = UNAUTHORIZED
    status = 401

    def __init__(self, detail: str, *, invalid_token: bool = False) -> None:
        super().__init__(detail)
        self.invalid_token = invalid_token


class UnsupportedMediaType(RepromptError):
    code = UNSUPPORTED_MEDIA_TYPE
    status = 415


class ContentTooLarge(RepromptError):
    code = CONTENT_TOO_LARGE
    status = 413


class NotReady(RepromptError):
    """The service cannot take jobs: ``code`` says which dependency is missing."""

    status = 503

    def __init__(self, detail: str, *, code: str = NOT_READY) -> None:
        super().__init__(detail)
        self.code = code


def title_for(code: str, status: int) -> str:
    return TITLES.get(code) or _phrase(status)


def problem(
    status: int,
    code: str,
    detail: str,
    *,
    instance: str,
    errors: Sequence[Mapping[str, Any]] | None = None,
    headers: Mapping[str, str] | None = None,
    extra: Mapping[str, Any] | None = None,
) -> JSONResponse:
    """The one way an error leaves the API."""
    body: dict[str, Any] = {
        "type": PROBLEM_BASE + code,
        "title": title_for(code, status),
        "status": status,
        "detail": detail,
        "instance": instance,
        "code": code,
    }
    if errors is not None:
        body["errors"] = [dict(e) for e in errors]
    if extra:
        body.update({k: v for k, v in extra.items() if k not in body})
    return JSONResponse(body, status_code=status, headers=headers, media_type=MEDIA_TYPE)


def render(error: RepromptError, instance: str) -> JSONResponse:
    """A ``RepromptError`` as problem+json, with the headers its kind calls for."""
    headers: dict[str, str] = {}
    errors: list[dict[str, Any]] | None = None
    if isinstance(error, InvalidInput):
        errors = [_field_error(each) for each in error.errors]
    elif isinstance(error, Unauthorized):
        headers["WWW-Authenticate"] = (
            'Bearer realm="reprompt", error="invalid_token"'
            if error.invalid_token
            else 'Bearer realm="reprompt"'
        )
    if error.retry_after_s is not None and error.status in (429, 503):
        headers["Retry-After"] = str(max(1, math.ceil(error.retry_after_s)))
    if error.status >= 500:
        log.warning("%s answered %d %s: %s", instance, error.status, error.code, error.detail)
    return problem(
        error.status, error.code, error.detail, instance=instance, errors=errors, headers=headers
    )


def _field_error(error: InvalidInput) -> dict[str, Any]:
    item: dict[str, Any] = {"field": error.field or "body", "message": error.detail}
    if isinstance(error, SignatureError):
        item |= {"position": error.position, "expected": error.expected}
    return item


def field_errors(exc: RequestValidationError) -> list[dict[str, str]]:
    """FastAPI's errors as ``{"field", "message"}``: dotted camelCase paths, one per field.

    ``loc`` starts with where the value came from (``body``, ``query``, ``header``), which
    is dropped; pydantic's union-member tags (``budget.maxCostUsd.float``) are dropped by
    following the path through the submitted body. Submitted values are never echoed.
    """
    out: dict[str, str] = {}
    for error in exc.errors():
        loc = tuple(error.get("loc", ()))
        source, path = (loc[0], loc[1:]) if loc else ("body", ())
        if error.get("type") == "json_invalid":
            reason = (error.get("ctx") or {}).get("error", "")
            where = f" at position {path[0]}" if path else ""
            out.setdefault("body", f"the body is not valid JSON{where}: {reason}".rstrip(": "))
            continue
        if source == "body":
            parts = _walk(path, exc.body, missing=error.get("type") == "missing")
        else:
            parts = [str(p) for p in path]
        field = ".".join(parts) or str(source)
        message = str(error.get("msg", "invalid value")).removeprefix("Value error, ")
        out.setdefault(field, message)
    return [{"field": field, "message": message} for field, message in out.items()]


def _walk(path: Sequence[Any], body: Any, *, missing: bool) -> list[str]:
    parts: list[str] = []
    node = body
    for i, part in enumerate(path):
        if isinstance(node, dict) and isinstance(part, str) and part in node:  # noqa: SIM114 - typed apart for mypy
            node = node[part]
        elif isinstance(node, list) and isinstance(part, int) and 0 <= part < len(node):
            node = node[part]
        elif missing and i == len(path) - 1:
            pass  # the field that is not there
        else:
            continue  # a union member's tag, not a field
        parts.append(str(part))
    return parts


def install(app: FastAPI) -> None:
    """Route every error of ``app`` through ``problem``."""

    async def reprompt_error(request: Request, exc: Exception) -> Response:
        assert isinstance(exc, RepromptError)
        return render(exc, request.url.path)

    async def validation_error(request: Request, exc: Exception) -> Response:
        assert isinstance(exc, RequestValidationError)
        errors = field_errors(exc)
        fields = ", ".join(e["field"] for e in errors)
        detail = (
            f"{errors[0]['field']}: {errors[0]['message']}"
            if len(errors) == 1
            else f"{len(errors)} fields are invalid: {fields}"
        )
        return problem(422, codes.INVALID_INPUT, detail, instance=request.url.path, errors=errors)

    async def http_error(request: Request, exc: Exception) -> Response:
        assert isinstance(exc, HTTPException)
        status = exc.status_code
        code = _BY_STATUS.get(status) or _slug(status)
        detail = exc.detail if isinstance(exc.detail, str) else _phrase(status)
        if status == 404 and detail == _phrase(404):
            detail = f"nothing at {request.method} {request.url.path}"
        headers = exc.headers
        if status == 405:
            detail = f"{request.method} is not allowed on {request.url.path}"
            headers = {**(headers or {}), "Allow": _allowed(request)}
        return problem(status, code, detail, instance=request.url.path, headers=headers)

    async def unexpected(request: Request, exc: Exception) -> Response:
        # Logged with its traceback for operators; the client learns nothing internal.
        log.error("%s %s failed", request.method, request.url.path, exc_info=exc)
        return problem(
            500,
            codes.INTERNAL_ERROR,
            "the service failed to handle the request; it has been logged",
            instance=request.url.path,
        )

    app.add_exception_handler(RepromptError, reprompt_error)
    app.add_exception_handler(RequestValidationError, validation_error)
    app.add_exception_handler(HTTPException, http_error)
    app.add_exception_handler(Exception, unexpected)


_METHODS: Final = ("GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS")


def _allowed(request: Request) -> str:
    """Every method some route serves at the request's path (Starlette's 405 names only the
    first route that matched the path: ``POST`` for ``/v1/jobs``, where ``GET`` is one too).
    Each method is tried against the routes as a request would be."""
    allowed = []
    for method in _METHODS:
        scope = {**request.scope, "method": method}
        if any(route.matches(scope)[0] is Match.FULL for route in request.app.routes):
            allowed.append(method)
    return ", ".join(allowed)


def _phrase(status: int) -> str:
    try:
        return HTTPStatus(status).phrase
    except ValueError:
        return "Error"


def _slug(status: int) -> str:
    return _phrase(status).lower().replace(" ", "-")
