"""Completion callbacks end to end: a job with a ``callback`` is POSTed, signed, to a real
receiver on loopback (allowlisted) when it ends or pauses, retried until it is delivered,
and its deliveries show on the job; an operator can send it again.

The backoff base is 20 ms here (``callback_backoff_ms``), so retries take no real time;
nothing asserts how fast anything is.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
import re
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import jsonschema
import pytest

from app.outbound import InvalidSignature, verify
from tests.api.test_metrics import delta, scrape, value
from tests.api.test_tools import answer, calls, tool_job, waiting
from tests.api.test_wire import conforms
from tests.outbound.receiver import Receiver, Reply, Seen
from tests.service import KEYS, StartApi, api_keys, assert_problem, client, finished, scripted
from tests.waiting import sync_until

# The tenants' signing secrets, as the operator set them (REPROMPT_WEBHOOK_SECRETS).
ALICE_SECRET = "whsec_" + base64.b64encode(b"alice-callback-secret-32-bytes!!").decode()
BOB_SECRET = "whsec_" + base64.b64encode(b"bob-callback-secret-32-bytes-!!!").decode()


@pytest.fixture
def receiver() -> Iterator[Receiver]:
    with Receiver() as running:
        yield running


@pytest.fixture
def service(start_api: StartApi) -> str:
    """An API with a worker whose outbound allowlist holds loopback (the receivers)."""
    return start_api(
        embedded_worker=True,
        api_keys=api_keys(),
        outbound_allow=["127.0.0.1"],
        callback_backoff_ms=20,
        callback_max_backoff_s=1,
        webhook_secrets=f"alice={ALICE_SECRET},bob={BOB_SECRET}",
    )


@pytest.fixture
def alice(service: str) -> Iterator[httpx.Client]:
    with client(service, KEYS["alice"]) as http:
        yield http


def delivery(
    http: httpx.Client, job_id: str, event: str, *states: str, attempts: int = 0
) -> dict[str, Any]:
    """The job's delivery for ``event`` once it is in one of ``states`` (and has at least
    ``attempts`` attempts), polling; the job is in ``["job"]``."""

    def settled() -> dict[str, Any] | None:
        job = http.get(f"/v1/jobs/{job_id}").json()
        found = [
            d for d in (job.get("callback") or {}).get("deliveries", []) if d["event"] == event
        ]
        if found and found[0]["state"] in states and found[0]["attempts"] >= attempts:
            out: dict[str, Any] = found[0] | {"job": job}
            return out
        return None

    what = f"the {event} callback of {job_id} to be {'/'.join(states)}"
    return sync_until(settled, what=what, every=0.05)


def with_callback(url: str, job: dict[str, Any] | None = None, **callback: Any) -> dict[str, Any]:
    body = job or scripted("Capital of Chile", ["ok"])
    return body | {"callback": {"url": url, **callback}}


def test_a_receiver_failing_three_times_gets_one_success_with_a_stable_webhook_id(
    alice: httpx.Client, receiver: Receiver
) -> None:
    receiver.script(Reply(500), Reply(500), Reply(500), Reply(200))
    job = alice.post("/v1/jobs", json=with_callback(f"{receiver.url}/hook")).json()
    assert job["callback"] == {
        "url": f"{receiver.url}/hook",
        "events": ["succeeded", "failed", "cancelled"],
        "deliveries": [],
    }
    done = delivery(alice, job["id"], "succeeded", "delivered", "failed")
    assert done["state"] == "delivered"
    assert done["attempts"] == 4
    assert done["lastStatus"] == 200
    assert done["lastError"] is None
    assert done["deliveredAt"] is not None
    assert done["nextAttemptAt"] is None
    assert len(receiver.seen) == 4
    assert {seen.path for seen in receiver.seen} == {"/hook"}
    ids = {seen.headers["webhook-id"] for seen in receiver.seen}
    assert ids == {done["webhookId"]}
    # Each request carries the job as GET /v1/jobs/{id} shows it (its deliveries as they
    # were when the request was made).
    final = done["job"]
    body = json.loads(receiver.seen[-1].body)
    assert body["id"] == job["id"]
    assert body["status"] == "succeeded"
    assert body["result"] == final["result"]
    assert {k: v for k, v in body.items() if k != "callback"} == {
        k: v for k, v in final.items() if k != "callback"
    }
    assert body["callback"]["deliveries"][0]["attempts"] == 3
    conforms(final, "Job")
    conforms(body, "Job")


def test_the_signature_verifies_with_the_published_algorithm_and_only_with_it(
    alice: httpx.Client, receiver: Receiver
) -> None:
    secret = ALICE_SECRET
    job = alice.post("/v1/jobs", json=with_callback(receiver.url)).json()
    delivery(alice, job["id"], "succeeded", "delivered")
    (seen,) = receiver.seen
    verify(secret, seen.headers, seen.body)  # the library
    assert _recipe(secret, seen.headers, seen.body)  # the docs' bare-HMAC recipe
    wrong = "whsec_" + base64.b64encode(b"x" * 32).decode()
    with pytest.raises(InvalidSignature):
        verify(wrong, seen.headers, seen.body)
    assert not _recipe(wrong, seen.headers, seen.body)
    stale = time.time() + 301
    with pytest.raises(InvalidSignature, match="too old"):
        verify(secret, seen.headers, seen.body, now=stale)
    with pytest.raises(InvalidSignature):
        verify(secret, seen.headers, seen.body.replace(b"succeeded", b"failed"))
    # Another tenant's secret does not verify alice's callbacks.
    with pytest.raises(InvalidSignature):
        verify(BOB_SECRET, seen.headers, seen.body)


def _recipe(secret: str, headers: dict[str, str], body: bytes) -> bool:
    """docs/outbound.md's verification with only an HMAC (the TypeScript one is the same)."""
    h = {k.lower(): v for k, v in headers.items()}
    msg_id, stamp = h["webhook-id"], h["webhook-timestamp"]
    if abs(time.time() - int(stamp)) > 300:
        return False
    key = base64.b64decode(secret.removeprefix("whsec_"))
    mac = hmac.new(key, f"{msg_id}.{stamp}.".encode() + body, hashlib.sha256).digest()
    expected = "v1," + base64.b64encode(mac).decode()
    return any(hmac.compare_digest(expected, s) for s in h["webhook-signature"].split(" "))


def test_the_documented_python_receiver_takes_a_callback_once(
    alice: httpx.Client, receiver: Receiver
) -> None:
    text = (Path(__file__).resolve().parents[2] / "docs" / "callbacks.md").read_text()
    blocks = re.findall(r"```python\n(.*?)```", text, re.DOTALL)
    (block,) = [b for b in blocks if "def receive" in b]
    namespace: dict[str, Any] = {}
    exec(block, namespace)
    secret = ALICE_SECRET
    job = alice.post("/v1/jobs", json=with_callback(receiver.url)).json()
    delivery(alice, job["id"], "succeeded", "delivered")
    (seen,) = receiver.seen
    remembered: set[str] = set()
    receive = namespace["receive"]
    assert receive(secret, seen.headers, seen.body, remembered) == 200
    assert remembered == {seen.headers["webhook-id"]}
    assert receive(secret, seen.headers, seen.body, remembered) == 200  # a repeat
    assert receive(secret, seen.headers, seen.body + b" ", set()) == 401
    stale = seen.headers | {"webhook-timestamp": str(int(time.time()) - 301)}
    assert receive(secret, stale, seen.body, set()) == 400


def test_a_4xx_is_final_and_stops_the_retries(alice: httpx.Client, receiver: Receiver) -> None:
    receiver.script(Reply(410, b"gone for good"))
    job = alice.post("/v1/jobs", json=with_callback(receiver.url)).json()
    done = delivery(alice, job["id"], "succeeded", "failed")
    assert done["attempts"] == 1
    assert done["lastStatus"] == 410
    assert done["lastError"] == "HTTP 410: gone for good"
    assert done["nextAttemptAt"] is None
    assert len(receiver.seen) == 1  # failed is final: the outbox holds it no more


@pytest.mark.parametrize("status", [408, 429, 503])
def test_408_429_and_5xx_are_retried(alice: httpx.Client, receiver: Receiver, status: int) -> None:
    receiver.script(Reply(status), Reply(204))
    job = alice.post("/v1/jobs", json=with_callback(receiver.url)).json()
    done = delivery(alice, job["id"], "succeeded", "delivered", "failed")
    assert (done["state"], done["attempts"], done["lastStatus"]) == ("delivered", 2, 204)


def test_retry_after_is_honoured(alice: httpx.Client, receiver: Receiver) -> None:
    arrivals: list[float] = []

    def at(reply: Reply) -> Any:
        def answer(seen: Seen) -> Reply:
            arrivals.append(time.monotonic())
            return reply

        return answer

    receiver.script(at(Reply(429, headers={"retry-after": "1"})), at(Reply(200)))
    job = alice.post("/v1/jobs", json=with_callback(receiver.url)).json()
    done = delivery(alice, job["id"], "succeeded", "delivered")
    assert done["attempts"] == 2
    assert arrivals[1] - arrivals[0] >= 0.9  # the backoff alone would be ~20 ms


def test_a_cancelled_job_calls_back_with_its_cancellation(
    alice: httpx.Client, receiver: Receiver
) -> None:
    spec = with_callback(receiver.url, scripted("Capital of Peru", ["slow", "ok"]))
    job = alice.post("/v1/jobs", json=spec).json()
    alice.post(f"/v1/jobs/{job['id']}/cancel")
    done = delivery(alice, job["id"], "cancelled", "delivered")
    (seen,) = receiver.seen
    body = json.loads(seen.body)
    assert body["status"] == "cancelled"
    assert body["result"]["error"] == "cancelled"
    assert done["job"]["status"] == "cancelled"


def test_requires_action_calls_back_with_the_calls_then_the_end(
    alice: httpx.Client, receiver: Receiver
) -> None:
    spec = with_callback(
        receiver.url,
        tool_job([calls("lookup"), "ok"]),
        events=["requires_action", "succeeded"],
    )
    job = alice.post("/v1/jobs", json=spec).json()
    paused = waiting(alice, job["id"])
    first = delivery(alice, job["id"], "requires_action", "delivered")
    body = json.loads(receiver.seen[0].body)
    assert body["status"] == "requires_action"
    assert body["requiredAction"] == paused["requiredAction"]
    assert answer(alice, first["job"]).status_code == 200
    assert finished(alice, job["id"])["status"] == "succeeded"
    last = delivery(alice, job["id"], "succeeded", "delivered")
    assert json.loads(receiver.seen[-1].body)["status"] == "succeeded"
    assert last["webhookId"] != first["webhookId"]
    events = [d["event"] for d in last["job"]["callback"]["deliveries"]]
    assert events == ["requires_action", "succeeded"]


def test_redeliver_sends_the_latest_delivery_again_with_the_same_webhook_id(
    alice: httpx.Client, receiver: Receiver
) -> None:
    job = alice.post("/v1/jobs", json=with_callback(receiver.url)).json()
    first = delivery(alice, job["id"], "succeeded", "delivered")
    again = alice.post(f"/v1/jobs/{job['id']}/callback/redeliver")
    assert again.status_code == 202, again.text
    (queued,) = again.json()["callback"]["deliveries"]
    assert queued["redeliveries"] == 1
    second = delivery(alice, job["id"], "succeeded", "delivered", attempts=2)
    assert len(receiver.seen) == 2
    assert {s.headers["webhook-id"] for s in receiver.seen} == {first["webhookId"]}
    assert second["redeliveries"] == 1


def test_redeliver_after_a_final_failure_tries_again(
    alice: httpx.Client, receiver: Receiver
) -> None:
    receiver.script(Reply(400), Reply(200))
    job = alice.post("/v1/jobs", json=with_callback(receiver.url)).json()
    delivery(alice, job["id"], "succeeded", "failed")
    assert alice.post(f"/v1/jobs/{job['id']}/callback/redeliver").status_code == 202
    done = delivery(alice, job["id"], "succeeded", "delivered")
    assert (done["attempts"], done["lastStatus"]) == (2, 200)


def test_redeliver_is_tenant_scoped_and_needs_a_delivery(
    alice: httpx.Client, service: str, receiver: Receiver
) -> None:
    job = alice.post("/v1/jobs", json=with_callback(receiver.url)).json()
    delivery(alice, job["id"], "succeeded", "delivered")
    with client(service, KEYS["bob"]) as bob:
        assert_problem(bob.post(f"/v1/jobs/{job['id']}/callback/redeliver"), 404, "not-found")
    plain = alice.post("/v1/jobs", json=scripted("Capital of Mali", ["ok"])).json()
    finished(alice, plain["id"])
    body = assert_problem(alice.post(f"/v1/jobs/{plain['id']}/callback/redeliver"), 409, "conflict")
    assert "no callback" in body["detail"]
    assert_problem(alice.post("/v1/jobs/job_nope/callback/redeliver"), 404, "not-found")
    assert len(receiver.seen) == 1


def test_deliveries_are_counted_and_the_outbox_depth_is_scraped(
    alice: httpx.Client, receiver: Receiver
) -> None:
    before = scrape(alice)
    receiver.script(Reply(503), Reply(200))
    job = alice.post("/v1/jobs", json=with_callback(receiver.url)).json()
    delivery(alice, job["id"], "succeeded", "delivered")
    after = scrape(alice)
    name = "reprompt_callback_deliveries_total"
    assert delta(before, after, name, outcome="delivered") == 1
    assert delta(before, after, name, outcome="retrying") == 1
    timing = "reprompt_callback_attempt_duration_seconds_count"
    assert delta(before, after, timing, outcome="delivered") == 1
    assert value(after, "reprompt_callback_outbox_depth") == 0
    assert ("reprompt_callback_outbox_depth", frozenset()) in after


def test_the_job_schema_documents_the_callback() -> None:
    from tests.api.test_wire import DOCUMENT

    job = DOCUMENT["components"]["schemas"]["Job"]
    assert "callback" in job["properties"]
    paths = DOCUMENT["paths"]
    assert "/v1/jobs/{job_id}/callback/redeliver" in paths
    spec = DOCUMENT["components"]["schemas"]["CallbackSpec"]
    assert spec["properties"]["events"]["items"]["enum"] == [
        "succeeded",
        "failed",
        "cancelled",
        "requires_action",
    ]
    jsonschema.Draft202012Validator.check_schema(job)
