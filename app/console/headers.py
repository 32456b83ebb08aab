"""The console's security headers, on every answer under /console (pages and assets).

A strict Content-Security-Policy: scripts, styles and connections from this origin only,
no inline script or style, no framing, forms posted only here; pages never cached.
"""

from __future__ import annotations

from typing import Final

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


class SecurityHeaders:
    """Adds ``HEADERS`` to answers under /console; ``no-store`` to all but the assets."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        path = scope.get("path", "") if scope["type"] == "http" else ""
        if path != "/console" and not path.startswith("/console/"):
            await self.app(scope, receive, send)
            return
        asset = path.startswith("/console/static/")

        async def with_headers(message: Message) -> None:
            if message["type"] == "http.response.start":
                headers = [
                    (name, value)
                    for name, value in message.get("headers", [])
                    if asset or name.lower() != b"cache-control"
                ]
                headers.extend(HEADERS)
                if not asset:
                    headers.append(NO_STORE)
                message["headers"] = headers
            await send(message)

        await self.app(scope, receive, with_headers)
