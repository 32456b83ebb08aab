"""HTTP tools end to end: the model calls a tool with a url, the worker POSTs the call to
a real receiver on loopback (allowlisted), signed for the tenant, and the model reads the
answer. Aimed at a private network, the call is refused, at submit or at call time."""

from __future__ import annotations

import base64
import ipaddress
import json
import os
import socket
import subprocess
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from app.outbound import Signer, load_signing_key, verify
from tests.outbound.receiver import Receiver, Reply, Seen
from tests.service import KEYS, StartApi, api_keys, assert_problem, client, finished

ANSWER = {"sku": "A1", "price": 9.5}


def http_job(url: str, script: list[Any], **tool: Any) -> dict[str, Any]:
    directive = json.dumps({"script": script, "counter": "requests", "expect": ANSWER})
    return {
        "task": f"Price of A1 ({uuid.uuid4().hex[:8]})\n[[sim {directive}]]",
        "signature": "{sku :string, price :float}",
        "tools": [
            {
                "name": "price",
                "url": url,
                "parameters": {"type": "object", "properties": {"sku": {"type": "string"}}},
                **tool,
            }
        ],
        "budget": {"maxTurns": 3},
    }


CALL = {"call": [{"name": "price", "arguments": {"sku": "A1"}}]}


@pytest.fixture
def receiver() -> Iterator[Receiver]:
    with Receiver() as running:
        yield running


@pytest.fixture
def secrets_file(tmp_path: Path) -> Path:
    path = tmp_path / "tool-secrets.toml"
    path.write_text('[tenants.alice]\nPRICE_TOKEN = "tok-alice-123"\n')
    path.chmod(0o600)
    return path


# Alice's signing secrets, as the operator set them: the current one, and the previous one
# still valid during a rotation; Bob's is derived from the operator key.
ALICE_SECRET = "whsec_" + base64.b64encode(b"alice-current-secret-32-bytes!!!").decode()
ALICE_OLD = "whsec_" + base64.b64encode(b"alice-previous-secret-32-bytes!!").decode()


@pytest.fixture
def alice(start_api: StartApi, secrets_file: Path) -> Iterator[httpx.Client]:
    """An API with a worker whose outbound allowlist holds loopback (the receivers)."""
    url = start_api(
        embedded_worker=True,
        api_keys=api_keys(),
        outbound_allow=["127.0.0.1"],
        outbound_retries=1,
        tool_secrets_file=secrets_file,
        webhook_secrets=f"alice={ALICE_SECRET},alice={ALICE_OLD}",
    )
    with client(url, KEYS["alice"]) as http:
        yield http


def tool_messages(job: dict[str, Any]) -> list[str]:
    return [m["content"] for m in job["transcript"] if m["role"] == "tool"]


def test_an_http_tool_is_called_signed_and_its_answer_reaches_the_model(
    alice: httpx.Client, receiver: Receiver
) -> None:
    def check(seen: Seen) -> Reply:
        # Signed with both of alice's secrets during her rotation: either verifies.
        verify(ALICE_SECRET, seen.headers, seen.body)
        verify(ALICE_OLD, seen.headers, seen.body)
        return Reply(200, json.dumps({"price": 9.5}).encode())

    receiver.script(check)
    job = alice.post(
        "/v1/jobs",
        json=http_job(
            f"{receiver.url}/price",
            [CALL, "ok"],
            headers={"Authorization": "Bearer {{secret:PRICE_TOKEN}}"},
        ),
    ).json()
    done = finished(alice, job["id"])
    assert done["status"] == "succeeded", done["result"]
    (seen,) = receiver.seen
    sent = json.loads(seen.body)
    assert sent == {
        "jobId": job["id"],
        "toolCallId": sent["toolCallId"],
        "name": "price",
        "arguments": {"sku": "A1"},
    }
    assert seen.headers["authorization"] == "Bearer tok-alice-123"
    assert seen.headers["webhook-id"].startswith("msg_")
    (detail,) = done["turns"][0]["toolCallDetails"]
    assert (detail["mode"], detail["outcome"]) == ("http", "ok")
    assert tool_messages(done) == ['{"price": 9.5}']
    # the secret never shows in what the tenant reads back
    assert "tok-alice-123" not in json.dumps(done)


def test_a_failing_tool_is_a_tool_error_the_model_reads_after_retries(
    alice: httpx.Client, receiver: Receiver
) -> None:
    receiver.script(Reply(503), Reply(503), Reply(200, b"{}"))
    job = alice.post("/v1/jobs", json=http_job(receiver.url, [CALL, "ok"])).json()
    done = finished(alice, job["id"])
    assert done["status"] == "succeeded"
    assert len(receiver.seen) == 2  # one transport retry, then the error
    (detail,) = done["turns"][0]["toolCallDetails"]
    assert detail["outcome"] == "http_error"
    assert "HTTP 503" in tool_messages(done)[0]


def test_a_redirect_to_a_private_address_is_not_followed(
    alice: httpx.Client, receiver: Receiver
) -> None:
    receiver.script(Reply(302, b"", headers={"location": "http://169.254.169.254/latest"}))
    job = alice.post("/v1/jobs", json=http_job(receiver.url, [CALL, "ok"])).json()
    done = finished(alice, job["id"])
    assert len(receiver.seen) == 1
    assert "redirects are not followed" in tool_messages(done)[0]
    assert done["turns"][0]["toolCallDetails"][0]["outcome"] == "http_error"


@pytest.mark.parametrize(
    "url",
    [
        "http://10.0.0.1/tool",
        "https://169.254.169.254/latest/meta-data",
        "https://[::ffff:10.0.0.1]/tool",
        "https://[::1]/tool",
        "https://100.64.0.1/tool",
        "https://127.0.0.2/tool",
        "http://example.com/tool",
        "https://user:pw@example.com/tool",
        "ftp://example.com/tool",
        "https://metadata.google.internal/",
    ],
)
def test_urls_into_private_networks_are_refused_at_submit(alice: httpx.Client, url: str) -> None:
    body = assert_problem(
        alice.post("/v1/jobs", json=http_job(url, [CALL, "ok"])), 422, "invalid-input"
    )
    assert [e["field"] for e in body["errors"]] == ["tools[0].url"]


def test_loopback_is_refused_without_the_allowlist(start_api: StartApi) -> None:
    url = start_api(api_keys=api_keys())
    with client(url, KEYS["alice"]) as http:
        for target in (
            "http://127.0.0.1:9/x",
            "https://[::ffff:127.0.0.1]/x",
            "https://localhost/x",
        ):
            body = assert_problem(
                http.post("/v1/jobs", json=http_job(target, [CALL])), 422, "invalid-input"
            )
            assert [e["field"] for e in body["errors"]] == ["tools[0].url"], target


def test_a_name_that_resolves_to_a_private_address_is_refused_at_call_time(
    start_api: StartApi,
) -> None:
    # This host's own name passes the static check (a name, not an address); it resolves
    # to a loopback or private address, which the call refuses without connecting.
    name = socket.gethostname()
    resolved = ipaddress.ip_address(socket.getaddrinfo(name, 443)[0][4][0])
    if not (resolved.is_private or resolved.is_loopback):
        pytest.skip(f"{name} resolves to a public address here ({resolved})")
    url = start_api(embedded_worker=True, api_keys=api_keys())
    with client(url, KEYS["alice"]) as http:
        job = http.post("/v1/jobs", json=http_job(f"https://{name}/tool", [CALL, "ok"]))
        assert job.status_code == 202, job.text
        done = finished(http, job.json()["id"])
    assert done["status"] == "succeeded"
    (detail,) = done["turns"][0]["toolCallDetails"]
    assert detail["outcome"] == "refused"
    message = tool_messages(done)[0]
    assert "refused" in message
    assert str(resolved) not in message  # the model is not told internal addresses


def test_headers_may_name_only_the_tenants_own_secrets(alice: httpx.Client) -> None:
    job = http_job("https://tools.example.com/p", [CALL], headers={"X-Key": "{{secret:NOPE}}"})
    body = assert_problem(alice.post("/v1/jobs", json=job), 422, "invalid-input")
    assert body["errors"][0]["field"] == "tools[0].headers"
    job = http_job("https://tools.example.com/p", [CALL], headers={"Host": "evil"})
    assert_problem(alice.post("/v1/jobs", json=job), 422, "invalid-input")


def test_an_operator_prints_a_tenants_secret_with_the_cli(tmp_path: Path) -> None:
    env = {**os.environ, "REPROMPT_DATA_DIR": str(tmp_path)}
    env.pop("REPROMPT_WEBHOOK_SIGNING_KEY", None)

    def secret(tenant: str, **extra: str) -> str:
        proc = subprocess.run(
            [sys.executable, "-m", "app.cli", "signing-secret", tenant],
            env={**env, **extra},
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )
        assert proc.returncode == 0, proc.stderr
        return proc.stdout.strip()

    derived = secret("bob")
    assert derived.startswith("whsec_")
    assert secret("bob") == derived  # the key file in the data dir keeps it
    assert secret("carol") != derived
    # what the service signs with: the same derivation from the same key file
    key = load_signing_key(None, tmp_path)
    assert Signer(key).secret_for("bob") == derived
    assert secret("alice", REPROMPT_WEBHOOK_SECRETS=f"alice={ALICE_SECRET}") == ALICE_SECRET
