"""Tool secrets in a hostile tenant's hands (#29): a secret goes only to the hosts the
operator bound it to (another host is a 422 at submit naming the field), and a receiver
that echoes it back in any encoding in an error reply gets none of it into the job record
or the model's prompt: such replies are never read out."""

from __future__ import annotations

import base64
import json
import urllib.parse
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.outbound.receiver import Receiver, Reply, Seen
from tests.service import KEYS, StartApi, api_keys, assert_problem, client, finished

SECRET = "tok-Alice-SeCrEt-7Yh2kLq9"
CALL = {"call": [{"name": "price", "arguments": {"sku": "A1"}}]}


@pytest.fixture
def secrets_file(tmp_path: Path) -> Path:
    path = tmp_path / "tool-secrets.toml"
    path.write_text(
        "[tenants.alice]\n"
        f'PRICE_TOKEN = {{ value = "{SECRET}", hosts = ["127.0.0.1", "*.prices.example"] }}\n'
    )
    path.chmod(0o600)
    return path


@pytest.fixture
def alice(start_api: StartApi, secrets_file: Path) -> Iterator[httpx.Client]:
    url = start_api(
        embedded_worker=True,
        api_keys=api_keys(),
        outbound_allow=["127.0.0.1"],
        outbound_retries=0,
        tool_secrets_file=secrets_file,
    )
    with client(url, KEYS["alice"]) as http:
        yield http


@pytest.fixture
def receiver() -> Iterator[Receiver]:
    with Receiver() as running:
        yield running


def job(url: str, marker: str = "") -> dict[str, Any]:
    script = {"script": [CALL, "ok"], "counter": "requests", "expect": {"price": 9.5}}
    return {
        "task": f"Price of A1 ({marker or uuid.uuid4().hex[:8]})\n[[sim {json.dumps(script)}]]",
        "signature": "{price :float}",
        "tools": [
            {
                "name": "price",
                "url": url,
                "headers": {"Authorization": "Bearer {{secret:PRICE_TOKEN}}"},
                "parameters": {"type": "object", "properties": {"sku": {"type": "string"}}},
            }
        ],
        "budget": {"maxTurns": 3},
    }


@pytest.mark.parametrize(
    "url",
    [
        "https://attacker.example.net/collect",
        "https://prices.example.evil.net/",
        "https://evilprices.example/",  # not a subdomain of prices.example
        "https://prices.example/",  # *.prices.example is its subdomains only
    ],
)
def test_a_secret_sent_towards_a_host_it_is_not_bound_to_is_refused_at_submit(
    alice: httpx.Client, url: str
) -> None:
    response = alice.post("/v1/jobs", json=job(url))
    problem = assert_problem(response, 422, "invalid-input", "tools[0].headers")
    assert "'PRICE_TOKEN' is not for" in problem["detail"]
    assert SECRET not in response.text


def encodings(secret: str) -> list[str]:
    raw = secret.encode()
    return [
        secret.lower(),
        secret.upper(),
        base64.b64encode(raw).decode(),
        base64.urlsafe_b64encode(raw).decode().rstrip("="),
        raw.hex(),
        raw.hex().upper(),
        urllib.parse.quote(secret, safe=""),
        " ".join(secret),
        secret[::-1],
    ]


def test_an_error_reply_echoing_the_secret_in_any_encoding_is_never_kept_or_shown(
    alice: httpx.Client, receiver: Receiver, sim_url: str
) -> None:
    def echo(seen: Seen) -> Reply:
        sent = seen.headers["authorization"].removeprefix("Bearer ")
        return Reply(401, "\n".join(["bad token:", *encodings(sent)]).encode())

    receiver.script(echo)
    marker = uuid.uuid4().hex
    done = finished(alice, alice.post("/v1/jobs", json=job(receiver.url, marker)).json()["id"])
    assert done["status"] == "succeeded", done["result"]
    assert receiver.seen[0].headers["authorization"] == f"Bearer {SECRET}"  # bound: sent
    record = alice.get(f"/v1/jobs/{done['id']}").text
    entries = httpx.get(f"{sim_url}/sim/requests").json()
    prompts = [m for e in entries for m in e["recentMessages"] if "HTTP 401" in m]
    assert prompts, "the model read the tool error"
    seen_by_model = "\n".join(prompts)
    for text in (record, seen_by_model):
        for spelling in [SECRET, *encodings(SECRET)]:
            assert spelling not in text
    assert "its reply is not shown: the call carried a secret" in seen_by_model
