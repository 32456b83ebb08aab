"""Cancel stops the provider batch; a provider batch that expires part-way has only its
missing lines sent again; Idempotency-Key; the per-tenant cap on open batches."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from app.assembly import api_app
from reprompt_sim.server import SimConfig, serve_in_background
from tests.batches.fixtures import batch_settings, providers_for
from tests.batches.helpers import batch_body, ended, results, sim_batches
from tests.service import KEYS, assert_problem, client, serve
from tests.waiting import sync_until


def _api(redis_url: str, data: Path, sim: SimConfig, prefix: str) -> Iterator[tuple[str, str]]:
    with serve_in_background(sim) as sim_url:
        settings = batch_settings(redis_url, data, key_prefix=prefix)
        app = api_app(settings, embedded_worker=True, providers=providers_for(sim_url))
        with serve(app) as url:
            yield url, sim_url


@pytest.fixture(scope="module")
def slow(batch_redis: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, str]]:
    """A provider whose batches stay in progress for a minute (unless cancelled)."""
    data = tmp_path_factory.mktemp("slow")
    yield from _api(batch_redis, data, SimConfig(seed=3, batch_turnaround_ms=60_000), "bslow")


@pytest.fixture(scope="module")
def expiring(
    batch_redis: str, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[tuple[str, str]]:
    """A provider whose batches expire after answering 30 lines."""
    data = tmp_path_factory.mktemp("expiring")
    yield from _api(batch_redis, data, SimConfig(seed=4, batch_expire_after=30), "bexp")


@pytest.mark.parametrize("model", ["oa", "an"])
def test_cancel_stops_the_provider_batch_and_ends_pending_items_cancelled(
    slow: tuple[str, str], model: str
) -> None:
    url, sim_url = slow
    with client(url, KEYS["alice"]) as http:
        batch_id = http.post("/v1/batches", json=batch_body(20, model=model)).json()["id"]

        def sent() -> str | None:
            body = http.get(f"/v1/batches/{batch_id}").json()
            return body["providerBatchId"] if body["phase"] == "poll" else None

        provider_id = sync_until(sent, what="round 1 at the provider")
        cancelled = http.post(f"/v1/batches/{batch_id}/cancel")
        assert cancelled.status_code == 202
        assert cancelled.json()["cancelRequested"] is True
        batch = ended(http, batch_id)
        assert batch["status"] == "cancelled"
        assert batch["counts"] == {"pending": 0, "succeeded": 0, "failed": 20}
        for line in results(http, batch_id):
            assert line["status"] == "failed"
            assert line["result"]["error"] == "cancelled"
    (at_provider,) = [b for b in sim_batches(sim_url)["batches"] if b["id"] == provider_id]
    assert at_provider["cancelRequested"] is True
    assert at_provider["status"] == "cancelled"


def test_an_expired_provider_batch_has_only_its_missing_lines_sent_again(
    expiring: tuple[str, str],
) -> None:
    url, sim_url = expiring
    with client(url, KEYS["alice"]) as http:
        body = batch_body(75, model="oa", reask="batch")
        batch_id = http.post("/v1/batches", json=body).json()["id"]
        batch = ended(http, batch_id)
        assert batch["status"] == "completed"
        assert batch["counts"]["succeeded"] == 75  # a perfect model: every line answered once
    made = [
        b
        for b in sim_batches(sim_url)["batches"]
        if (b["idempotencyKey"] or "").startswith(f"{batch_id}-r")
    ]
    # 75 lines, 30 answered per batch: 75, then the 45 missing, then the 15 missing.
    assert [b["lines"] for b in made] == [75, 45, 15]
    assert [b["status"] for b in made] == ["expired", "expired", "completed"]


def test_an_idempotency_key_gives_back_the_batch_it_made(alice: httpx.Client) -> None:
    body = batch_body(3, model="oa")
    headers = {"Idempotency-Key": "batch-key-1"}
    first = alice.post("/v1/batches", json=body, headers=headers)
    again = alice.post("/v1/batches", json=body, headers=headers)
    assert first.status_code == 202
    assert again.status_code == 200
    assert again.json()["id"] == first.json()["id"]
    ended(alice, first.json()["id"])


def test_a_tenant_has_at_most_its_share_of_open_batches(slow: tuple[str, str]) -> None:
    url, _ = slow
    with client(url, KEYS["bob"]) as http:
        opened = [http.post("/v1/batches", json=batch_body(1, model="oa")) for _ in range(3)]
        assert [r.status_code for r in opened] == [202, 202, 202]
        refused = http.post("/v1/batches", json=batch_body(1, model="oa"))
        assert_problem(refused, 429, "too-many-batches")
        for r in opened:
            http.post(f"/v1/batches/{r.json()['id']}/cancel")
        for r in opened:
            ended(http, r.json()["id"])
        assert http.post("/v1/batches", json=batch_body(1, model="oa")).status_code == 202


def test_a_deadline_stops_the_round_at_the_provider_and_fails_what_is_left(
    slow: tuple[str, str],
) -> None:
    url, sim_url = slow
    with client(url, KEYS["alice"]) as http:
        body = batch_body(5, model="oa", deadlineMs=1000)
        batch_id = http.post("/v1/batches", json=body).json()["id"]
        batch = ended(http, batch_id)
        assert batch["status"] == "completed"
        assert batch["counts"]["failed"] == 5
        lines = results(http, batch_id)
        assert {line["result"]["error"] for line in lines} == {"deadline-exceeded"}
        provider_id = batch["providerBatchId"]
    (at_provider,) = [b for b in sim_batches(sim_url)["batches"] if b["id"] == provider_id]
    assert at_provider["cancelRequested"] is True
