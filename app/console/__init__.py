"""The web console at /console: jobs, each job's attempts and what they cost, the overview.

    console.install(app)          # app.api.app does this unless REPROMPT_CONSOLE=false

Server-rendered pages (Jinja2, autoescaped) with htmx and its SSE extension, vendored in
``static/vendor`` with their licences: no build step, no CDN, nothing fetched at run time.
Model answers, inputs and diagnoses are shown as escaped text only; no page runs inline
script (the Content-Security-Policy forbids it). docs/console.md tells the rest.
"""

from __future__ import annotations

from pathlib import Path

from fastapi import FastAPI
from starlette.staticfiles import StaticFiles

from app.console.access import Forbidden, SignInNeeded
from app.console.batches import router as batches_router
from app.console.headers import SecurityHeaders
from app.console.pages import forbidden, router, signin_needed

STATIC = Path(__file__).parent / "static"


def install(app: FastAPI) -> None:
    """Mount the console's pages, assets and headers on ``app``."""
    app.include_router(router)
    app.include_router(batches_router)  # batches (#30)
    assets = SecurityHeaders(StaticFiles(directory=STATIC))
    app.mount("/console/static", assets, name="console-static")
    app.add_exception_handler(SignInNeeded, signin_needed)
    app.add_exception_handler(Forbidden, forbidden)
