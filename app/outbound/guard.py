"""The outbound guard: which URLs a tenant may make the service call, and where they go.

Every outbound request a tenant can aim (an HTTP tool, a webhook validator, a completion
callback) passes two checks, and the connection then goes to the address that was checked:

    guard = Guard(OutboundPolicy(allow=Allowlist.parse(["127.0.0.1/32"])))
    guard.check_url("http://10.0.0.1/hook")     # "http://… : 10.0.0.1 is a private address…"
    target = guard.target("https://tools.example.com/lookup")   # static checks, or raise
    addresses = await guard.resolve(target.host, target.port)   # DNS once, every address
                                                                # checked, or raise

``check_url`` is what the API runs at submit time (no DNS: an answer in microseconds);
``resolve`` runs at call time. Refused: loopback, private, link-local (cloud metadata),
multicast, CGNAT, unspecified, reserved and broadcast ranges, in v4 and v6, including v4
addresses carried inside v6 (mapped ``::ffff:127.0.0.1``, translated
``::ffff:0:127.0.0.1``, NAT64 ``64:ff9b::/96``, 6to4 ``2002::/16``), and metadata host
names, unless the operator allowlists the host name or a network
(``REPROMPT_OUTBOUND_ALLOW``). Plain ``http`` is allowed only for allowlisted hosts.
"""

from __future__ import annotations

import asyncio
import ipaddress
import logging
import re
import socket
from collections.abc import Awaitable, Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Final

import httpx
import idna

from app.outbound.errors import OutboundFailed, OutboundRefused

logger = logging.getLogger(__name__)

IPAddress = ipaddress.IPv4Address | ipaddress.IPv6Address
IPNetwork = ipaddress.IPv4Network | ipaddress.IPv6Network
# (host, port) -> the addresses it resolves to, as getaddrinfo spells them.
Resolver = Callable[[str, int], Awaitable[Sequence[str]]]

MAX_URL_CHARS: Final = 2048
DEFAULT_TIMEOUT_S: Final = 10.0
DEFAULT_MAX_RESPONSE_BYTES: Final = 1 << 20
# A webhook validator posts the job's input (up to ~1 MiB) and the answer.
DEFAULT_MAX_REQUEST_BYTES: Final = 4 << 20
DEFAULT_RETRIES: Final = 2
# DNS gets this much of a call's time at most: a resolver that hangs is a dead resolver.
RESOLVE_TIMEOUT_S: Final = 5.0
ALLOW_SETTING: Final = "REPROMPT_OUTBOUND_ALLOW"


def _networks(*entries: tuple[str, str]) -> tuple[tuple[IPNetwork, str], ...]:
    return tuple((ipaddress.ip_network(cidr), why) for cidr, why in entries)


# Most specific first: the first match names the refusal.
REFUSED_NETWORKS: Final = _networks(
    ("0.0.0.0/8", "an unspecified ('this network') address"),
    ("127.0.0.0/8", "a loopback address"),
    ("10.0.0.0/8", "a private address"),
    ("172.16.0.0/12", "a private address"),
    ("192.168.0.0/16", "a private address"),
    ("169.254.0.0/16", "a link-local address (where cloud metadata services live)"),
    ("100.64.0.0/10", "a carrier-grade NAT (shared) address"),
    ("192.0.0.0/24", "a reserved (IETF protocol assignment) address"),
    ("192.0.2.0/24", "a reserved (documentation) address"),
    ("198.51.100.0/24", "a reserved (documentation) address"),
    ("203.0.113.0/24", "a reserved (documentation) address"),
    ("198.18.0.0/15", "a reserved (benchmarking) address"),
    ("192.88.99.0/24", "a reserved (6to4 relay) address"),
    ("224.0.0.0/4", "a multicast address"),
    ("255.255.255.255/32", "the broadcast address"),
    ("240.0.0.0/4", "a reserved address"),
    ("::/128", "the unspecified address"),
    ("::1/128", "a loopback address"),
    ("::/96", "an IPv4-compatible address (deprecated)"),
    ("64:ff9b:1::/48", "a local-use NAT64 address"),
    ("100::/64", "a discard-only address"),
    # Ranges Python 3.11's ipaddress still calls global though IANA says they are not
    # globally reachable (RFC 9780 dummy prefix, RFC 9602 SRv6 segment identifiers).
    ("100:0:0:1::/64", "a reserved (dummy) address"),
    ("5f00::/16", "a reserved (SRv6 segment identifier) address"),
    ("2001::/32", "a Teredo tunnel address"),
    ("2001::/23", "a reserved (IETF protocol assignment) address"),
    ("2001:db8::/32", "a reserved (documentation) address"),
    ("3fff::/20", "a reserved (documentation) address"),
    ("fc00::/7", "a private (unique local) address"),
    ("fe80::/10", "a link-local address"),
    ("fec0::/10", "a site-local address (deprecated)"),
    ("ff00::/8", "a multicast address"),
)
_NAT64: Final = ipaddress.ip_network("64:ff9b::/96")
# IPv4-translated (SIIT, RFC 2765): ::ffff:0:a.b.c.d. ipaddress calls it global, and a
# translator on the path reaches the IPv4 address it carries.
_TRANSLATED: Final = ipaddress.ip_network("::ffff:0:0:0/96")
# Names that reach a cloud provider's instance metadata without any address check helping
# (some resolve only inside the cloud, some are served by the local resolver).
METADATA_HOSTS: Final = frozenset(
    {
        "metadata",
        "metadata.google.internal",
        "metadata.goog",
        "metadata.azure.com",
        "instance-data",
        "instance-data.ec2.internal",
        "metadata.tencentyun.com",
        "metadata.platformequinix.com",
    }
)
# inet_aton's legacy spellings ("127.1", "0x7f.0.0.1", "2130706433"): getaddrinfo reads
# them as addresses, so the static check must too.
_LEGACY_V4: Final = re.compile(r"[0-9a-fx.]+", re.IGNORECASE)
_LABEL: Final = re.compile(r"[a-z0-9_](?:[a-z0-9_-]*[a-z0-9_])?")


@dataclass(frozen=True, slots=True)
class Allowlist:
    """Private or loopback hosts and networks the operator lets tenants reach.

    The only hosts plain ``http`` may go to. Empty by default.
    """

    hosts: frozenset[str] = frozenset()
    networks: tuple[IPNetwork, ...] = ()

    @classmethod
    def parse(cls, entries: Iterable[str]) -> Allowlist:
        """From ``REPROMPT_OUTBOUND_ALLOW`` entries; a bad one is a ``ValueError`` naming it."""
        hosts: set[str] = set()
        networks: list[IPNetwork] = []
        for raw in entries:
            entry = raw.strip()
            if not entry:
                continue
            if network := _network(entry):
                networks.append(network)
            elif is_hostname(entry) and _ip(entry) is None and not _dotted(entry):
                hosts.add(_normal_host(entry))
            else:
                raise ValueError(
                    f"{ALLOW_SETTING}: {entry!r} is neither a host name nor an address or "
                    "CIDR network (like 10.1.2.0/24 or fd00::/8)"
                )
        return cls(frozenset(hosts), tuple(networks))

    def allows_host(self, host: str) -> bool:
        return _normal_host(host) in self.hosts

    def allows_address(self, ip: IPAddress) -> bool:
        inner = embedded_v4(ip) if isinstance(ip, ipaddress.IPv6Address) else None
        return any(ip in net or (inner is not None and inner in net) for net in self.networks)


def is_hostname(name: str) -> bool:
    """Whether ``name`` is a DNS host name (ASCII labels of letters, digits, ``-``, ``_``)."""
    labels = name.lower().removesuffix(".").split(".")
    return len(name) <= 253 and all(len(x) <= 63 and _LABEL.fullmatch(x) for x in labels)


def _dotted(name: str) -> bool:
    """Only digits and dots: a mistyped address, not a name."""
    return name.replace(".", "").isdigit()


def _network(entry: str) -> IPNetwork | None:
    try:
        return ipaddress.ip_network(entry, strict=False)
    except ValueError:
        return None


@dataclass(frozen=True, slots=True)
class OutboundPolicy:
    """What the operator allows: built once from the settings by the assembly."""

    allow: Allowlist = field(default_factory=Allowlist)
    timeout_s: float = DEFAULT_TIMEOUT_S
    max_response_bytes: int = DEFAULT_MAX_RESPONSE_BYTES
    max_request_bytes: int = DEFAULT_MAX_REQUEST_BYTES
    retries: int = DEFAULT_RETRIES


@dataclass(frozen=True, slots=True)
class Target:
    """A URL that passed the static checks.

    ``host`` is ASCII (IDNA), lower case, without brackets; ``port`` is explicit;
    ``address`` is set when the host is an IP literal.
    """

    url: httpx.URL
    host: str
    port: int
    address: IPAddress | None

    @property
    def https(self) -> bool:
        return self.url.scheme == "https"

    @property
    def host_header(self) -> str:
        """What the ``Host`` header says: the host as written, the port if not the default."""
        return self.url.netloc.decode("ascii")


async def system_resolver(host: str, port: int) -> Sequence[str]:
    """The addresses ``host`` has, as the system resolver (``getaddrinfo``) says."""
    loop = asyncio.get_running_loop()
    infos = await loop.getaddrinfo(host, port, type=socket.SOCK_STREAM, proto=socket.IPPROTO_TCP)
    return [str(info[4][0]) for info in infos]


class Guard:
    """The policy applied: static URL checks and resolution with every address checked.

    ``resolver`` is only for tests (a host name that resolves where the test says); the
    service uses ``getaddrinfo``.
    """

    def __init__(self, policy: OutboundPolicy, *, resolver: Resolver = system_resolver) -> None:
        self.policy = policy
        self._resolve = resolver

    def check_url(self, url: str) -> str | None:
        """Why ``url`` may not be called, or ``None``. No DNS: safe in a request handler."""
        try:
            self.target(url)
        except OutboundRefused as refused:
            return refused.detail
        return None

    def host_of(self, url: str) -> str | None:
        """The host ``url`` names (as ``Target.host``), or ``None`` when it does not parse."""
        target = _parse(url)[1]
        return None if target is None else target.host

    def target(self, url: str) -> Target:
        """``url`` parsed and statically checked, or ``OutboundRefused`` saying why."""
        problem, target = _parse(url)
        if target is None:
            raise OutboundRefused(problem)
        allow = self.policy.allow
        allowed = allow.allows_host(target.host)
        if target.address is not None:
            allowed = allowed or allow.allows_address(target.address)
            why = None if allowed else refusal(target.address)
            if why:
                raise OutboundRefused(f"{target.host} is {why}{_HINT}")
        elif not allowed and (what := _special_name(target.host)):
            raise OutboundRefused(f"{target.host} names {what}{_HINT}")
        if not target.https and not allowed:
            raise OutboundRefused(
                f"plain http to {target.host} is refused: use https (http is allowed only "
                f"for hosts on {ALLOW_SETTING})"
            )
        return target

    async def resolve(
        self, host: str, port: int, *, timeout_s: float = RESOLVE_TIMEOUT_S
    ) -> tuple[IPAddress, ...]:
        """Every address ``host`` resolves to, each checked; connect to one of these.

        Resolved once, never again (DNS rebinding). ``OutboundRefused`` when any address is
        refused (a name that mixes public and private addresses is refused whole);
        ``OutboundFailed`` when the name does not resolve in time.
        """
        literal = _ip(host)
        if literal is not None:
            addresses: tuple[IPAddress, ...] = (literal,)
        else:
            addresses = await self._lookup(host, port, min(timeout_s, RESOLVE_TIMEOUT_S))
        if self.policy.allow.allows_host(host):
            return addresses
        for address in addresses:
            why = None if self.policy.allow.allows_address(address) else refusal(address)
            if why:
                # The address is for the operator's log; what the tenant reads names
                # only the host it gave.
                logger.info("outbound: refused %s, which resolves to %s (%s)", host, address, why)
                raise OutboundRefused(f"{host} resolves to {why}{_HINT}")
        return addresses

    async def _lookup(self, host: str, port: int, timeout_s: float) -> tuple[IPAddress, ...]:
        try:
            async with asyncio.timeout(max(timeout_s, 0.001)):
                found = await self._resolve(host, port)
        except TimeoutError:
            raise OutboundFailed(
                f"resolving {host} took longer than {timeout_s:.3g}s",
                reason="timeout",
                retryable=True,
                host=host,
            ) from None
        except OSError as exc:  # socket.gaierror: no such name, no address, resolver down
            raise OutboundFailed(
                f"{host} does not resolve ({exc.strerror or type(exc).__name__})",
                reason="unavailable",
                retryable=False,
                host=host,
            ) from None
        # _ip unmaps ::ffff:a.b.c.d, so a dual-stack answer's two spellings become one.
        addresses = tuple(dict.fromkeys(a for a in map(_ip, found) if a is not None))
        if not addresses:
            raise OutboundFailed(
                f"{host} resolves to no address", reason="unavailable", retryable=False, host=host
            )
        return addresses


_HINT: Final = f" (refused unless the operator allows it on {ALLOW_SETTING})"


def refusal(ip: IPAddress) -> str | None:
    """Why a connection to ``ip`` is refused, or ``None`` for a public address."""
    if isinstance(ip, ipaddress.IPv6Address):
        if ip.scope_id:
            return "an address with a zone (link-local)"
        inner = embedded_v4(ip)
        if inner is not None:
            why = refusal(inner)
            return f"{why}, carried inside an IPv6 address" if why else None
    for network, why in REFUSED_NETWORKS:
        if ip.version == network.version and ip in network:
            return why
    if not ip.is_global:
        return "an address that is not globally routable"
    return None


def embedded_v4(ip: ipaddress.IPv6Address) -> ipaddress.IPv4Address | None:
    """The IPv4 address an IPv6 one carries and reaches, if any.

    Mapped (``::ffff:a.b.c.d``), translated (``::ffff:0:a.b.c.d``), NAT64
    (``64:ff9b::/96``) or 6to4 (``2002::/16``).
    """
    if ip.ipv4_mapped is not None:
        return ip.ipv4_mapped
    if ip in _NAT64 or ip in _TRANSLATED:
        return ipaddress.IPv4Address(int(ip) & 0xFFFFFFFF)
    return ip.sixtofour


def _parse(url: str) -> tuple[str, Target | None]:
    """``("", target)`` or ``(problem, None)``: the checks that need no policy."""
    if len(url) > MAX_URL_CHARS:
        return f"the URL is longer than {MAX_URL_CHARS} characters", None
    if any(c.isspace() or ord(c) < 0x20 or ord(c) == 0x7F for c in url):
        return "the URL contains whitespace or control characters", None
    try:
        parsed = httpx.URL(url)
        host = parsed.raw_host.decode("ascii").lower()
    except (httpx.InvalidURL, UnicodeError, TypeError) as exc:
        return f"not a valid URL ({exc})", None
    if parsed.scheme not in ("https", "http"):
        return f"scheme {parsed.scheme or 'none'!r} is not allowed: use https", None
    if not host:
        return "the URL has no host", None
    if parsed.userinfo:
        return (
            "credentials in the URL (user:password@) are not allowed; send them in a "
            "header with {{secret:NAME}}"
        ), None
    port = parsed.port if parsed.port is not None else (443 if parsed.scheme == "https" else 80)
    if not 1 <= port <= 65535:
        return f"port {port} is out of range", None
    host = host.rstrip(".")
    address = _ip(host)
    if address is None and not is_hostname(host):
        return f"{host!r} is not a valid host name", None
    if address is None and (bad := _bad_idna(host)):
        return f"{host!r} is not a valid internationalised host name ({bad})", None
    return "", Target(parsed, host, port, address)


def _bad_idna(host: str) -> str | None:
    """What is wrong with the host's punycode labels (``xn--…``), if anything."""
    for label in host.split("."):
        if label.startswith("xn--"):
            try:
                idna.decode(label)
            except idna.IDNAError as exc:
                return str(exc)
    return None


def _ip(host: str) -> IPAddress | None:
    """``host`` as an address: a literal (brackets and zone allowed) or a legacy spelling."""
    name = host.removeprefix("[").removesuffix("]")
    try:
        return _unmapped(ipaddress.ip_address(name))
    except ValueError:
        pass
    if _LEGACY_V4.fullmatch(name) and any(c.isdigit() for c in name):
        try:
            return ipaddress.IPv4Address(socket.inet_aton(name))
        except OSError:
            return None
    return None


def _unmapped(ip: IPAddress) -> IPAddress:
    """``::ffff:a.b.c.d`` as ``a.b.c.d``: what a dual-stack socket would reach."""
    if isinstance(ip, ipaddress.IPv6Address) and ip.ipv4_mapped is not None:
        return ip.ipv4_mapped
    return ip


def _normal_host(host: str) -> str:
    return host.strip().removeprefix("[").removesuffix("]").rstrip(".").lower()


def _special_name(host: str) -> str | None:
    """What ``localhost`` and its subdomains (RFC 6761) and the metadata names reach."""
    if host == "localhost" or host.endswith(".localhost"):
        return "this machine"
    return "a cloud metadata service" if host in METADATA_HOSTS else None
