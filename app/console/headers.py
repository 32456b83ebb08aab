"""The console's security headers, on every answer under /console (pages and assets).

``ConsoleRoute`` adds them to the pages' answers; ``SecurityHeaders`` wraps the assets'
app. Nothing of this runs for the API's own routes.

A strict Content-Security-Policy: scripts, styles and connections from this origin only,
no inline script or style, no framing, forms posted only here; pages never cached.
"""

from __future__ import annotations

from collections.abc import Callable, Coroutine
from typing import Any, Final

from fastapi.routing import APIRoute
from starlette.requests import Request
from starlette.responses import Response
from starlette.types import ASGIApp, Message, Receive, Scope, Send

CSP: Final = (
    "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; "
    "connect-src 'self'; form-action 'self'; frame-ancestors 'none'; base-uri 'none'"
)
HEADERS: Final = (
    (b"content-security-policy", CSP.encode()),
    (b"x-frame-options", b"DENY"),
    (b"x-content-type-options", b"nosniff"),
    (b"referrer-policy", b"same-origin"),
    (b"cross-origin-opener-policy", b"same-origin"),
)
NO_STORE: Final = (b"cache-control", b"no-store")


def secure(response: Response) -> Response:
    """``response`` with ``HEADERS`` and ``no-store`` (a page: it holds a tenant's data)."""
    for name, value in (*HEADERS, NO_STORE):
        response.headers[name.decode()] = value.decode()
    return response


class ConsoleRoute(APIRoute):
    """A console page's route: its answers carry the security headers."""

    def get_route_handler(self) -> Callable[[Request], Coroutine[Any, Any, Response]]:
        handler = super().get_route_handler()

        async def with_headers(request: Request) -> Response:
            return secure(await handler(request))

        return with_headers


class SecurityHeaders:
    """The assets' app, its answers with ``HEADERS`` (cacheable: no page data in them)."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        async def with_headers(message: Message) -> None:
            if message["type"] == "http.response.start":
                message["headers"] = [*message.get("headers", []), *HEADERS]
            await send(message)

        await self.app(scope, receive, with_headers)
