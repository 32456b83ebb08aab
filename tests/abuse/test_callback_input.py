"""Hostile callbacks at submit: every one a 422 naming the field, nothing
queued. A callback URL is held to the outbound guard exactly as an HTTP tool's is."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from tests.service import KEYS, StartApi, api_keys, assert_problem, client


def job(callback: Any) -> dict[str, Any]:
    return {"task": "Say hi", "signature": "{greeting :string}", "callback": callback}


@pytest.fixture
def alice(start_api: StartApi) -> Iterator[httpx.Client]:
    """An API (no worker: jobs stay queued) whose guard allows nothing private."""
    with client(start_api(api_keys=api_keys()), KEYS["alice"]) as http:
        yield http


def refused(http: httpx.Client, callback: Any, field: str) -> dict[str, Any]:
    response = http.post("/v1/jobs", json=job(callback))
    body = assert_problem(response, 422, "invalid-input", field)
    assert http.get("/v1/jobs").json()["jobs"] == []  # nothing was queued
    return body


@pytest.mark.parametrize(
    "url",
    [
        "http://10.0.0.1/hook",
        "https://192.168.1.1/hook",
        "https://169.254.169.254/latest/meta-data",
        "https://[::ffff:10.0.0.1]/hook",
        "https://[::1]/hook",
        "https://127.0.0.1:8080/hook",
        "https://127.1/hook",
        "https://2130706433/hook",
        "https://0x7f.0.0.1/hook",
        "https://100.100.100.200/hook",
        "https://localhost/hook",
        "https://api.localhost/hook",
        "https://metadata.google.internal/computeMetadata/v1/",
        "http://hooks.example.com/plain-http",
        "https://user:pw@hooks.example.com/hook",
        "ftp://hooks.example.com/hook",
        "file:///etc/passwd",
        "https:///no-host",
        "https://hooks.example.com:99999/hook",
        "https://hooks.example.com/a b",
        "not a url",
        "",
    ],
)
def test_callback_urls_into_private_networks_or_malformed_are_refused(
    alice: httpx.Client, url: str
) -> None:
    body = refused(alice, {"url": url}, "callback.url")
    assert [e["field"] for e in body["errors"]] == ["callback.url"]


def test_an_overlong_callback_url_is_refused(alice: httpx.Client) -> None:
    refused(alice, {"url": "https://hooks.example.com/" + "a" * 2100}, "callback.url")


@pytest.mark.parametrize(
    ("callback", "field"),
    [
        ({"url": "https://hooks.example.com/h", "events": ["finished"]}, "callback.events.0"),
        ({"url": "https://hooks.example.com/h", "events": []}, "callback.events"),
        ({"url": "https://hooks.example.com/h", "events": ["failed", "failed"]}, "callback.events"),
        (
            {"url": "https://hooks.example.com/h", "events": ["succeeded"] * 5},
            "callback.events",
        ),
        ({"url": "https://hooks.example.com/h", "events": "succeeded"}, "callback.events"),
        ({"url": "https://hooks.example.com/h", "events": [1]}, "callback.events.0"),
        ({"url": "https://hooks.example.com/h", "headers": {"x": "y"}}, "callback.headers"),
        ({"url": 42}, "callback.url"),
        ({"events": ["failed"]}, "callback.url"),
        ("https://hooks.example.com/h", "callback"),
    ],
)
def test_malformed_callbacks_are_refused_naming_the_field(
    alice: httpx.Client, callback: Any, field: str
) -> None:
    refused(alice, callback, field)


def test_a_public_https_callback_is_accepted_with_the_terminal_events_by_default(
    alice: httpx.Client,
) -> None:
    response = alice.post("/v1/jobs", json=job({"url": "https://hooks.example.com/done"}))
    assert response.status_code == 202, response.text
    assert response.json()["callback"] == {
        "url": "https://hooks.example.com/done",
        "events": ["succeeded", "failed", "cancelled"],
        "deliveries": [],
    }
