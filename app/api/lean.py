"""The hot endpoints' inputs read directly, FastAPI's general machinery kept for the rest.

    router = APIRouter(route_class=LeanRoute)

    async def _submit_inputs(request: Request) -> dict[str, Any]:   # raise Unusual: FastAPI
        spec = await json_body(request, JobSpec)
        return {"request": request, "spec": spec, "caller": await BEARER_JSON(request)}

    @router.post("/v1/jobs", ...)
    @lean(_submit_inputs)
    async def submit_job(request: Request, caller: AuthedJson, spec: JobBody) -> Response:

FastAPI solves an endpoint's declared inputs generically on every request (each
parameter's annotation inspected again, a dict of errors built, the body parsed as JSON and
then validated) and wraps the endpoint in layers for what these endpoints never use: a
third or more of the API's CPU per request. A ``LeanRoute`` whose endpoint has a reader
(``lean``) calls the reader instead: it reads the common, valid request in a few lines
(the body straight into its model with ``model_validate_json``) and returns the
endpoint's arguments. Anything it does not expect (a body that does not validate, an odd
parameter, a non-JSON body) raises ``Unusual`` before any side effect, and FastAPI's own
handling answers the request exactly as it always did: every 4xx, its problem+json and
the order of its checks stay FastAPI's. The declared signature still documents the
endpoint (OpenAPI), and is what FastAPI solves whenever the reader steps aside.

A reader authenticates last (``Bearer``: 401, 415, and the rate's 429 with its side
effect): when it runs, nothing is left that could step aside. FastAPI's own telemetry
(a global OpenTelemetry provider) and dependency overrides take the general path.

The app's front (``app.api.front``) calls a route's reader and endpoint itself, without
FastAPI's middleware and router in between; the route's own ASGI app below serves the
requests that come through FastAPI's stack (the front off or stepping aside).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any, Final, TypeVar, cast

from fastapi import Request
from fastapi.responses import Response
from fastapi.routing import APIRoute
from pydantic import BaseModel, ValidationError
from pydantic_core import SchemaValidator
from starlette.requests import ClientDisconnect
from starlette.types import ASGIApp, Receive, Scope, Send

from app.api.limits import is_json, replaying
from app.core.spec import _without_unicode_scan as without_unicode_scan

Reader = Callable[["LeanRequest"], Awaitable[dict[str, Any]]]
E = TypeVar("E", bound=Callable[..., Any])
M = TypeVar("M", bound=BaseModel)

_READER: Final = "__lean_reader__"
# Set in a request's scope by ``app.api.front`` when it hands a request a reader stepped
# aside from to the app's full stack: the route's FastAPI handling serves it at once.
GENERAL: Final = "reprompt.general"
# A query integer up to this many digits is read here (pydantic takes any size).
_MAX_DIGITS: Final = 15


class LeanRequest(Request):
    """The request a reader reads: Starlette's, and ``heads``, its headers by name (lower
    case, as the scope has them), each its first value as Starlette's ``Headers.get``
    reads it: read from the scope once."""

    def __init__(self, scope: Scope, receive: Receive, send: Send) -> None:
        super().__init__(scope, receive, send)
        # The first value of each name wins: the last one written, reversed.
        self.heads: dict[bytes, bytes] = dict(reversed(scope["headers"]))


class Unusual(Exception):
    """The request is not the plain, valid one a reader handles: FastAPI reads it."""


def lean(reader: Reader) -> Callable[[E], E]:
    """Give an endpoint (of a ``LeanRoute``) the reader of its arguments. Apply it below
    the route decorator: the route is built when that decorator runs."""

    def attach(endpoint: E) -> E:
        setattr(endpoint, _READER, reader)
        return endpoint

    return attach


class LeanRoute(APIRoute):
    """An ``APIRoute`` whose endpoint's reader (``lean``), if it has one, reads the
    request; FastAPI's own handling serves the requests the reader steps aside from.

    The lean path is the route's ASGI app: the arguments read, the endpoint called, its
    response sent. It leaves out what FastAPI wraps around every endpoint for what a
    reader never uses (exit stacks for dependencies with ``yield``, the endpoint's own
    exception wrapper: an error goes to the same handlers one layer out, by
    ``ExceptionMiddleware``). Served as the app's own route (``FastAPI(routes=...)``),
    not through ``include_router``, whose copy of the route is FastAPI's handling only.
    """

    def __init__(self, path: str, endpoint: Callable[..., Any], **kwargs: Any) -> None:
        super().__init__(path, endpoint, **kwargs)
        reader: Reader | None = getattr(endpoint, _READER, None)
        # ``app.api.front`` serves a route with a reader itself: the reader, whether the
        # body is read first, and the endpoint.
        self.reader = reader
        self.reads_body = self.body_field is not None
        if reader is not None:
            self.app = _lean_app(self, general=self.app)


def _lean_app(route: LeanRoute, *, general: ASGIApp) -> ASGIApp:
    """The route's ASGI app: its reader's way (``lean_response``), FastAPI's handling
    (``general``) for a request the reader steps aside from, its body replayed."""

    async def app(scope: Scope, receive: Receive, send: Send) -> None:
        if (
            GENERAL in scope
            or scope.get("fastapi.telemetry") is not None
            or getattr(scope.get("app"), "dependency_overrides", None)
        ):
            await general(scope, receive, send)
            return
        response, read = await lean_response(route, LeanRequest(scope, receive, send))
        if response is None:
            await general(scope, receive if read is None else _replaying(read, receive), send)
            return
        await response(scope, receive, send)

    return app


async def lean_response(
    route: LeanRoute, request: LeanRequest
) -> tuple[Response | None, bytes | None]:
    """The endpoint's response, from the arguments its reader read, and the body read (if
    the route reads one); no response when the reader stepped aside or the client left
    while the body came (FastAPI answers those)."""
    assert route.reader is not None
    read: bytes | None = None
    try:
        if route.reads_body:
            read = await request.body()  # (what ``app.api.front`` read, if it did)
        arguments = await route.reader(request)
    except (Unusual, ClientDisconnect):
        return None, read
    response: Response = await route.endpoint(**arguments)
    return response, read


def _replaying(body: bytes, receive: Receive) -> Receive:
    return replaying([{"type": "http.request", "body": body, "more_body": False}], receive)


async def json_body(request: LeanRequest, model: type[M]) -> M:
    """The request's JSON body as ``model``; ``Unusual`` unless it is there and valid."""
    body = await request.body()  # read already (LeanRoute reads a route's body first)
    content_type = request.heads.get(b"content-type")
    if content_type is None or not is_json(content_type.decode("latin-1")):
        raise Unusual
    if not body:
        raise Unusual
    try:
        if body.isascii() and b"\\u" not in body:
            return cast(M, _unscanned(model).validate_json(body))
        return model.model_validate_json(body)
    except ValidationError:
        raise Unusual from None


def _unscanned(model: type[BaseModel]) -> SchemaValidator:
    """``model``'s validator without the per-field scan for unpaired surrogates: an ASCII
    body without a ``\\u`` escape holds none (every string it decodes to is ASCII), and
    the scan is a Python call per field. Built once per model."""
    validator = _UNSCANNED.get(model)
    if validator is None:
        validator = SchemaValidator(without_unicode_scan(model.__pydantic_core_schema__))
        _UNSCANNED[model] = validator
    return validator


_UNSCANNED: dict[type[BaseModel], SchemaValidator] = {}


def header(request: LeanRequest, name: bytes, *, max_length: int) -> str | None:
    """Header ``name`` (lower-case; its first value, as FastAPI reads it) if it has 1 to
    ``max_length`` characters, None if absent; ``Unusual`` otherwise."""
    raw = request.heads.get(name)
    if raw is None:
        return None
    value = raw.decode("latin-1")
    if not 0 < len(value) <= max_length:
        raise Unusual
    return value


def query_int(request: LeanRequest, name: bytes, default: int) -> int:
    """Query parameter ``name`` (its last value, as FastAPI reads it) when it is written
    plainly as a non-negative integer, ``default`` if absent; ``Unusual`` otherwise."""
    query: bytes = request.scope.get("query_string", b"")
    if not query:
        return default
    if b"%" in query or b"+" in query:
        raise Unusual  # escaped: Starlette's parser decodes it
    value: bytes | None = None
    for pair in query.split(b"&"):
        key, _, given = pair.partition(b"=")
        if key == name:
            value = given
    if value is None:
        return default
    if not (value.isdigit() and len(value) <= _MAX_DIGITS):
        raise Unusual
    if len(value) > 1 and value[:1] == b"0":
        raise Unusual
    return int(value)
