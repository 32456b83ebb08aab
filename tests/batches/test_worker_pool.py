"""A provider without a batch API: the items run on the worker pool at low priority, so an
interactive job goes first (each batch call starts only while no job runs)."""

from __future__ import annotations

import httpx

from tests.batches.helpers import batch_body, ended, results
from tests.service import finished, scripted
from tests.waiting import sync_until


def _done(http: httpx.Client, batch_id: str) -> int:
    counts = http.get(f"/v1/batches/{batch_id}").json()["counts"]
    return int(counts["succeeded"] + counts["failed"])


def test_items_of_a_provider_without_a_batch_api_run_after_interactive_jobs(
    alice: httpx.Client,
) -> None:
    created = alice.post("/v1/batches", json=batch_body(40, model="plain"))
    assert created.status_code == 202, created.text
    batch_id = created.json()["id"]
    assert created.json()["mode"] == "worker_pool"
    sync_until(lambda: _done(alice, batch_id) >= 3 or None, what="the batch under way")

    # An interactive job whose answer takes a while (a scripted slow call): while it runs,
    # batch calls wait, so at most the one already in flight ends meanwhile.
    job = alice.post("/v1/jobs", json=scripted("Interactive during a batch", ["slow", "ok"]))
    assert job.status_code == 202, job.text
    job_id = job.json()["id"]
    sync_until(
        lambda: alice.get(f"/v1/jobs/{job_id}").json()["status"] != "queued" or None,
        what="the interactive job to start",
    )
    before = _done(alice, batch_id)
    assert finished(alice, job_id)["status"] == "succeeded"
    after = _done(alice, batch_id)
    assert after - before <= 1

    batch = ended(alice, batch_id)
    assert batch["status"] == "completed"
    assert batch["counts"]["pending"] == 0
    assert batch["round"] == 1  # one round: every item ran its loop to the end, live
    lines = results(alice, batch_id)
    assert len(lines) == 40
    assert all(line["status"] in ("succeeded", "failed") for line in lines)
