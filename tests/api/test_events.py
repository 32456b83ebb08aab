"""Server-Sent Events: every event in order, with ids, resumable, ending with job_end."""

from __future__ import annotations

import httpx

from app.client import ApiClient, ServerEvent
from tests.service import KEYS, assert_problem, scripted


def names(events: list[ServerEvent]) -> list[str]:
    return [event.name for event in events]


def test_events_arrive_in_order_and_end_with_job_end(api: str) -> None:
    with ApiClient(api, key=KEYS["alice"]) as client:
        job = client.submit(scripted("Capital of Chad", ["broken_json", "ok"]))
        events = list(client.events(job["id"]))
    assert names(events) == [
        "job_queued",
        "job_start",
        "turn_start",
        "turn_end",
        "turn_start",
        "turn_end",
        "job_end",
    ]
    ids = [event.id for event in events]
    assert all(ids)
    assert ids == sorted(ids, key=lambda i: tuple(map(int, str(i).split("-"))))
    turn_ends = [event.data for event in events if event.name == "turn_end"]
    assert [data["result"] for data in turn_ends] == ["invalid", "success"]
    assert turn_ends[0]["errorCode"] == "llm-invalid-output"
    assert events[-1].data["status"] == "succeeded"
    assert events[-1].data["result"]["status"] == "success"


def test_last_event_id_resumes_after_that_event(api: str) -> None:
    with ApiClient(api, key=KEYS["alice"]) as client:
        job = client.submit(scripted("Capital of Mali", ["missing_field", "ok"]))
        everything = list(client.events(job["id"]))
        resumed = list(client.events(job["id"], last_event_id=everything[2].id))
        at_the_end = list(client.events(job["id"], last_event_id=everything[-1].id))
    assert [(e.id, e.name) for e in resumed] == [(e.id, e.name) for e in everything[3:]]
    assert at_the_end == []


def test_events_stream_live_while_the_job_runs(alice: httpx.Client) -> None:
    job = alice.post("/v1/jobs", json=scripted("Capital of Cuba", ["slow", "ok"])).json()
    seen: list[str] = []
    with alice.stream("GET", f"/v1/jobs/{job['id']}/events") as response:
        assert response.status_code == 200
        assert response.headers["content-type"].startswith("text/event-stream")
        assert response.headers["cache-control"] == "no-store"
        for line in response.iter_lines():
            if line.startswith("event:"):
                seen.append(line.removeprefix("event:").strip())
    assert seen[-1] == "job_end"
    assert seen.count("turn_start") == seen.count("turn_end") == 1


def test_a_malformed_last_event_id_is_a_422_naming_the_header(alice: httpx.Client) -> None:
    job = alice.post("/v1/jobs", json=scripted("Capital of Iran", ["ok"])).json()
    response = alice.get(f"/v1/jobs/{job['id']}/events", headers={"last-event-id": "nope"})
    assert_problem(response, 422, "invalid-input", field="Last-Event-ID")


def test_events_of_an_unknown_job_are_a_404(alice: httpx.Client) -> None:
    response = alice.get("/v1/jobs/job_00000000000000000000000000/events")
    assert_problem(response, 404, "not-found")
