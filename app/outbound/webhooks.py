"""Standard Webhooks signatures: how a receiver knows a request came from this service.

Every request the service sends where a tenant pointed it carries three headers::

    webhook-id:         msg_…                   the same across retries of one message
    webhook-timestamp:  1718000000              seconds since the epoch, when signed
    webhook-signature:  v1,<base64 HMAC-SHA256 of "{id}.{timestamp}.{body}">

keyed with the tenant's secret, ``whsec_<base64 key>``. A receiver checks them with any
Standard Webhooks library, or with ``verify``::

    verify("whsec_…", request.headers, await request.body())    # raises InvalidSignature

Tenant secrets are derived, not stored: ``HMAC-SHA256(operator key, tenant name)``, so every
API and worker process with the same operator key (``REPROMPT_WEBHOOK_SIGNING_KEY``) signs
alike. With no key set, one is generated at first use in the data directory (a 0600 file) so
that secrets survive restarts; processes on other machines then need that key too. During
a rotation (``REPROMPT_WEBHOOK_SIGNING_KEY_PREVIOUS``) each message carries a signature
under each key, and receivers holding either secret accept it.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
import logging
import os
import secrets
import time
import tomllib
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Final

logger = logging.getLogger(__name__)

SECRET_PREFIX: Final = "whsec_"
VERSION: Final = "v1"
ID_HEADER: Final = "webhook-id"
TIMESTAMP_HEADER: Final = "webhook-timestamp"
SIGNATURE_HEADER: Final = "webhook-signature"
DEFAULT_TOLERANCE_S: Final = 300
KEY_FILE: Final = "webhook-signing.key"
KEY_BYTES: Final = 32


class InvalidSignature(ValueError):
    """The request's Standard Webhooks headers do not prove it came from the secret's holder."""


def secret_key(secret: str) -> bytes:
    """The HMAC key inside a ``whsec_…`` secret.

    The prefix and base64 padding may be left out, as other Standard Webhooks libraries allow.
    """
    encoded = secret.removeprefix(SECRET_PREFIX)
    try:
        key = base64.b64decode(encoded + "=" * (-len(encoded) % 4), validate=True)
    except (binascii.Error, ValueError):
        raise ValueError("a webhook secret is whsec_ followed by base64") from None
    if not key:
        raise ValueError("a webhook secret is whsec_ followed by base64")
    return key


def signature(secret: str, msg_id: str, timestamp: int, body: bytes) -> str:
    """``v1,<base64>``: one secret's signature of one message."""
    content = f"{msg_id}.{timestamp}.".encode() + body
    digest = hmac.new(secret_key(secret), content, hashlib.sha256).digest()
    return f"{VERSION},{base64.b64encode(digest).decode('ascii')}"


def sign(secret: str | Sequence[str], msg_id: str, timestamp: int, body: bytes) -> dict[str, str]:
    """The three headers for ``body``; with several secrets (a rotation), one signature each."""
    keys = [secret] if isinstance(secret, str) else list(secret)
    return {
        ID_HEADER: msg_id,
        TIMESTAMP_HEADER: str(timestamp),
        SIGNATURE_HEADER: " ".join(signature(s, msg_id, timestamp, body) for s in keys),
    }


def verify(
    secret: str | Sequence[str],
    headers: Mapping[str, str],
    body: bytes,
    *,
    tolerance_s: int = DEFAULT_TOLERANCE_S,
    now: float | None = None,
) -> None:
    """Raise ``InvalidSignature`` unless ``headers`` sign ``body`` with (one of) ``secret``.

    The timestamp must be within ``tolerance_s`` of ``now`` either way: replays are refused,
    and so are clocks far ahead. Comparisons take constant time.
    """
    lower = {name.lower(): value for name, value in headers.items()}
    msg_id = lower.get(ID_HEADER, "")
    stamp = lower.get(TIMESTAMP_HEADER, "")
    offered = lower.get(SIGNATURE_HEADER, "")
    if not msg_id or not stamp or not offered:
        raise InvalidSignature("missing webhook-id, webhook-timestamp or webhook-signature")
    try:
        timestamp = int(stamp)
    except ValueError:
        raise InvalidSignature("webhook-timestamp is not a whole number of seconds") from None
    skew = (time.time() if now is None else now) - timestamp
    if abs(skew) > tolerance_s:
        raise InvalidSignature(
            "webhook-timestamp is too old" if skew > 0 else "webhook-timestamp is in the future"
        )
    keys = [secret] if isinstance(secret, str) else list(secret)
    expected = [signature(s, msg_id, timestamp, body).encode() for s in keys]
    candidates = [part.encode() for part in offered.split(" ") if part.startswith(f"{VERSION},")]
    # Every pair is compared, so the time taken does not say which one matched.
    matched = False
    for mine in expected:
        for theirs in candidates:
            matched |= hmac.compare_digest(mine, theirs)
    if not matched:
        raise InvalidSignature("no signature matches")


def parse_tenant_secrets(env: str | None, file: bytes | None) -> dict[str, tuple[str, ...]]:
    """Secrets the operator set per tenant, current first, at most two (a rotation).

    ``env``: ``tenant=whsec_…`` entries, comma-separated (a tenant named twice: the second
    is its previous secret). ``file``: TOML, ``[tenants.<name>] secrets = ["whsec_…", …]``.
    A malformed entry raises ``ValueError`` naming the tenant, never the secret.
    """
    found: dict[str, list[str]] = {}
    for entry in (env or "").split(","):
        if not entry.strip():
            continue
        tenant, sep, secret = entry.strip().partition("=")
        if not sep or not tenant:
            raise ValueError("REPROMPT_WEBHOOK_SECRETS: each entry is tenant=whsec_…")
        found.setdefault(tenant, []).append(secret)
    if file is not None:
        for tenant, listed in _secrets_file(file).items():
            found.setdefault(tenant, []).extend(listed)
    for tenant, listed in found.items():
        if not 1 <= len(listed) <= 2:
            raise ValueError(f"tenant {tenant!r} has {len(listed)} webhook secrets; 1 or 2")
        for secret in listed:
            try:
                short = not secret.startswith(SECRET_PREFIX) or len(secret_key(secret)) < 16
            except ValueError:
                short = True
            if short:
                raise ValueError(
                    f"a webhook secret of tenant {tenant!r} is not whsec_<base64 of 16+ bytes>"
                )
    return {tenant: tuple(listed) for tenant, listed in found.items()}


def _secrets_file(file: bytes) -> dict[str, list[str]]:
    try:
        data = tomllib.loads(file.decode("utf-8"))
    except (tomllib.TOMLDecodeError, UnicodeDecodeError) as exc:
        raise ValueError(f"the webhook secrets file is not TOML: {exc}") from None
    tenants = data.get("tenants", {})
    if not isinstance(tenants, dict):
        raise ValueError("the webhook secrets file: [tenants.<name>] tables expected")
    found: dict[str, list[str]] = {}
    for tenant, table in tenants.items():
        listed = table.get("secrets") if isinstance(table, dict) else None
        if not isinstance(listed, list) or not all(isinstance(s, str) for s in listed):
            raise ValueError(f'the webhook secrets of {tenant!r}: secrets = ["whsec_…"]')
        found[tenant] = list(listed)
    return found


def tenant_secret(key: bytes, tenant: str) -> str:
    """The tenant's ``whsec_…`` secret under the operator key ``key``."""
    derived = hmac.new(key, tenant.encode("utf-8"), hashlib.sha256).digest()
    return SECRET_PREFIX + base64.b64encode(derived).decode("ascii")


def load_signing_key(configured: str | None, data_dir: Path) -> bytes:
    """The operator key: the setting if set, else ``data_dir/webhook-signing.key``.

    The file is made (random, 0600) if there is none yet.
    """
    if configured:
        return configured.encode("utf-8")
    path = data_dir / KEY_FILE
    if not path.exists():
        _create_key_file(path)
    if path.stat().st_mode & 0o077:
        logger.warning("%s was readable by others; it is now 0600", path)
        path.chmod(0o600)
    try:
        key = base64.b64decode(path.read_text(encoding="ascii").strip(), validate=True)
    except (binascii.Error, ValueError, UnicodeDecodeError):
        raise ValueError(f"{path} holds no base64 key; remove it to make a new one") from None
    if len(key) < 16:
        raise ValueError(f"{path} holds a key shorter than 16 bytes; remove it to make a new one")
    return key


def _create_key_file(path: Path) -> None:
    """Write a new random key; two processes starting at once keep the first one's."""
    path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    temporary = path.with_name(f".{path.name}.{os.getpid()}.{secrets.token_hex(4)}")
    fd = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    try:
        with os.fdopen(fd, "w", encoding="ascii") as handle:
            handle.write(base64.b64encode(secrets.token_bytes(KEY_BYTES)).decode("ascii") + "\n")
            handle.flush()
            os.fsync(handle.fileno())
        try:
            os.link(temporary, path)  # fails if another process got there first
            logger.info("made a webhook signing key in %s", path)
        except FileExistsError:
            pass
    finally:
        temporary.unlink(missing_ok=True)


class Signer:
    """Signs each tenant's messages with its secrets. Build once per process::

        signer = Signer(load_signing_key(None, data_dir))
        headers = signer.headers("acme", "msg_1", body)

    During a rotation the previous key's secret signs too.
    """

    __slots__ = ("_clock", "_configured", "_keys")

    def __init__(
        self,
        key: bytes,
        *,
        previous: bytes | None = None,
        configured: Mapping[str, tuple[str, ...]] | None = None,
        clock: Callable[[], float] = time.time,
    ) -> None:
        if len(key) < 16:
            raise ValueError("the webhook signing key must be at least 16 bytes")
        self._keys = (key,) if previous is None else (key, previous)
        self._configured = dict(configured or {})
        self._clock = clock

    def __repr__(self) -> str:
        return f"Signer(keys={len(self._keys)}, configured tenants={len(self._configured)})"

    def secret_for(self, tenant: str) -> str:
        """The secret the tenant's receivers verify with.

        The one the operator set for it, else the one derived from the current key.
        """
        return self.secrets_for(tenant)[0]

    def secrets_for(self, tenant: str) -> tuple[str, ...]:
        """Every secret the tenant's messages are signed with, current first.

        Its own (one, or two during a rotation), else one derived from each operator key.
        """
        own = self._configured.get(tenant)
        if own:
            return own
        return tuple(tenant_secret(key, tenant) for key in self._keys)

    def headers(self, tenant: str, msg_id: str, body: bytes) -> dict[str, str]:
        """The Standard Webhooks headers for ``body``, signed now."""
        return sign(self.secrets_for(tenant), msg_id, int(self._clock()), body)
