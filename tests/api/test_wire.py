"""What the API answers is what openapi/openapi.json says: real job records, produced by a
real worker over the simulator, fed through the response models and checked against the
checked-in document (so the document cannot drift from the answers)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import httpx
import jsonschema

from app.core.envelope import Envelope
from app.core.job import Job
from app.store import JobView, public_job
from tests.api.conftest import finished, scripted

DOCUMENT = json.loads(
    (Path(__file__).resolve().parents[2] / "openapi" / "openapi.json").read_text()
)


def conforms(body: Any, component: str) -> None:
    """``body`` validates against ``#/components/schemas/<component>`` of the document."""
    schema = {"$ref": f"#/components/schemas/{component}", "components": DOCUMENT["components"]}
    jsonschema.Draft202012Validator(schema).validate(body)


def events(http: httpx.Client, job_id: str) -> list[tuple[str, Any]]:
    out: list[tuple[str, Any]] = []
    with http.stream("GET", f"/v1/jobs/{job_id}/events") as response:
        name = ""
        for line in response.iter_lines():
            if line.startswith("event:"):
                name = line.split(":", 1)[1].strip()
            elif line.startswith("data:"):
                out.append((name, json.loads(line.split(":", 1)[1])))
    return out


def test_jobs_in_every_state_match_the_documented_job_schema(alice: httpx.Client) -> None:
    bodies = []
    queued = alice.post("/v1/jobs", json=scripted("wire ok", ["missing_field", "ok"]))
    bodies.append(queued.json())
    done = finished(alice, queued.json()["id"])
    assert done["status"] == "succeeded"
    assert len(done["turns"]) == 2
    bodies.append(done)
    failing = scripted("wire fail", ["refusal"], budget={"maxTurns": 1})
    bodies.append(finished(alice, alice.post("/v1/jobs", json=failing).json()["id"]))
    slow = alice.post("/v1/jobs", json=scripted("wire cancel", ["slow", "ok"])).json()
    bodies.append(alice.post(f"/v1/jobs/{slow['id']}/cancel").json())

    assert [b["status"] for b in bodies] == ["queued", "succeeded", "failed", "cancelled"]
    for body in bodies:
        conforms(body, "Job")
        # and reads back into the very models that wrote it
        assert Job.model_validate(body).model_dump(mode="json") == body
    conforms(alice.get("/v1/jobs", params={"limit": 3}).json(), "JobList")


def test_the_events_of_a_job_match_their_documented_schemas(alice: httpx.Client) -> None:
    job = alice.post("/v1/jobs", json=scripted("wire events", ["missing_field", "ok"])).json()
    documented = DOCUMENT["paths"]["/v1/jobs/{job_id}/events"]["get"]["responses"]["200"][
        "x-sse-events"
    ]
    seen = events(alice, job["id"])

    assert [name for name, _ in seen] == [
        "job_queued",
        "job_start",
        "turn_start",
        "turn_end",
        "turn_start",
        "turn_end",
        "job_end",
    ]
    for name, data in seen:
        conforms(data, documented[name]["$ref"].rsplit("/", 1)[-1])


def test_a_stored_record_goes_through_the_response_model_unchanged() -> None:
    view = JobView(
        id="job_01jd5a8x3k6q2v9w0e4r7t1y5u",
        tenant="acme",
        status="failed",
        created_at="2026-11-22T05:39:58.790Z",
        started_at=None,
        finished_at=None,
        attempts=1,
        result=Envelope.failure("budget-exhausted", "no", cause="llm-invalid-output"),
        turns=(),
        history=(),
        transcript=(),
        metadata={"k": "v"},
        model=None,
        idempotency_key=None,
    )
    body = json.loads(public_job(view).model_dump_json())
    conforms(body, "Job")
    assert "tenant" not in body
    assert body["result"] == {
        "status": "error",
        "error": "budget-exhausted",
        "detail": "no",
        "cause": "llm-invalid-output",
        "warnings": [],
    }
