"""Tenant secrets for the headers of outbound calls (``REPROMPT_TOOL_SECRETS_FILE``).

A job never carries a credential: a header value names one, ``{{secret:NAME}}``, and the
worker fills it in from the operator's TOML file at call time::

    # tool-secrets.toml (0600)
    [tenants.acme]
    CRM_TOKEN = { value = "s3cr3t…", hosts = ["crm.example.com", "*.crm.example.com"] }
    LEGACY = "v…"                  # a bare value: any host (warned at load)

    secrets = ToolSecrets.load(path)
    headers = {"Authorization": "Bearer {{secret:CRM_TOKEN}}"}
    secrets.check_headers(headers, "acme", host="crm.example.com")      # None
    secrets.check_headers(headers, "acme", host="evil.example.net")     # "… not for …"
    rendered = secrets.render_headers(headers, "acme", host="crm.example.com")
    rendered.headers    # what is sent;  rendered.secrets: values to scrub from any text

A secret bound to hosts is only ever sent to those (checked at submit and again at call
time, since the file may change in between). Secret values never reach a job record, a
log line, an error or a repr. The file is read again when it changes, so a credential is
rotated without a restart.
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
MAX_HOSTS: Final = 32
REFERENCE: Final = re.compile(r"\{\{secret:([A-Za-z_][A-Za-z0-9_]{0,63})\}\}")
_TOKEN: Final = re.compile(r"[!#$%&'*+.^_`|~0-9A-Za-z-]+")
_SECRET_NAME: Final = re.compile(r"[A-Za-z_][A-Za-z0-9_]{0,63}")
# A host a secret is for: a name (``api.example.com``) or its subdomains (``*.example.com``).
_HOST_PATTERN: Final = re.compile(r"(\*\.)?[a-z0-9_](?:[a-z0-9_.-]{0,251}[a-z0-9_])?")
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


@dataclass(frozen=True, slots=True)
class Secret:
    """One secret: its value and the hosts it may be sent to (``None``: any host)."""

    value: str = field(repr=False)
    hosts: tuple[str, ...] | None = None

    def allows(self, host: str) -> bool:
        """Whether this secret may go to ``host`` (lower case, no trailing dot)."""
        if self.hosts is None:
            return True
        host = host.lower().rstrip(".")
        return any(
            host.endswith(pattern[1:]) if pattern.startswith("*.") else host == pattern
            for pattern in self.hosts
        )


class UnknownSecret(LookupError):
    """A header names a secret the tenant does not have (any more), or not for this host."""


class BadHeader(ValueError):
    """A rendered header value that cannot be sent (a control or non-ASCII character)."""


class ToolSecrets:
    """The operator's per-tenant secrets; ``ToolSecrets.none()`` when no file is set."""

    __slots__ = ("_path", "_stamp", "_tenants")

    def __init__(self, path: Path | None, tenants: Mapping[str, Mapping[str, Secret]]) -> None:
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

    def check_headers(
        self, headers: Mapping[str, str] | None, tenant: str, *, host: str | None = None
    ) -> str | None:
        """Why ``headers`` may not be sent for ``tenant`` to ``host``, or ``None``.

        Checked at submit; ``host`` is the tool URL's (``None``: not known, no host check).
        Names the header, the secret and the host, never a value.
        """
        if not headers:
            return None
        if len(headers) > MAX_HEADERS:
            return f"at most {MAX_HEADERS} headers, not {len(headers)}"
        own = self._current().get(tenant, {})
        seen: set[str] = set()
        for name, value in headers.items():
            problem = _header_problem(name, value, seen) or _reference_problem(
                name, value, own, host
            )
            if problem:
                return problem
            seen.add(name.lower())
        return None

    def render_headers(
        self, headers: Mapping[str, str] | None, tenant: str, *, host: str | None = None
    ) -> RenderedHeaders:
        """``headers`` with each ``{{secret:NAME}}`` filled in, for a call to ``host``.

        ``UnknownSecret`` names the first one ``tenant`` does not have or that is not for
        ``host``; ``BadHeader`` names a header whose value cannot be sent.
        """
        own = self._current().get(tenant, {})
        used: list[str] = []

        def fill(match: re.Match[str]) -> str:
            name = match.group(1)
            secret = own.get(name)
            if secret is None:
                raise UnknownSecret(f"unknown secret {name!r} for tenant {tenant!r}")
            if host is not None and not secret.allows(host):
                raise UnknownSecret(f"the secret {name!r} is not for {host}")
            used.append(secret.value)
            return secret.value

        rendered = {name: REFERENCE.sub(fill, value) for name, value in (headers or {}).items()}
        for name, value in rendered.items():
            if problem := _value_problem(value):
                raise BadHeader(f"header {name!r}: the value {problem}")
        return RenderedHeaders(rendered, tuple(dict.fromkeys(used)))

    def _current(self) -> dict[str, dict[str, Secret]]:
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


def parse(data: bytes, *, where: str = "the tool secrets file") -> dict[str, dict[str, Secret]]:
    """``{tenant: {NAME: Secret}}`` from the TOML text; ``ValueError`` naming the problem.

    A secret is ``NAME = "value"`` (any host) or ``NAME = { value = "…", hosts = [...] }``.
    """
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
    out: dict[str, dict[str, Secret]] = {}
    unbound: list[str] = []
    for tenant, table in tenants.items():
        if not isinstance(table, dict):
            raise ValueError(f'{where}: [tenants.{tenant}] must be a table of NAME = "value"')
        out[tenant] = {}
        for name, entry in table.items():
            try:
                out[tenant][name] = _secret(name, entry)
            except ValueError as exc:
                raise ValueError(f"{where}: [tenants.{tenant}] {name}: {exc}") from None
            if out[tenant][name].hosts is None:
                unbound.append(f"{tenant}.{name}")
    if unbound:
        logger.warning(
            "%s: %d tool secret(s) may be sent to any host (%s); bind each to its hosts: "
            'NAME = { value = "...", hosts = ["api.example.com"] }',
            where,
            len(unbound),
            ", ".join(unbound[:5]) + (", ..." if len(unbound) > 5 else ""),
        )
    return out


def _secret(name: str, entry: object) -> Secret:
    """One entry of a tenant's table, or ``ValueError`` saying what is wrong (never a value)."""
    if not isinstance(entry, dict):
        if problem := _secret_problem(name, entry):
            raise ValueError(problem)
        assert isinstance(entry, str)
        return Secret(entry)
    unknown = set(entry) - {"value", "hosts"}
    if unknown:
        raise ValueError(f"unknown keys {sorted(unknown)}; a secret has value and hosts")
    value = entry.get("value")
    if problem := _secret_problem(name, value):
        raise ValueError(problem)
    assert isinstance(value, str)
    hosts = entry.get("hosts")
    if not isinstance(hosts, list) or not hosts or len(hosts) > MAX_HOSTS:
        raise ValueError(
            f"hosts must be a list of 1 to {MAX_HOSTS} host names (api.example.com or "
            "*.example.com)"
        )
    normal: list[str] = []
    for host in hosts:
        if not isinstance(host, str) or not _HOST_PATTERN.fullmatch(host.lower().rstrip(".")):
            raise ValueError(f"hosts: {str(host)[:80]!r} is not a host name or *.domain")
        normal.append(host.lower().rstrip("."))
    return Secret(value, tuple(normal))


def _secret_problem(name: str, value: object) -> str | None:
    if not _SECRET_NAME.fullmatch(name):
        return "a secret name is letters, digits and _ (at most 64, not starting with a digit)"
    if not isinstance(value, str) or not value:
        return "the value must be a non-empty string"
    if len(value) > MAX_SECRET_CHARS:
        return f"the value is longer than {MAX_SECRET_CHARS} characters"
    if problem := _value_problem(value):
        return f"the value {problem}"
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
    if problem := _value_problem(value):
        return f"header {name!r}: the value {problem}"
    return None


def _reference_problem(
    name: str, value: str, own: Mapping[str, Secret], host: str | None
) -> str | None:
    for reference in REFERENCE.finditer(value):
        secret = own.get(reference.group(1))
        if secret is None:
            return (
                f"header {name!r}: unknown secret {reference.group(1)!r} (the operator's "
                "tool secrets file has none of that name for this tenant)"
            )
        if host is not None and not secret.allows(host):
            return (
                f"header {name!r}: the secret {reference.group(1)!r} is not for {host} (the "
                "operator bound it to other hosts)"
            )
    if "{{" in REFERENCE.sub("", value):
        return f"header {name!r}: only {{{{secret:NAME}}}} may appear between double braces"
    return None


def _value_problem(value: str) -> str | None:
    """Why ``value`` cannot be a header value, or ``None``.

    A header is sent as ASCII: a line break or control (C0, DEL, and the C1 and Unicode
    line separators U+0085, U+2028, U+2029) would split or smuggle a header, and any other
    non-ASCII character cannot be encoded at all.
    """
    for c in value:
        code = ord(c)
        if (code < 0x20 and c != "\t") or code == 0x7F or 0x80 <= code <= 0x9F:
            return f"contains a line break or another control character (U+{code:04X})"
        if code in (0x2028, 0x2029):
            return f"contains a Unicode line or paragraph separator (U+{code:04X})"
        if code > 0x7F:
            return f"contains a non-ASCII character (U+{code:04X}); header values are ASCII"
    return None


def _stamp(path: Path) -> tuple[int, int] | None:
    try:
        stat = path.stat()
    except OSError:
        return None
    return stat.st_mtime_ns, stat.st_size
