"""Bearer API keys: who is calling, as a tenant name.

    tenant = authenticate(token, settings.keys)     # token: what follows "Bearer "

Keys are configured as ``tenant:sha256hex`` (``REPROMPT_API_KEYS``) and held only as
digests. With no keys configured, auth is off and every caller is tenant ``default``.
"""

from __future__ import annotations

import hashlib
import hmac
from collections.abc import Mapping
from typing import Final

from app.api.problems import Unauthorized
from app.settings import ApiKey

DEFAULT_TENANT: Final = "default"


def authenticate(token: str | None, keys: Mapping[str, ApiKey], *, present: bool = False) -> str:
    """The tenant ``token`` belongs to; ``Unauthorized`` otherwise.

    ``present``: an ``Authorization`` header was sent but is not a bearer token.
    """
    if not keys:
        return DEFAULT_TENANT
    if not token:
        if present:
            raise Unauthorized("send the API key as Authorization: Bearer <key>")
        raise Unauthorized("this service needs an API key: send Authorization: Bearer <key>")
    digest = hashlib.sha256(token.encode()).hexdigest()
    # Compare against every digest without stopping early: the time taken says nothing
    # about which key (or how much of one) matched.
    tenant: str | None = None
    for known, key in keys.items():
        if hmac.compare_digest(digest, known):
            tenant = key.tenant
    if tenant is None:
        raise Unauthorized("the API key is not valid", invalid_token=True)
    return tenant
