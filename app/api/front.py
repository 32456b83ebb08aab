"""The API's outermost ASGI callable: the hot routes served in a few steps, FastAPI's full
stack for everything else.

    app = FrontedFastAPI(...)      # a FastAPI; create_app builds one

A request to FastAPI passes a dozen layers before its route's app runs: FastAPI's own
``__call__`` (which asks OpenTelemetry whether a global provider is configured), Starlette's,
``ServerErrorMiddleware``, FastAPI's exception telemetry and body limit, ``BodyLimit``,
``ExceptionMiddleware``, an exit stack, the router trying route after route, the route's
``handle``: about a fifth of the API's CPU per job. ``FrontedFastAPI.__call__`` serves the
routes with a reader (``app.api.lean``: ``POST /v1/jobs``, ``GET /v1/jobs/{id}``,
``POST /v1/generate``) itself, doing what those layers do for them and nothing else:

- the body limit: ``BodyLimit.checked``, the same 413 and the UTF-8 422;
- an exception the route raises: the handler ``ExceptionMiddleware`` would pick (the
  same objects, taken from the built stack), its answer sent as that middleware sends it;
  an exception no handler takes (or one a handler raises) as ``ServerErrorMiddleware``
  does: its handler's answer (the app's 500) unless a response started, then re-raised
  for the server to log;
- the router's match: the route's own pattern, a request that an earlier route would
  take left to the router; the scope gets the route, endpoint and path parameters.

Everything else goes to FastAPI unchanged, and so does every request while any of these
holds: FastAPI's telemetry is on (a global OpenTelemetry provider, or one given to the
app), a dependency override is set, a ``root_path`` is set (the app's or the server's),
the app runs in debug, the built stack holds a layer the front does not know (a
middleware added by an embedding process, FastAPI's ``max_body_size``). A reader that
steps aside (``Unusual``) hands the request, its body replayed, to the full stack, which
serves it through the route's FastAPI handling (``GENERAL``). ``front = False`` on an app
turns the front off (the tests compare both ways).

The exception handlers, layers and routes are read from the app when it first serves a
request (the middleware stack is built then, as Starlette would) and again whenever the
route list changes.
"""

from __future__ import annotations

import os
import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Final

from fastapi import FastAPI, Request
from fastapi.middleware.asyncexitstack import AsyncExitStackMiddleware
from fastapi.routing import APIRoute
from starlette._utils import is_async_callable
from starlette.concurrency import run_in_threadpool
from starlette.exceptions import HTTPException
from starlette.middleware.errors import ServerErrorMiddleware
from starlette.middleware.exceptions import ExceptionMiddleware
from starlette.responses import Response
from starlette.routing import BaseRoute, Route
from starlette.types import ASGIApp, ExceptionHandler, Receive, Scope, Send

from app.api.lean import GENERAL, LeanRequest, LeanRoute, _replaying, lean_response
from app.api.limits import HTTP1, BodyLimit, is_json, replaying
from app.api.serving import LinedResponse, respond, respond_lines, whole_body

# FastAPI's own layers that do nothing for a request without telemetry and without
# ``max_body_size`` (by module and name: older FastAPI versions have neither).
_INERT: Final = frozenset(
    {
        ("fastapi.telemetry._asgi", "ExceptionTelemetryMiddleware"),
        ("fastapi._body_limit", "AppBodyLimitMiddleware"),
    }
)


@dataclass(frozen=True, slots=True)
class _Candidate:
    route: LeanRoute
    pattern: re.Pattern[str]
    # Earlier routes that take the same method: one whose pattern matches the path would
    # serve the request, not ``route``.
    before: tuple[re.Pattern[str], ...]


@dataclass(frozen=True, slots=True)
class _Front:
    routes: tuple[int, int]  # id and length of the route list this was read from
    by_method: dict[str, tuple[_Candidate, ...]]  # empty: the front serves nothing
    limit: BodyLimit | None
    handlers: dict[Any, ExceptionHandler]  # ExceptionMiddleware's
    status_handlers: dict[int, ExceptionHandler]
    server_error: ServerErrorMiddleware | None


class FrontedFastAPI(FastAPI):
    """``FastAPI`` whose ``__call__`` serves the routes with a reader itself when nothing
    needs the general stack (the module's docstring says when)."""

    front: bool = True
    _front: _Front | None = None

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http" and self.front:
            found = self._lean_route(scope)
            if found is not None:
                front, route, params = found
                await self._serve(front, route, params, scope, receive, send)
                return
        await super().__call__(scope, receive, send)

    def _lean_route(self, scope: Scope) -> tuple[_Front, LeanRoute, dict[str, Any]] | None:
        if self.root_path or scope.get("root_path") or self.dependency_overrides:
            return None
        front = self._front
        routes = self.router.routes
        if front is None or front.routes != (id(routes), len(routes)):
            front = self._front = self._read_front()
        candidates = front.by_method.get(scope["method"])
        if not candidates:
            return None
        path: str = scope["path"]
        for candidate in candidates:
            match = candidate.pattern.match(path)
            if match is None:
                continue
            if candidate.before and any(earlier.match(path) for earlier in candidate.before):
                return None  # the router would pick an earlier route
            if "fastapi.telemetry" in scope or _telemetry_on(self):
                return None
            route = candidate.route
            params = match.groupdict()
            for key, value in params.items():
                params[key] = route.param_convertors[key].convert(value)
            return front, route, params
        return None

    def _read_front(self) -> _Front:
        """What the front needs, read from the app's built stack and routes."""
        if self.middleware_stack is None:
            self.middleware_stack = self.build_middleware_stack()
        routes = self.router.routes
        key = (id(routes), len(routes))
        layers = None
        if not self.debug and getattr(self, "max_body_size", None) is None:
            layers = _layers(self.middleware_stack, self.router)
        if layers is None:
            return _Front(key, {}, None, {}, {}, None)
        server_error, limit, handlers, status_handlers = layers
        return _Front(key, _candidates(routes), limit, handlers, status_handlers, server_error)

    async def _serve(
        self,
        front: _Front,
        route: LeanRoute,
        params: dict[str, Any],
        scope: Scope,
        receive: Receive,
        send: Send,
    ) -> None:
        """The request as the stack serves it through ``route``'s lean app."""
        scope["app"] = self
        if "router" not in scope:
            scope["router"] = self.router
        scope["route"] = route
        scope["endpoint"] = route.endpoint
        given = scope.get("path_params")
        scope["path_params"] = params if not given else {**given, **params}
        started = False  # a response began: an error cannot be answered any more

        async def sender(message: Any) -> None:
            nonlocal started
            if message["type"] == "http.response.start":
                started = True
            await send(message)

        read: bytes | None = None
        response: Response | None = None
        try:
            try:
                request = await _intake(front, route, scope, receive, send, sender)
                if request is None:
                    return  # answered: 413, or a JSON body that is not UTF-8
                response, read = await lean_response(route, request)
            except Exception as exc:
                if not await _handled(front, exc, scope, receive, sender):
                    raise
                return
            if response is not None:
                started = True
                if not (
                    type(response).__call__ is _RESPONSE_CALL
                    and response.background is None
                    and (
                        respond_lines(send, response)
                        if isinstance(response, LinedResponse)
                        else respond(
                            send, response.status_code, response.raw_headers, response.body
                        )
                    )
                ):
                    await response(scope, receive, send)
                return
        except Exception as exc:
            await _server_error(front, exc, scope, receive, send, started=started)
            raise
        # A reader stepped aside: FastAPI's handling of the route serves the request.
        scope[GENERAL] = True
        receive = request.receive
        await super().__call__(scope, receive if read is None else _replaying(read, receive), send)


_RESPONSE_CALL: Final = Response.__call__


async def _intake(
    front: _Front, route: LeanRoute, scope: Scope, receive: Receive, send: Send, sender: Send
) -> LeanRequest | None:
    """The request, its body read (if the route reads one) and held to the body limit as
    ``BodyLimit`` holds it; None when the limit has answered it (413, or the 422 of a JSON
    body that is not UTF-8). ``sender``: what an answer of the limit is sent with."""
    request = LeanRequest(scope, receive, send)
    limit = front.limit
    if limit is None:
        return request
    heads = request.heads
    declared = heads.get(b"content-length")
    if route.reads_body and not limit.declared_over(
        None if declared is None else declared.decode("latin-1")
    ):
        # The common request: its whole body in one message (here already, or next).
        body = whole_body(receive)
        if body is None:
            message = await receive()
            if message["type"] == "http.request" and not message.get("more_body", False):
                body = message.get("body", b"")
            else:  # more to come, or the client left: the limit reads it all
                receive = replaying([message], receive)
        if body is not None:
            content_type = heads.get(b"content-type")
            if content_type is not None and not is_json(content_type.decode("latin-1")):
                content_type = None  # (only a JSON body must be UTF-8)
            json = content_type is not None
            if not limit.passes(body, json) and await limit.refused(
                scope, body, json, receive, sender
            ):
                return None
            request._body = body  # what ``request.body()`` gives (Starlette's own)
            return request
    elif (
        declared is None
        and b"transfer-encoding" not in heads
        and scope.get("http_version") in HTTP1
    ):
        return request  # no body (HTTP/1 sends one only with either header)
    checked = await limit.checked(scope, receive, sender)
    if checked is None:
        return None
    return LeanRequest(scope, checked, send)


async def _handled(
    front: _Front, exc: Exception, scope: Scope, receive: Receive, send: Send
) -> bool:
    """``exc`` answered by the handler ``ExceptionMiddleware`` would call; False when
    none takes it."""
    handler = _handler(front, exc)
    if handler is None:
        return False
    answer = await _call(handler, Request(scope, receive, send), exc)
    if answer is not None:
        await answer(scope, receive, send)
    exc.__traceback__ = None  # as Starlette does: a reused exception's would grow
    return True


def _layers(
    stack: ASGIApp, router: ASGIApp
) -> (
    tuple[ServerErrorMiddleware, BodyLimit | None, dict[Any, ExceptionHandler], dict[int, Any]]
    | None
):
    """The layers of the built stack the front does the work of; None when the stack holds
    one it does not know (FastAPI serves every request then)."""
    limit: BodyLimit | None = None
    exceptions: ExceptionMiddleware | None = None
    server_error: ServerErrorMiddleware | None = None
    layer: ASGIApp | None = stack
    while layer is not router:
        if isinstance(layer, ServerErrorMiddleware) and server_error is None:
            server_error = layer
        elif isinstance(layer, BodyLimit) and limit is None:
            limit = layer
        elif isinstance(layer, ExceptionMiddleware) and exceptions is None:
            exceptions = layer
        elif (
            not isinstance(layer, AsyncExitStackMiddleware)
            and (
                type(layer).__module__,
                type(layer).__name__,
            )
            not in _INERT
        ):
            return None
        layer = getattr(layer, "app", None)
        if layer is None:
            return None
    if server_error is None or exceptions is None:
        return None
    # Starlette keeps these privately; they are the ones its middleware looks up.
    return (
        server_error,
        limit,
        exceptions._exception_handlers,
        exceptions._status_handlers,
    )


def _candidates(routes: list[BaseRoute]) -> dict[str, tuple[_Candidate, ...]]:
    """Per method, the routes with a reader, in the router's order."""
    by_method: dict[str, list[_Candidate]] = {}
    for index, route in enumerate(routes):
        if not (isinstance(route, LeanRoute) and route.reader is not None and route.methods):
            continue
        for method in route.methods:
            before = _earlier(routes[:index], method)
            if before is not None:
                candidate = _Candidate(route, route.path_regex, before)
                by_method.setdefault(method, []).append(candidate)
    return {method: tuple(found) for method, found in by_method.items()}


def _telemetry_on(app: FastAPI) -> bool:
    """Whether FastAPI's own telemetry would observe a request (``FastAPI.__call__``'s
    test; versions without native telemetry have none)."""
    native = getattr(app, "_native_telemetry", None)
    if native is None:
        return False
    config = native.config
    if (
        _no_global_provider is not None
        and config["tracer_provider"] is None
        and config["meter_provider"] is None
        and config["logger_provider"] is None
        and _no_global_provider()
    ):
        return False  # what ``enabled()`` finds then, in a fraction of its time
    return bool(native.enabled())


def _global_provider_test() -> Callable[[], bool] | None:
    """A test that no global OpenTelemetry provider is set, nor named by the environment
    for the getter to load: FastAPI's telemetry sees none then. None where the test cannot
    be made exactly (the API's globals or the environment's mapping not where read), and
    ``enabled()`` decides every time."""
    try:
        from opentelemetry import environment_variables as names
        from opentelemetry import trace
        from opentelemetry._logs import _internal as logs
        from opentelemetry.metrics import _internal as metrics

        environ = os.environ
        data = environ._data  # type: ignore[attr-defined]
        keys = tuple(
            environ.encodekey(name)
            for name in (
                names.OTEL_PYTHON_TRACER_PROVIDER,
                names.OTEL_PYTHON_METER_PROVIDER,
                names._OTEL_PYTHON_LOGGER_PROVIDER,
            )
        )
        trace._TRACER_PROVIDER, metrics._METER_PROVIDER, logs._LOGGER_PROVIDER  # noqa: B018
    except (ImportError, AttributeError):  # pragma: no cover - another OpenTelemetry
        return None
    if not isinstance(data, dict):  # pragma: no cover - another platform's environ
        return None
    tracer_key, meter_key, logger_key = keys

    def unset() -> bool:
        return (
            trace._TRACER_PROVIDER is None
            and metrics._METER_PROVIDER is None
            and logs._LOGGER_PROVIDER is None
            and tracer_key not in data
            and meter_key not in data
            and logger_key not in data
        )

    return unset


_no_global_provider: Final = _global_provider_test()


def _earlier(routes: list[BaseRoute], method: str) -> tuple[re.Pattern[str], ...] | None:
    """The patterns of the routes of ``routes`` that take ``method``; None when one of
    them is not a plain route (a mount, an included router): the router decides then."""
    found: list[re.Pattern[str]] = []
    for route in routes:
        if type(route) not in (Route, APIRoute, LeanRoute):
            return None
        assert isinstance(route, Route)
        if route.methods is None or method in route.methods:
            found.append(route.path_regex)
    return tuple(found)


def _handler(front: _Front, exc: Exception) -> ExceptionHandler | None:
    """The handler ``ExceptionMiddleware`` calls for ``exc`` (Starlette's lookup)."""
    if isinstance(exc, HTTPException):
        handler = front.status_handlers.get(exc.status_code)
        if handler is not None:
            return handler
    for kind in type(exc).__mro__:
        handler = front.handlers.get(kind)
        if handler is not None:
            return handler
    return None


async def _server_error(
    front: _Front, exc: Exception, scope: Scope, receive: Receive, send: Send, *, started: bool
) -> None:
    """``ServerErrorMiddleware``'s answer to ``exc`` (the caller re-raises it)."""
    layer = front.server_error
    assert layer is not None
    request = Request(scope)
    handler = layer.handler
    if handler is None:
        response: Response | None = layer.error_response(request, exc)
    else:
        response = await _call(handler, request, exc)
    if not started and response is not None:
        await response(scope, receive, send)


async def _call(handler: Callable[..., Any], request: Request, exc: Exception) -> Response | None:
    """An exception handler's answer, as Starlette calls one (a plain function in a thread)."""
    if is_async_callable(handler):
        answer: Response | None = await handler(request, exc)
    else:
        answer = await run_in_threadpool(handler, request, exc)
    return answer
