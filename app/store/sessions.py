"""The console's sign-ins, kept in Redis: a session per sign-in, and attempts per address.

    sessions = store.console_sessions()
    token, session = await sessions.create(tenant="acme", operator=False, ttl_s=3600)
    session = await sessions.get(token)      # None once expired or signed out
    await sessions.delete(token)             # sign-out: the token is dead everywhere

The token (the cookie's value) is never stored: its key is the token's SHA-256, so a
read of Redis yields no usable cookie. Every API process shares the sessions, so a
sign-out on one is a sign-out on all.
"""

from __future__ import annotations

import hashlib
import json
import secrets
from dataclasses import dataclass
from typing import Final

from app.store.connection import RedisClient
from app.store.errors import edge
from app.store.keys import Keys

TOKEN_BYTES: Final = 32
# Sign-in attempts are counted per address over this window.
SIGNIN_WINDOW_S: Final = 60


@dataclass(frozen=True, slots=True)
class Session:
    """Who signed in: a tenant's key (``tenant``) or an operator's (``operator``, every
    tenant). ``csrf``: the token every state-changing request of the session carries."""

    tenant: str | None
    operator: bool
    csrf: str


class ConsoleSessions:
    """Sign-in sessions and the sign-in rate, over one Redis client."""

    def __init__(self, redis: RedisClient, keys: Keys) -> None:
        self._redis = redis
        self._keys = keys

    def _key(self, token: str) -> str:
        return self._keys.console_session(hashlib.sha256(token.encode()).hexdigest())

    @edge
    async def create(
        self, *, tenant: str | None, operator: bool, ttl_s: int
    ) -> tuple[str, Session]:
        """A new session; its token (for the cookie) and the session."""
        token = secrets.token_urlsafe(TOKEN_BYTES)
        session = Session(tenant=tenant, operator=operator, csrf=secrets.token_urlsafe(24))
        value = json.dumps({"tenant": tenant, "operator": operator, "csrf": session.csrf})
        await self._redis.set(self._key(token), value, ex=ttl_s)
        return token, session

    @edge
    async def get(self, token: str) -> Session | None:
        """The session of ``token``; None when unknown, expired or signed out."""
        if not token or len(token) > 128:
            return None
        raw = await self._redis.get(self._key(token))
        if raw is None:
            return None
        fields = json.loads(raw)
        return Session(
            tenant=fields["tenant"], operator=bool(fields["operator"]), csrf=fields["csrf"]
        )

    @edge
    async def delete(self, token: str) -> None:
        if token and len(token) <= 128:
            await self._redis.delete(self._key(token))

    @edge
    async def count_signin(self, address: str) -> int:
        """Counts a sign-in attempt from ``address``; the attempts in its current window."""
        key = self._keys.console_signins(hashlib.sha256(address.encode()).hexdigest())
        # The window starts with the first attempt (SET NX) and is never extended.
        await self._redis.set(key, 0, ex=SIGNIN_WINDOW_S, nx=True)
        return int(await self._redis.incr(key))
