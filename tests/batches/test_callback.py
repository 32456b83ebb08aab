"""A batch's ``callback``: when the batch ends, its summary is POSTed once, signed for its
tenant (Standard Webhooks), to a real receiver on loopback (allowlisted), and sent again
while the receiver fails, through the workers' one callback sender."""

from __future__ import annotations

import base64
import json
from collections.abc import Iterator
from typing import Any

import httpx
import pytest
import standardwebhooks

from app.assembly import api_app
from reprompt_sim.server import SimConfig, serve_in_background
from tests.api.test_wire import conforms
from tests.batches.fixtures import FLAKY, batch_settings, providers_for
from tests.batches.helpers import batch_body, ended, results
from tests.outbound.receiver import Receiver, Reply, Seen
from tests.service import KEYS, client, serve
from tests.waiting import sync_until

ALICE_SECRET = "whsec_" + base64.b64encode(b"alice-batch-callback-secret-32b!").decode()


@pytest.fixture(scope="module")
def service(batch_redis: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """A flaky provider whose batches stay in progress for a minute (unless cancelled);
    the ``plain`` model has no batch API, so its batches end quickly on the worker."""
    sim = SimConfig(seed=31, failure_rates=FLAKY, fix_probability=0.85, batch_turnaround_ms=60_000)
    with serve_in_background(sim) as sim_url:
        settings = batch_settings(
            batch_redis,
            tmp_path_factory.mktemp("batch-callback"),
            key_prefix="bcb",
            outbound_allow=["127.0.0.1"],
            callback_backoff_ms=20,
            callback_max_backoff_s=1,
            webhook_secrets=f"alice={ALICE_SECRET}",
        )
        app = api_app(settings, embedded_worker=True, providers=providers_for(sim_url))
        with serve(app) as url:
            yield url


@pytest.fixture
def alice(service: str) -> Iterator[httpx.Client]:
    with client(service, KEYS["alice"]) as http:
        yield http


@pytest.fixture
def receiver() -> Iterator[Receiver]:
    with Receiver() as running:
        yield running


def verified(seen: Seen) -> dict[str, Any]:
    """The body, once the reference library has verified its signature (raises if not)."""
    body: dict[str, Any] = standardwebhooks.Webhook(ALICE_SECRET).verify(seen.body, seen.headers)
    return body


def accept(seen: Seen) -> Reply:
    verified(seen)
    return Reply(200)


def delivered(http: httpx.Client, batch_id: str) -> dict[str, Any]:
    """The batch once its callback's delivery is settled."""

    def look() -> dict[str, Any] | None:
        batch: dict[str, Any] = http.get(f"/v1/batches/{batch_id}").json()
        deliveries = (batch.get("callback") or {}).get("deliveries") or []
        return batch if deliveries and deliveries[0]["state"] != "pending" else None

    return sync_until(look, what=f"the callback of {batch_id}", every=0.05)


def test_an_ended_batch_posts_its_signed_summary_again_until_the_receiver_takes_it(
    alice: httpx.Client, receiver: Receiver
) -> None:
    receiver.script(Reply(503), accept)
    callback = {"url": f"{receiver.url}/batch-done"}
    created = alice.post("/v1/batches", json=batch_body(30, model="plain", callback=callback))
    assert created.status_code == 202, created.text
    batch_id = created.json()["id"]
    assert ended(alice, batch_id)["status"] == "completed"

    batch = delivered(alice, batch_id)
    (delivery,) = batch["callback"]["deliveries"]
    assert delivery["event"] == "completed"
    assert delivery["state"] == "delivered"
    assert delivery["attempts"] == 2
    assert delivery["lastStatus"] == 200
    assert [s.path for s in receiver.seen] == ["/batch-done", "/batch-done"]
    # The same message both times (a receiver de-duplicates on webhook-id), each signed.
    assert {s.headers["webhook-id"] for s in receiver.seen} == {delivery["webhookId"]}
    first, second = (verified(s) for s in receiver.seen)
    assert first.pop("callback")["deliveries"][0]["attempts"] == 0
    assert second.pop("callback")["deliveries"][0]["attempts"] == 1
    assert first == second
    # The body is the batch as GET shows it once it ended: id, status, counts, cost, the
    # results URL (its callback's deliveries as they were before the attempt).
    conforms(first, "Batch")
    assert second["id"] == batch_id
    assert second["status"] == "completed"
    assert second["counts"] == batch["counts"]
    assert second["counts"]["pending"] == 0
    assert second["counts"]["succeeded"] + second["counts"]["failed"] == 30
    assert second["costUsd"] == batch["costUsd"] > 0
    assert second["resultsUrl"] == f"/v1/batches/{batch_id}/results"
    lines = results(alice, batch_id)
    assert sorted(line["customId"] for line in lines) == sorted(f"doc-{i}" for i in range(30))


def test_a_cancelled_batch_calls_back_with_its_cancellation_once(
    alice: httpx.Client, receiver: Receiver
) -> None:
    receiver.script(accept)
    callback = {"url": f"{receiver.url}/hook", "events": ["cancelled"]}
    body = batch_body(10, model="oa", callback=callback)
    batch_id = alice.post("/v1/batches", json=body).json()["id"]

    def sent() -> bool | None:
        return alice.get(f"/v1/batches/{batch_id}").json()["phase"] == "poll" or None

    sync_until(sent, what="round 1 at the provider")
    assert alice.post(f"/v1/batches/{batch_id}/cancel").status_code == 202
    batch = delivered(alice, batch_id)
    (delivery,) = batch["callback"]["deliveries"]
    assert (delivery["event"], delivery["state"], delivery["attempts"]) == (
        "cancelled",
        "delivered",
        1,
    )
    (seen,) = receiver.seen
    body = verified(seen)
    assert body["status"] == "cancelled"
    assert body["counts"] == {"pending": 0, "succeeded": 0, "failed": 10}
    assert json.loads(seen.body)["id"] == batch_id
