"""Who is signed in to the console, and what they may see: sessions, CSRF, tenants.

    who = await signed_in(request)          # a Viewer, or SignInNeeded (→ the sign-in page)
    check_csrf(who, form)                   # every POST; Forbidden otherwise
    tenants = who.tenants                   # operator: every configured tenant

A session is a random token in an HttpOnly, SameSite=Strict cookie (Secure on https),
kept server-side (``app.store.sessions``): the API key is read once at sign-in and never
stored, put in a URL or handed to script.
"""

from __future__ import annotations

import hashlib
import hmac
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Final

from fastapi import Request
from fastapi.responses import Response

from app.api.auth import DEFAULT_TENANT, authenticate
from app.api.problems import Unauthorized
from app.api.resources import Resources, resources_of
from app.settings import Settings
from app.store.sessions import Session

COOKIE: Final = "reprompt_console"
COOKIE_PATH: Final = "/console"
CSRF_FIELD: Final = "csrf"
CSRF_HEADER: Final = "x-csrf-token"


class SignInNeeded(Exception):
    """No valid session: the page answers with the sign-in page (or 401 for a fragment)."""


class Forbidden(Exception):
    """A state-changing request without the session's CSRF token, or from another site."""


@dataclass(frozen=True, slots=True)
class Viewer:
    """The signed-in person: their session, the token naming it, the tenants they see."""

    session: Session
    token: str
    tenants: tuple[str, ...]

    @property
    def operator(self) -> bool:
        return self.session.operator

    @property
    def csrf(self) -> str:
        return self.session.csrf


def known_tenants(settings: Settings) -> tuple[str, ...]:
    """The tenants of the configured API keys (``default`` with none: auth is off)."""
    tenants = sorted({key.tenant for key in settings.keys.values()})
    return tuple(tenants) if tenants else (DEFAULT_TENANT,)


def who_is(key: str, settings: Settings) -> tuple[str | None, bool]:
    """``(tenant, operator)`` of an API or operator key; ``Unauthorized`` for neither."""
    digest = hashlib.sha256(key.encode()).hexdigest()
    operator = False
    # Every digest compared, none skipped: the time taken says nothing about a match.
    for known in settings.console_operator_keys:
        if hmac.compare_digest(digest, known):
            operator = True
    if operator:
        return None, True
    keys: Mapping[str, object] = settings.keys
    if not keys and not key:
        return DEFAULT_TENANT, False  # auth is off (loopback): the API's one tenant
    if not key:
        raise Unauthorized("enter an API key")
    return authenticate(key, settings.keys), False


async def signed_in(request: Request) -> Viewer:
    """The viewer of ``request``'s session cookie; ``SignInNeeded`` without a live one."""
    token = request.cookies.get(COOKIE, "")
    if not token:
        raise SignInNeeded
    res = resources_of(request)
    session = await res.store.console_sessions().get(token)
    if session is None:
        raise SignInNeeded
    return Viewer(session, token, tenants_of(session, res))


def tenants_of(session: Session, res: Resources) -> tuple[str, ...]:
    if session.operator:
        return known_tenants(res.settings)
    assert session.tenant is not None
    return (session.tenant,)


def same_origin(request: Request) -> bool:
    """Whether a POST comes from this site's own pages.

    Browsers send ``Sec-Fetch-Site`` (Chromium, Firefox, Safari); else ``Origin`` must be
    this origin. A request with neither is not a browser's cross-site form (and still
    needs the CSRF token)."""
    site = request.headers.get("sec-fetch-site")
    if site is not None:
        return site in ("same-origin", "none")
    origin = request.headers.get("origin")
    if origin is not None:
        return origin == f"{request.url.scheme}://{request.url.netloc}"
    return True


def check_csrf(request: Request, viewer: Viewer, form: Mapping[str, str]) -> None:
    """``Forbidden`` unless the request carries the session's CSRF token from this site."""
    sent = form.get(CSRF_FIELD) or request.headers.get(CSRF_HEADER) or ""
    if not same_origin(request) or not hmac.compare_digest(sent.encode(), viewer.csrf.encode()):
        raise Forbidden


def set_cookie(response: Response, request: Request, token: str, ttl_s: int) -> None:
    response.set_cookie(
        COOKIE,
        token,
        max_age=ttl_s,
        path=COOKIE_PATH,
        httponly=True,
        samesite="strict",
        secure=request.url.scheme == "https",
    )


def clear_cookie(response: Response, request: Request) -> None:
    response.delete_cookie(
        COOKIE,
        path=COOKIE_PATH,
        httponly=True,
        samesite="strict",
        secure=request.url.scheme == "https",
    )
