"""The guard: which URLs are refused before any DNS, and which resolutions after it."""

from __future__ import annotations

import ipaddress

import pytest

from app.outbound.errors import OutboundFailed, OutboundRefused
from app.outbound.guard import (
    MAX_URL_CHARS,
    Allowlist,
    Guard,
    OutboundPolicy,
    refusal,
)
from tests.outbound.conftest import LOOPBACK, Resolutions
from tests.waiting import forever

STRICT = Guard(OutboundPolicy())


@pytest.mark.parametrize(
    ("url", "why"),
    [
        ("https://127.0.0.1/", "loopback"),
        ("https://127.0.0.1:8443/hook", "loopback"),
        ("https://10.0.0.1/", "private"),
        ("https://172.16.5.4/", "private"),
        ("https://192.168.1.1/", "private"),
        ("https://169.254.169.254/latest/meta-data/", "link-local"),
        ("https://[::ffff:127.0.0.1]/", "loopback"),
        ("https://[::ffff:169.254.169.254]/", "link-local"),
        ("https://[::ffff:7f00:1]/", "loopback"),
        ("https://[::1]/", "loopback"),
        ("https://[::]/", "unspecified"),
        ("https://0.0.0.0/", "unspecified"),
        ("https://0.1.2.3/", "unspecified"),
        ("https://100.64.0.1/", "carrier-grade NAT"),
        ("https://100.100.100.200/", "carrier-grade NAT"),  # Alibaba Cloud's metadata
        ("https://224.0.0.1/", "multicast"),
        ("https://[ff02::1]/", "multicast"),
        ("https://255.255.255.255/", "broadcast"),
        ("https://240.0.0.1/", "reserved"),
        ("https://198.18.0.1/", "benchmarking"),
        ("https://192.0.2.7/", "documentation"),
        ("https://[fe80::1]/", "link-local"),
        ("https://[fc00::1]/", "unique local"),
        ("https://[fd00:ec2::254]/", "unique local"),  # AWS's IPv6 metadata
        ("https://[2001:db8::1]/", "documentation"),
        ("https://[::127.0.0.1]/", "IPv4-compatible"),
        ("https://[64:ff9b::a00:1]/", "private address, carried inside an IPv6"),  # NAT64
        ("https://[64:ff9b::7f00:1]/", "loopback address, carried inside an IPv6"),
        ("https://[2002:a9fe:a9fe::]/", "link-local address (where cloud metadata"),  # 6to4
        ("https://[2001:0:4136:e378:8000:63bf:3fff:fdd2]/", "Teredo"),
        # IPv4-translated (SIIT): ipaddress calls these global.
        ("https://[::ffff:0:7f00:1]/", "loopback address, carried inside an IPv6"),
        ("https://[::ffff:0:a9fe:a9fe]/", "link-local address (where cloud metadata"),
        ("https://[0:0:0:0:ffff:0:10.0.0.1]/", "private address, carried inside an IPv6"),
        ("https://[5f00::1]/", "SRv6"),
        ("https://[100:0:0:1::1]/", "dummy"),
        # Spellings getaddrinfo reads as addresses.
        ("https://2130706433/", "loopback"),
        ("https://127.1/", "loopback"),
        ("https://0x7f.0.0.1/", "loopback"),
        ("https://0xa.0.0.1/", "private"),
        ("https://167772161/", "private"),
        ("https://10.1/", "private"),
        # Names.
        ("https://localhost/", "this machine"),
        ("https://LOCALHOST./", "this machine"),
        ("https://api.localhost/", "this machine"),
        ("https://metadata.google.internal/computeMetadata/v1/", "cloud metadata"),
        ("https://metadata.google.internal./", "cloud metadata"),
        ("https://instance-data/", "cloud metadata"),
    ],
)
def test_addresses_and_names_that_reach_inside_are_refused_before_any_dns(
    url: str, why: str
) -> None:
    problem = STRICT.check_url(url)
    assert problem is not None, url
    assert why in problem
    assert "REPROMPT_OUTBOUND_ALLOW" in problem


@pytest.mark.parametrize(
    ("url", "why"),
    [
        ("http://example.com/hook", "plain http"),
        ("http://8.8.8.8/", "plain http"),
        ("ftp://example.com/", "scheme 'ftp'"),
        ("file:///etc/passwd", "scheme 'file'"),
        ("gopher://example.com/", "scheme 'gopher'"),
        ("//example.com/", "scheme"),
        ("https:///path", "no host"),
        ("https://user:pw@example.com/", "credentials"),
        ("https://user@example.com/", "credentials"),
        ("https://example.com:0/", "port 0"),
        ("https://example.com:70000/", "port 70000"),
        ("https://exa mple.com/", "whitespace"),
        ("https://example.com/\r\nX-Injected: 1", "control"),
        ("https://a%20b/", "not a valid host name"),
        ("https://xn--a.com/", "internationalised"),
        ("https://\u2488.com/", "not a valid URL"),
        ("https://" + "a" * MAX_URL_CHARS + ".com/", "longer than 2048"),
        ("https://[fe80::1%25eth0]/", "zone"),
    ],
)
def test_malformed_or_unsafe_urls_are_refused_with_the_reason(url: str, why: str) -> None:
    problem = STRICT.check_url(url)
    assert problem is not None, url
    assert why in problem


@pytest.mark.parametrize(
    "url",
    [
        "https://example.com/hook",
        "https://tools.example.com:8443/v1/lookup?x=1",
        "https://8.8.8.8/",
        "https://[2606:4700:4700::1111]/",
        "https://[::ffff:8.8.8.8]/",
        "https://[64:ff9b::808:808]/",  # NAT64 of a public address: an IPv6-only network
        "https://bücher.example/",
        "https://xn--bcher-kva.example/",
        "https://EXAMPLE.com./",
    ],
)
def test_public_https_urls_pass_the_static_checks(url: str) -> None:
    assert STRICT.check_url(url) is None


def test_targets_carry_the_idna_host_the_port_and_the_host_header() -> None:
    target = STRICT.target("https://Bücher.example:8443/x")
    assert (target.host, target.port, target.address) == ("xn--bcher-kva.example", 8443, None)
    assert target.host_header == "xn--bcher-kva.example:8443"
    literal = STRICT.target("https://[::ffff:8.8.8.8]/")
    assert literal.address == ipaddress.ip_address("8.8.8.8")
    assert literal.port == 443


def test_the_allowlist_opens_loopback_and_plain_http_for_its_entries_only() -> None:
    guard = Guard(OutboundPolicy(allow=LOOPBACK))
    assert guard.check_url("http://127.0.0.1:8080/hook") is None
    assert guard.check_url("http://[::ffff:127.0.0.1]:8080/hook") is None
    assert "loopback" in (guard.check_url("http://127.0.0.2:8080/") or "")
    assert "plain http" in (guard.check_url("http://example.com/") or "")
    assert "this machine" in (guard.check_url("http://localhost:8080/") or "")

    named = Guard(OutboundPolicy(allow=Allowlist.parse(["validator.internal", "localhost"])))
    assert named.check_url("http://validator.internal:9000/check") is None
    assert named.check_url("http://VALIDATOR.internal./check") is None
    assert named.check_url("http://localhost:8080/") is None
    assert "plain http" in (named.check_url("http://other.internal/") or "")


@pytest.mark.parametrize(
    "entry", ["10.0.0.0/33", "10.0.0.999", "not a host", "*.example.com", "a..b"]
)
def test_a_bad_allowlist_entry_is_an_error_naming_it(entry: str) -> None:
    with pytest.raises(ValueError, match="REPROMPT_OUTBOUND_ALLOW") as info:
        Allowlist.parse(["10.0.0.0/8", entry])
    assert repr(entry) in str(info.value)


def test_allowlist_entries_parse_as_networks_and_names() -> None:
    allow = Allowlist.parse([" 10.1.2.0/24", "fd00::/8 ", "127.0.0.1", "Hooks.Internal.", ""])
    assert allow.hosts == frozenset({"hooks.internal"})
    assert [str(n) for n in allow.networks] == ["10.1.2.0/24", "fd00::/8", "127.0.0.1/32"]


@pytest.mark.parametrize(
    "address",
    ["8.8.8.8", "1.1.1.1", "2606:4700:4700::1111", "64:ff9b::808:808", "2002:808:808::1"],
)
def test_public_addresses_are_not_refused(address: str) -> None:
    assert refusal(ipaddress.ip_address(address)) is None


# -- resolution -------------------------------------------------------------------------


async def test_a_name_that_resolves_to_a_private_address_is_refused_without_naming_it() -> None:
    resolver = Resolutions(intranet_example_com=[["10.20.30.40"]])
    guard = Guard(OutboundPolicy(), resolver=resolver)
    target = guard.target("https://intranet.example.com/hook")  # the static checks pass
    with pytest.raises(
        OutboundRefused, match=r"intranet\.example\.com resolves to a private"
    ) as info:
        await guard.resolve(target.host, target.port)
    assert "10.20.30.40" not in info.value.detail


@pytest.mark.parametrize(
    ("answer", "why"),
    [
        (["93.184.215.14", "10.0.0.1"], "private"),  # one bad address spoils the name
        (["::ffff:127.0.0.1"], "loopback"),
        (["169.254.169.254"], "link-local"),
        (["2606:4700::1", "fd12::1"], "unique local"),
        (["64:ff9b::a9fe:a9fe"], "link-local"),
        (["::ffff:0:7f00:1"], "loopback"),
    ],
)
async def test_every_resolved_address_is_checked(answer: list[str], why: str) -> None:
    guard = Guard(OutboundPolicy(), resolver=Resolutions(mixed_example=[answer]))
    with pytest.raises(OutboundRefused, match=why):
        await guard.resolve("mixed.example", 443)


async def test_the_real_resolver_refuses_localhost() -> None:
    guard = Guard(OutboundPolicy())
    with pytest.raises(OutboundRefused, match="localhost resolves to a loopback address"):
        await guard.resolve("localhost", 443)


async def test_allowlisted_names_and_networks_may_resolve_inside() -> None:
    resolver = Resolutions(
        hooks_internal=[["10.9.9.9"]], db_example=[["10.1.2.3"]], cache_example=[["10.1.3.1"]]
    )
    allow = Allowlist.parse(["hooks.internal", "10.1.2.0/24"])
    guard = Guard(OutboundPolicy(allow=allow), resolver=resolver)
    assert await guard.resolve("hooks.internal", 80) == (ipaddress.ip_address("10.9.9.9"),)
    assert await guard.resolve("db.example", 443) == (ipaddress.ip_address("10.1.2.3"),)
    with pytest.raises(OutboundRefused):
        await guard.resolve("cache.example", 443)


async def test_mapped_answers_are_unmapped_and_duplicates_dropped() -> None:
    resolver = Resolutions(dual_example=[["::ffff:8.8.8.8", "8.8.8.8", "2606:4700::1"]])
    guard = Guard(OutboundPolicy(), resolver=resolver)
    addresses = await guard.resolve("dual.example", 443)
    assert [str(a) for a in addresses] == ["8.8.8.8", "2606:4700::1"]


async def test_a_name_that_does_not_resolve_fails_without_retry() -> None:
    guard = Guard(OutboundPolicy(), resolver=Resolutions())
    with pytest.raises(OutboundFailed) as info:
        await guard.resolve("nowhere.example", 443)
    assert (info.value.reason, info.value.retryable) == ("unavailable", False)


async def test_a_resolver_that_hangs_is_a_timeout_within_the_time_given() -> None:
    async def hang(host: str, port: int) -> list[str]:
        await forever()
        return []

    guard = Guard(OutboundPolicy(), resolver=hang)
    with pytest.raises(OutboundFailed) as info:  # the resolver never answers: ended by 0.2 s
        await guard.resolve("slow.example", 443, timeout_s=0.2)
    assert info.value.reason == "timeout"
