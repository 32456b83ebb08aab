"""Jobs through the HTTP API: submit, poll, long-poll, list, cancel, generate, idempotency."""

from __future__ import annotations

import asyncio
import uuid
from typing import Any

import httpx

from tests.service import (
    KEYS,
    StartApi,
    assert_problem,
    finished,
    scripted,
)
from tests.waiting import sync_until


def test_submit_then_poll_gives_the_success_envelope_with_every_turn(alice: httpx.Client) -> None:
    response = alice.post(
        "/v1/jobs",
        json=scripted("Capital of France", ["broken_json", "ok"], metadata={"ref": "r-1"}),
    )
    assert response.status_code == 202, response.text
    created = response.json()
    assert response.headers["location"] == f"/v1/jobs/{created['id']}"
    assert response.headers["retry-after"] == "1"
    assert created["status"] == "queued"
    assert created["result"]["status"] == "in-progress"
    assert created["metadata"] == {"ref": "r-1"}

    job = finished(alice, created["id"])
    assert job["status"] == "succeeded"
    assert job["attempts"] == 1
    assert job["startedAt"]
    assert job["finishedAt"]
    envelope = job["result"]
    assert envelope["status"] == "success"
    assert set(envelope["data"]) == {"city", "population"}
    assert envelope["execution"]["retryCount"] == 1
    assert envelope["execution"]["llmCalls"] == 2
    assert [(t["type"], t["outcome"]) for t in job["turns"]] == [
        ("must_return", "invalid"),
        ("retry", "success"),
    ]
    first = job["turns"][0]
    assert first["errorCode"] == "llm-invalid-output"
    assert "JSON" in first["diagnosis"]
    assert first["provider"] == "sim"
    assert first["model"] == "sim-model"
    assert first["usage"]["inputTokens"] > 0


def test_a_failed_job_carries_the_error_envelope(alice: httpx.Client) -> None:
    job_body = scripted("Capital of Spain", ["broken_json", "missing_field"])
    job_body["budget"] = {"maxTurns": 1, "returnRetries": 1}
    created = alice.post("/v1/jobs", json=job_body).json()
    job = finished(alice, created["id"])
    assert job["status"] == "failed"
    assert job["result"]["status"] == "error"
    assert job["result"]["error"] == "budget-exhausted"
    assert len(job["turns"]) == 2


def test_long_poll_returns_as_soon_as_the_job_ends(start_api: StartApi) -> None:
    # A wait longer than the client's read timeout: one not ended by the job's end fails.
    url = start_api(embedded_worker=True, max_wait_ms=3_600_000)
    with httpx.Client(base_url=url, timeout=30) as http:
        created = http.post("/v1/jobs", json=scripted("Capital of Italy", ["slow", "ok"]))
        response = http.get(f"/v1/jobs/{created.json()['id']}", params={"waitMs": 3_600_000})
    # The model call takes SLOW_MS; the answer comes then, with the finished job.
    assert response.json()["status"] == "succeeded"


def test_long_poll_returns_at_wait_ms_when_the_job_does_not_end(start_api: StartApi) -> None:
    url = start_api()  # no worker: the job stays queued
    with httpx.Client(base_url=url, timeout=30) as http:
        created = http.post("/v1/jobs", json=scripted("Capital of Peru", ["ok"])).json()
        response = http.get(f"/v1/jobs/{created['id']}", params={"waitMs": 600})
    assert response.status_code == 200
    assert response.json()["status"] == "queued"  # as it is when the wait ran out


def test_wait_ms_above_the_cap_waits_only_up_to_the_cap(start_api: StartApi) -> None:
    url = start_api(max_wait_ms=700)
    with httpx.Client(base_url=url, timeout=30) as http:
        created = http.post("/v1/jobs", json=scripted("Capital of Chile", ["ok"])).json()
        # An hour asked for: answered within the client's 30 s read timeout, at the cap.
        response = http.get(f"/v1/jobs/{created['id']}", params={"waitMs": 3_600_000})
    assert response.status_code == 200
    assert response.json()["status"] == "queued"


def test_generate_answers_with_the_finished_job(alice: httpx.Client) -> None:
    response = alice.post(
        "/v1/generate", json=scripted("Capital of Japan", ["missing_field", "ok"])
    )
    assert response.status_code == 200, response.text
    job = response.json()
    assert job["status"] == "succeeded"
    assert job["result"]["execution"]["retryCount"] == 1


def test_generate_answers_202_with_a_location_when_the_job_is_still_running(
    alice: httpx.Client,
) -> None:
    response = alice.post(
        "/v1/generate",
        params={"waitMs": 200},
        json=scripted("Capital of Kenya", ["slow", "ok"]),
    )
    assert response.status_code == 202, response.text
    job = response.json()
    assert job["status"] in ("queued", "in_progress")
    assert response.headers["location"] == f"/v1/jobs/{job['id']}"
    assert finished(alice, job["id"])["status"] == "succeeded"


def test_pagination_walks_every_job_once_newest_first(start_api: StartApi) -> None:
    url = start_api()
    with httpx.Client(base_url=url, timeout=30) as http:
        ids = [
            http.post("/v1/jobs", json=scripted(f"Page job {i}", ["ok"])).json()["id"]
            for i in range(5)
        ]
        pages: list[list[str]] = []
        links: list[str | None] = []
        cursor: str | None = None
        while True:
            params: dict[str, Any] = {"limit": 2} | ({"cursor": cursor} if cursor else {})
            response = http.get("/v1/jobs", params=params)
            assert response.status_code == 200, response.text
            body = response.json()
            pages.append([job["id"] for job in body["jobs"]])
            links.append(response.headers.get("link"))
            cursor = body["next"]
            if cursor is None:
                break
            assert f"cursor={cursor}" in response.headers["link"]
            assert response.headers["link"].endswith('; rel="next"')
    assert [len(page) for page in pages] == [2, 2, 1]
    assert links[-1] is None
    assert [job_id for page in pages for job_id in page] == list(reversed(ids))


def test_status_filter_lists_only_jobs_in_that_state(start_api: StartApi) -> None:
    url = start_api()
    with httpx.Client(base_url=url, timeout=30) as http:
        ids = [
            http.post("/v1/jobs", json=scripted(f"Filter job {i}", ["ok"])).json()["id"]
            for i in range(3)
        ]
        assert http.post(f"/v1/jobs/{ids[1]}/cancel").status_code == 200
        cancelled = http.get("/v1/jobs", params={"status": "cancelled"}).json()
        queued = http.get("/v1/jobs", params={"status": "queued"}).json()
        succeeded = http.get("/v1/jobs", params={"status": "succeeded"}).json()
    assert [job["id"] for job in cancelled["jobs"]] == [ids[1]]
    assert [job["id"] for job in queued["jobs"]] == [ids[2], ids[0]]
    assert succeeded == {"jobs": [], "next": None}


def test_cancel_a_queued_job_before_it_starts(start_api: StartApi) -> None:
    url = start_api()  # no worker: the job is still queued when the cancel comes
    with httpx.Client(base_url=url, timeout=30) as http:
        created = http.post("/v1/jobs", json=scripted("Capital of Norway", ["ok"])).json()
        response = http.post(f"/v1/jobs/{created['id']}/cancel")
        assert response.status_code == 200, response.text
        job = response.json()
        assert job["status"] == "cancelled"
        assert job["result"]["status"] == "error"
        assert job["result"]["error"] == "cancelled"
        assert job["startedAt"] is None
        assert job["turns"] == []
        # Cancelling again changes nothing.
        again = http.post(f"/v1/jobs/{created['id']}/cancel").json()
        assert again["status"] == "cancelled"
        assert again["finishedAt"] == job["finishedAt"]
        stats = http.get("/metrics").text
    assert "reprompt_queue_depth 0.0" in stats


def test_cancel_a_running_job_ends_it_cancelled_and_nothing_commits_after(
    alice: httpx.Client,
) -> None:
    created = alice.post("/v1/jobs", json=scripted("Capital of Egypt", ["slow", "ok"])).json()
    sync_until(
        lambda: alice.get(f"/v1/jobs/{created['id']}").json()["status"] == "in_progress",
        what="the job to start",
    )
    response = alice.post(f"/v1/jobs/{created['id']}/cancel")
    assert response.status_code == 200
    assert response.json()["status"] == "cancelled"

    # Past the moment the aborted model call would have answered: a slow call that began
    # after the cancel has answered (SLOW_MS each).
    later = alice.post("/v1/jobs", json=scripted("Capital of Kenya", ["slow", "ok"])).json()
    assert finished(alice, later["id"])["status"] == "succeeded"
    job = alice.get(f"/v1/jobs/{created['id']}").json()
    assert job["status"] == "cancelled"
    assert job["result"]["error"] == "cancelled"
    assert job["turns"] == []
    assert job["finishedAt"] == response.json()["finishedAt"]


def test_cancelling_a_finished_job_leaves_it_as_it_was(alice: httpx.Client) -> None:
    created = alice.post("/v1/jobs", json=scripted("Capital of Ghana", ["ok"])).json()
    done = finished(alice, created["id"])
    response = alice.post(f"/v1/jobs/{created['id']}/cancel")
    assert response.status_code == 200
    assert response.json()["status"] == "succeeded"
    assert response.json()["result"] == done["result"]


async def test_one_hundred_concurrent_posts_with_one_key_make_one_job(api: str) -> None:
    body = scripted("Capital of Canada", ["ok"])
    key = f"idem-{uuid.uuid4()}"
    headers = {"authorization": f"Bearer {KEYS['alice']}", "idempotency-key": key}
    limits = httpx.Limits(max_connections=100)
    async with httpx.AsyncClient(base_url=api, timeout=30, limits=limits) as http:
        responses = await asyncio.gather(
            *(http.post("/v1/jobs", json=body, headers=headers) for _ in range(100))
        )
        ids = {response.json()["id"] for response in responses}
        statuses = sorted(response.status_code for response in responses)
        assert len(ids) == 1
        assert statuses == [200] * 99 + [202]
        replay = next(r for r in responses if r.status_code == 200)
        assert replay.headers["idempotent-replayed"] == "true"
        assert replay.headers["location"] == f"/v1/jobs/{ids.pop()}"

        other = dict(body, task=body["task"] + " (changed)")
        conflict = await http.post("/v1/jobs", json=other, headers=headers)
        assert_problem(conflict, 422, "invalid-input", field="Idempotency-Key")

    with httpx.Client(base_url=api, headers={"authorization": headers["authorization"]}) as sync:
        job = finished(sync, replay.json()["id"])
    assert job["status"] == "succeeded"
    assert job["idempotencyKey"] == key
    assert len(job["turns"]) == 1  # it ran once


def test_idempotency_keys_are_scoped_to_the_tenant(alice: httpx.Client, bob: httpx.Client) -> None:
    body = scripted("Capital of Fiji", ["ok"])
    headers = {"idempotency-key": f"shared-{uuid.uuid4()}"}
    first = alice.post("/v1/jobs", json=body, headers=headers)
    second = bob.post("/v1/jobs", json=body, headers=headers)
    assert first.status_code == second.status_code == 202
    assert first.json()["id"] != second.json()["id"]
    finished(alice, first.json()["id"])
    finished(bob, second.json()["id"])


def test_a_tenant_with_a_full_queue_gets_429_with_retry_after(start_api: StartApi) -> None:
    url = start_api(max_queued=2)
    with httpx.Client(base_url=url, timeout=30) as http:
        for i in range(2):
            assert http.post("/v1/jobs", json=scripted(f"Fill {i}", ["ok"])).status_code == 202
        response = http.post("/v1/jobs", json=scripted("One too many", ["ok"]))
    body = assert_problem(response, 429, "queue-full")
    assert int(response.headers["retry-after"]) >= 1
    assert "2 jobs waiting" in body["detail"]
