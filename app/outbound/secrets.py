"""Tenant secrets for the headers of outbound calls (``REPROMPT_TOOL_SECRETS_FILE``).

A job never carries a credential: a header value names one, ``{{secret:NAME}}``, and the
worker fills it in from the operator's TOML file at call time::

    # tool-secrets.toml (0600)
    [tenants.acme]
    CRM_TOKEN = "s3cr3t…"

    secrets = ToolSecrets.load(path)
    secrets.check_headers({"Authorization": "Bearer {{secret:CRM_TOKEN}}"}, "acme")  # None
    rendered = secrets.render_headers({"Authorization": "Bearer {{secret:CRM_TOKEN}}"}, "acme")
    rendered.headers    # what is sent;  rendered.secrets: values to scrub from any text

Secret values never reach a job record, a log line, an error or a repr. The file is read
again when it changes, so a credential is rotated without a restart.
"""

from __future__ import annotations

import logging
import re
import tomllib
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Final

logger = logging.getLogger(__name__)

MAX_HEADERS: Final = 16
MAX_NAME_CHARS: Final = 64
MAX_VALUE_CHARS: Final = 1024
MAX_SECRET_CHARS: Final = 4096
REFERENCE: Final = re.compile(r"\{\{secret:([A-Za-z_][A-Za-z0-9_]{0,63})\}\}")
_TOKEN: Final = re.compile(r"[!#$%&'*+.^_`|~0-9A-Za-z-]+")
_SECRET_NAME: Final = re.compile(r"[A-Za-z_][A-Za-z0-9_]{0,63}")
# Hop-by-hop headers (RFC 9110 7.6.1) and those the service sets itself: the framing, the
# host it checked, the body's type and the Standard Webhooks signature.
RESERVED: Final = frozenset(
    {
        "connection",
        "keep-alive",
        "proxy-authenticate",
        "proxy-authorization",
        "proxy-connection",
        "te",
        "trailer",
        "transfer-encoding",
        "upgrade",
        "host",
        "content-length",
        "content-type",
        "content-encoding",
        "expect",
    }
)


@dataclass(frozen=True, slots=True)
class RenderedHeaders:
    """Headers ready to send, and the secret values in them (to scrub from any text)."""

    headers: dict[str, str] = field(repr=False)
    secrets: tuple[str, ...] = field(repr=False)

    def __repr__(self) -> str:
        return f"RenderedHeaders(names={sorted(self.headers)!r})"


class UnknownSecret(LookupError):
    """A header names a secret the tenant does not have (any more)."""


class ToolSecrets:
    """The operator's per-tenant secrets; ``ToolSecrets.none()`` when no file is set."""

    __slots__ = ("_path", "_stamp", "_tenants")

    def __init__(self, path: Path | None, tenants: Mapping[str, Mapping[str, str]]) -> None:
        self._path = path
        self._tenants = {t: dict(values) for t, values in tenants.items()}
        self._stamp = _stamp(path) if path else None

    @classmethod
    def none(cls) -> ToolSecrets:
        return cls(None, {})

    @classmethod
    def load(cls, path: Path) -> ToolSecrets:
        """Read ``path``; a ``ValueError`` says what is wrong, never a value."""
        if path.stat().st_mode & 0o077:
            logger.warning("%s is readable by other users; it holds secrets (chmod 600)", path)
        return cls(path, parse(path.read_bytes(), where=str(path)))

    def __repr__(self) -> str:
        return f"ToolSecrets(path={self._path!s}, tenants={len(self._tenants)})"

    def names(self, tenant: str) -> frozenset[str]:
        """The secret names ``tenant`` may reference."""
        return frozenset(self._current().get(tenant, {}))

    def check_headers(self, headers: Mapping[str, str] | None, tenant: str) -> str | None:
        """Why ``headers`` may not be sent for ``tenant``, or ``None`` (checked at submit).

        Names the header and the secret, never a value.
        """
        if not headers:
            return None
        if len(headers) > MAX_HEADERS:
            return f"at most {MAX_HEADERS} headers, not {len(headers)}"
        known = self.names(tenant)
        seen: set[str] = set()
        for name, value in headers.items():
            problem = _header_problem(name, value, seen) or _reference_problem(name, value, known)
            if problem:
                return problem
            seen.add(name.lower())
        return None

    def render_headers(self, headers: Mapping[str, str] | None, tenant: str) -> RenderedHeaders:
        """``headers`` with each ``{{secret:NAME}}`` filled in.

        ``UnknownSecret`` names the first one ``tenant`` does not have.
        """
        values = self._current().get(tenant, {})
        used: list[str] = []

        def fill(match: re.Match[str]) -> str:
            name = match.group(1)
            if name not in values:
                raise UnknownSecret(f"unknown secret {name!r} for tenant {tenant!r}")
            used.append(values[name])
            return values[name]

        rendered = {name: REFERENCE.sub(fill, value) for name, value in (headers or {}).items()}
        return RenderedHeaders(rendered, tuple(dict.fromkeys(used)))

    def _current(self) -> dict[str, dict[str, str]]:
        """The tenants' secrets, read again if the file changed (a bad edit keeps the old)."""
        if self._path is None:
            return self._tenants
        stamp = _stamp(self._path)
        if stamp != self._stamp:
            try:
                self._tenants = parse(self._path.read_bytes(), where=str(self._path))
            except (OSError, ValueError) as exc:
                logger.warning("keeping the previous tool secrets: %s", exc)
            self._stamp = stamp
        return self._tenants


def parse(data: bytes, *, where: str = "the tool secrets file") -> dict[str, dict[str, str]]:
    """``{tenant: {NAME: value}}`` from the TOML text; ``ValueError`` naming the problem."""
    try:
        document = tomllib.loads(data.decode("utf-8"))
    except (UnicodeDecodeError, tomllib.TOMLDecodeError) as exc:
        # tomllib's messages give a line and column, not the text around them.
        raise ValueError(f"{where} is not valid TOML: {exc}") from None
    unknown = set(document) - {"tenants"}
    if unknown:
        raise ValueError(f"{where}: unknown top-level keys {sorted(unknown)}; use [tenants.NAME]")
    tenants = document.get("tenants", {})
    if not isinstance(tenants, dict):
        raise ValueError(f"{where}: 'tenants' must be a table of [tenants.NAME] tables")
    out: dict[str, dict[str, str]] = {}
    for tenant, table in tenants.items():
        if not isinstance(table, dict):
            raise ValueError(f'{where}: [tenants.{tenant}] must be a table of NAME = "value"')
        out[tenant] = {}
        for name, value in table.items():
            if problem := _secret_problem(name, value):
                raise ValueError(f"{where}: [tenants.{tenant}] {name}: {problem}")
            out[tenant][name] = value
    return out


def _secret_problem(name: str, value: object) -> str | None:
    if not _SECRET_NAME.fullmatch(name):
        return "a secret name is letters, digits and _ (at most 64, not starting with a digit)"
    if not isinstance(value, str) or not value:
        return "the value must be a non-empty string"
    if len(value) > MAX_SECRET_CHARS:
        return f"the value is longer than {MAX_SECRET_CHARS} characters"
    if _has_control(value):
        return "the value contains a line break or another control character"
    return None


def _header_problem(name: str, value: str, seen: set[str]) -> str | None:
    if not isinstance(name, str) or not _TOKEN.fullmatch(name) or len(name) > MAX_NAME_CHARS:
        return f"header name {str(name)[:MAX_NAME_CHARS]!r} is not a valid HTTP header name"
    lower = name.lower()
    if lower in RESERVED or lower.startswith("webhook-"):
        return f"header {name!r} is set by the service and may not be overridden"
    if lower in seen:
        return f"header {name!r} is given twice"
    if not isinstance(value, str) or len(value) > MAX_VALUE_CHARS:
        return (
            f"header {name!r}: the value must be a string of {MAX_VALUE_CHARS} characters at most"
        )
    if _has_control(value):
        return f"header {name!r}: the value contains a line break or another control character"
    return None


def _reference_problem(name: str, value: str, known: frozenset[str]) -> str | None:
    for reference in REFERENCE.finditer(value):
        if reference.group(1) not in known:
            return (
                f"header {name!r}: unknown secret {reference.group(1)!r} (the operator's "
                "tool secrets file has none of that name for this tenant)"
            )
    if "{{" in REFERENCE.sub("", value):
        return f"header {name!r}: only {{{{secret:NAME}}}} may appear between double braces"
    return None


def _has_control(value: str) -> bool:
    return any((ord(c) < 0x20 and c != "\t") or ord(c) == 0x7F for c in value)


def _stamp(path: Path) -> tuple[int, int] | None:
    try:
        stat = path.stat()
    except OSError:
        return None
    return stat.st_mtime_ns, stat.st_size
