"""Hostile batch submissions (#30): every new field bounded, a 4xx naming it."""

from __future__ import annotations

import json
from typing import Any

import httpx
import pytest

from tests.batches.helpers import batch_body
from tests.service import KEYS, assert_problem, client

NDJSON = {"content-type": "application/x-ndjson"}


def _ndjson(body: dict[str, Any]) -> bytes:
    options = {k: v for k, v in body.items() if k != "items"}
    lines = [json.dumps(options), *(json.dumps(item) for item in body["items"])]
    return "\n".join(lines).encode()


@pytest.mark.parametrize(
    "custom_id",
    ["", "a b", "../../etc", "x" * 65, "naïve", "a\nb", "<script>"],
)
def test_a_custom_id_outside_its_charset_or_length_is_refused(
    batch_alice: httpx.Client, custom_id: str
) -> None:
    body = batch_body(2, model="oa")
    body["items"][1]["customId"] = custom_id
    assert_problem(
        batch_alice.post("/v1/batches", json=body), 422, "invalid-input", "items.1.customId"
    )


def test_a_custom_id_given_twice_is_refused_and_nothing_is_kept(batch_alice: httpx.Client) -> None:
    body = batch_body(3, model="oa")
    body["items"][2]["customId"] = body["items"][0]["customId"]
    response = batch_alice.post("/v1/batches", json=body)
    assert_problem(response, 422, "invalid-input", "items.2.customId")


def test_more_items_than_the_cap_are_refused(batch_alice: httpx.Client) -> None:
    body = batch_body(1001, model="oa")  # REPROMPT_BATCH_MAX_ITEMS is 1000 here
    assert_problem(batch_alice.post("/v1/batches", json=body), 422, "invalid-input", "items")
    response = batch_alice.post("/v1/batches", content=_ndjson(body), headers=NDJSON)
    assert_problem(response, 422, "invalid-input", "items")


def test_a_body_over_the_byte_cap_is_refused(batch_alice: httpx.Client, batch_api: str) -> None:
    body = batch_body(1, model="oa")
    body["items"] = [
        {"customId": f"big-{i}", "input": {"text": "x" * 10_000}} for i in range(250)
    ]  # 2.5 MB: REPROMPT_BATCH_MAX_BYTES is 2 MB here
    assert_problem(batch_alice.post("/v1/batches", json=body), 413, "content-too-large")
    # Streamed without a length (the rate share counts declared bodies): cut at the cap.
    chunks = iter([line + b"\n" for line in _ndjson(body).split(b"\n")])
    with client(batch_api, KEYS["bob"]) as bob:
        response = bob.post("/v1/batches", content=chunks, headers=NDJSON)
    assert_problem(response, 413, "content-too-large")


def test_an_item_input_over_the_input_cap_is_refused(batch_alice: httpx.Client) -> None:
    body = batch_body(1, model="oa")
    body["items"][0]["input"] = {"text": "x" * 1_000_000}  # over REPROMPT_MAX_INPUT_BYTES
    response = batch_alice.post("/v1/batches", json=body)
    assert_problem(response, 422, "invalid-input", "items.0.input")


@pytest.mark.parametrize(
    ("change", "field"),
    [
        ({"liveBelow": -1}, "liveBelow"),
        ({"liveBelow": 10**9}, "liveBelow"),
        ({"deadlineMs": 10**12}, "deadlineMs"),
        ({"reask": "sometimes"}, "reask"),
        ({"maxCostUsd": -1}, "maxCostUsd"),
        ({"metadata": {f"k{i}": "v" for i in range(65)}}, "metadata"),
    ],
)
def test_batch_options_out_of_bounds_are_refused(
    batch_alice: httpx.Client, change: dict[str, Any], field: str
) -> None:
    body = batch_body(1, model="oa") | change
    assert_problem(batch_alice.post("/v1/batches", json=body), 422, "invalid-input", field)


@pytest.mark.parametrize(
    "template_change",
    [
        {"tools": [{"name": "t", "parameters": {"type": "object"}}]},
        {"validators": [{"kind": "webhook", "url": "https://example.com/v"}]},
        {"budget": {"maxTurns": 1, "returnRetries": 1, "deadlineMs": 1000}},
        {"callback": {"url": "https://example.com/cb"}},
    ],
)
def test_a_template_a_batch_cannot_replay_is_refused(
    batch_alice: httpx.Client, template_change: dict[str, Any]
) -> None:
    body = batch_body(1, model="oa")
    body["template"] |= template_change
    response = batch_alice.post("/v1/batches", json=body)
    problem = assert_problem(response, 422, "invalid-input", "template")
    assert next(iter(template_change)) in problem["detail"]


def test_an_override_with_an_unknown_field_is_refused(batch_alice: httpx.Client) -> None:
    body = batch_body(2, model="oa")
    body["items"][1]["override"] = {"model": "an"}  # the model is the batch's
    response = batch_alice.post("/v1/batches", json=body)
    assert_problem(response, 422, "invalid-input", "items.1.override.model")


def test_ndjson_lines_that_are_not_json_are_refused_by_line(batch_alice: httpx.Client) -> None:
    body = batch_body(2, model="oa")
    lines = _ndjson(body).split(b"\n")
    response = batch_alice.post("/v1/batches", content=b"not json\n" + lines[1], headers=NDJSON)
    assert response.status_code == 422, response.text
    broken = b"\n".join([lines[0], lines[1], b'{"customId": "x", '])
    response = batch_alice.post("/v1/batches", content=broken, headers=NDJSON)
    assert_problem(response, 422, "invalid-input", "items.1")
    response = batch_alice.post("/v1/batches", content=lines[0], headers=NDJSON)
    assert_problem(response, 422, "invalid-input", "items")


def test_a_body_neither_json_nor_ndjson_is_refused(batch_alice: httpx.Client) -> None:
    response = batch_alice.post(
        "/v1/batches", content=b"<xml/>", headers={"content-type": "application/xml"}
    )
    assert_problem(response, 415, "unsupported-media-type")


def test_another_tenants_batch_is_not_found(batch_alice: httpx.Client, batch_api: str) -> None:
    batch_id = batch_alice.post("/v1/batches", json=batch_body(1, model="oa")).json()["id"]
    with client(batch_api, KEYS["bob"]) as bob:
        for path in ("", "/items", "/results", "/events"):
            assert_problem(bob.get(f"/v1/batches/{batch_id}{path}"), 404, "not-found")
        assert_problem(bob.post(f"/v1/batches/{batch_id}/cancel"), 404, "not-found")


@pytest.mark.parametrize("cursor", ["-1", "x", "1" * 20])
def test_an_items_cursor_that_is_not_ours_is_refused(
    batch_alice: httpx.Client, cursor: str
) -> None:
    batch_id = batch_alice.post("/v1/batches", json=batch_body(1, model="oa")).json()["id"]
    response = batch_alice.get(f"/v1/batches/{batch_id}/items", params={"cursor": cursor})
    assert_problem(response, 422, "invalid-input", "cursor")


@pytest.mark.parametrize(
    "url",
    [
        "http://10.0.0.1/hook",
        "https://169.254.169.254/latest/meta-data",
        "https://[::ffff:10.0.0.1]/hook",
        "https://127.1/hook",
        "https://0x7f.0.0.1/hook",
        "https://localhost/hook",
        "http://hooks.example.com/plain-http",
        "https://user:pw@hooks.example.com/hook",
        "file:///etc/passwd",
        "not a url",
    ],
)
def test_a_batch_callback_into_a_private_network_or_malformed_is_refused(
    batch_alice: httpx.Client, url: str
) -> None:
    body = batch_body(2, model="oa", callback={"url": url})
    problem = assert_problem(
        batch_alice.post("/v1/batches", json=body), 422, "invalid-input", "callback.url"
    )
    assert [e["field"] for e in problem["errors"]] == ["callback.url"]
    response = batch_alice.post("/v1/batches", content=_ndjson(body), headers=NDJSON)
    assert_problem(response, 422, "invalid-input", "callback.url")


@pytest.mark.parametrize(
    ("callback", "field"),
    [
        ({"url": "https://hooks.example.com/" + "a" * 2100}, "callback.url"),
        ({"url": "https://hooks.example.com/h", "events": ["succeeded"]}, "callback.events.0"),
        ({"url": "https://hooks.example.com/h", "events": []}, "callback.events"),
        ({"url": "https://hooks.example.com/h", "events": ["failed"] * 2}, "callback.events"),
        ({"url": "https://hooks.example.com/h", "events": ["completed"] * 4}, "callback.events"),
        ({"url": "https://hooks.example.com/h", "headers": {"x": "y"}}, "callback.headers"),
        ({"url": 42}, "callback.url"),
        ("https://hooks.example.com/h", "callback"),
    ],
)
def test_a_malformed_batch_callback_is_refused_naming_the_field(
    batch_alice: httpx.Client, callback: Any, field: str
) -> None:
    body = batch_body(2, model="oa", callback=callback)
    assert_problem(batch_alice.post("/v1/batches", json=body), 422, "invalid-input", field)


def test_a_public_batch_callback_is_kept_as_given(batch_alice: httpx.Client) -> None:
    # "failed" only: a batch that completes sends nothing to this host.
    callback = {"url": "https://hooks.example.com/done", "events": ["failed"]}
    response = batch_alice.post("/v1/batches", json=batch_body(1, model="oa", callback=callback))
    assert response.status_code == 202, response.text
    assert response.json()["callback"] == callback | {"deliveries": []}
    assert response.json()["resultsUrl"] == f"/v1/batches/{response.json()['id']}/results"
