"""Outbound URLs and headers a hostile tenant writes to slip past the submit checks (#29):
each a 422 naming the field, nothing queued."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from tests.service import KEYS, StartApi, api_keys, assert_problem, client

PARAMS: dict[str, Any] = {"type": "object", "properties": {"q": {"type": "string"}}}


@pytest.fixture
def alice(start_api: StartApi) -> Iterator[httpx.Client]:
    """An API (no worker: jobs stay queued) whose guard allows nothing private."""
    with client(start_api(api_keys=api_keys()), KEYS["alice"]) as http:
        yield http


def job(**extra: Any) -> dict[str, Any]:
    return {"task": "Say hi", "signature": "{greeting :string}", **extra}


def tool(url: str, **more: Any) -> dict[str, Any]:
    return {"name": "look", "url": url, "parameters": PARAMS, **more}


def refused(http: httpx.Client, body: dict[str, Any], field: str) -> dict[str, Any]:
    response = http.post("/v1/jobs", json=body)
    problem = assert_problem(response, 422, "invalid-input", field)
    assert http.get("/v1/jobs").json()["jobs"] == []  # nothing was queued
    return problem


# IPv4-translated IPv6 (SIIT, ::ffff:0:0:0/96): Python's ipaddress calls it global.
TRANSLATED = [
    "https://[::ffff:0:7f00:1]/",  # 127.0.0.1
    "https://[::ffff:0:a9fe:a9fe]/latest/meta-data",  # 169.254.169.254
    "https://[::ffff:0:10.0.0.1]/",
    "https://[0:0:0:0:ffff:0:c0a8:101]/",  # 192.168.1.1
]


@pytest.mark.parametrize("url", TRANSLATED)
def test_ipv4_translated_ipv6_is_refused_in_tool_validator_and_callback_urls(
    alice: httpx.Client, url: str
) -> None:
    refused(alice, job(tools=[tool(url)]), "tools[0].url")
    refused(alice, job(validators=[{"kind": "webhook", "url": url}]), "validators[0].url")
    refused(alice, job(callback={"url": url}), "callback.url")


@pytest.mark.parametrize(
    "url", ["https://[5f00::1]/", "https://[100:0:0:1::1]/"]
)  # SRv6 SIDs, the dummy prefix: not global, though ipaddress (3.11) says so
def test_special_v6_ranges_ipaddress_calls_global_are_refused(
    alice: httpx.Client, url: str
) -> None:
    refused(alice, job(callback={"url": url}), "callback.url")


@pytest.mark.parametrize(
    "value",
    [
        "Bearer a\u2028b",  # line separator
        "Bearer a\u2029b",  # paragraph separator
        "Bearer a\u0085b",  # NEL
        "Bearer a\u009bb",  # C1 CSI
        "Bearer caf\u00e9",  # plain non-ASCII: a header is sent as ASCII
        "x\u200bx",  # zero-width space
    ],
)
def test_header_values_with_unicode_controls_or_non_ascii_are_refused(
    alice: httpx.Client, value: str
) -> None:
    body = job(tools=[tool("https://tools.example.com/look", headers={"X-Token": value})])
    problem = refused(alice, body, "tools[0].headers")
    assert "X-Token" in problem["detail"]
