"""What the API answers is what openapi/openapi.json says: real job records, produced by a
real worker over the simulator, fed through the response models and checked against the
checked-in document (so the document cannot drift from the answers)."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path
from typing import Any

import httpx
import jsonschema

from app.api.schemas import JobList
from app.core.turn.checkpoint import ActionCall, RequiredAction
from app.core.turn.conversation import TranscriptEntry
from app.core.wire.callback import CallbackStatus, Delivery
from app.core.wire.envelope import Envelope, Execution
from app.core.wire.job import Job
from app.core.wire.record import Rejection
from app.store import JobView, public_job, public_job_json
from app.store.records import LazyView, job_view
from app.store.writes import HISTORY_JSON, TRANSCRIPT_JSON  # how a worker's commit writes them
from tests.service import finished, scripted

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
    answers = []
    queued = alice.post("/v1/jobs", json=scripted("wire ok", ["missing_field", "ok"]))
    answers.append(queued)
    finished(alice, queued.json()["id"])
    done = alice.get(f"/v1/jobs/{queued.json()['id']}")
    assert done.json()["status"] == "succeeded"
    assert len(done.json()["turns"]) == 2
    answers.append(done)
    failing = scripted("wire fail", ["refusal"], budget={"maxTurns": 1})
    failed = alice.post("/v1/jobs", json=failing).json()["id"]
    finished(alice, failed)
    answers.append(alice.get(f"/v1/jobs/{failed}", params={"waitMs": 1000}))
    slow = alice.post("/v1/jobs", json=scripted("wire cancel", ["slow", "ok"])).json()
    answers.append(alice.post(f"/v1/jobs/{slow['id']}/cancel"))

    bodies = [a.json() for a in answers]
    assert [b["status"] for b in bodies] == ["queued", "succeeded", "failed", "cancelled"]
    for answer, body in zip(answers, bodies, strict=True):
        conforms(body, "Job")
        # and reads back into the very models that wrote it, byte for byte (the envelope
        # and turns go out as stored: written once, by these models)
        assert Job.model_validate(body).model_dump(mode="json") == body
        assert Job.model_validate_json(answer.content).model_dump_json().encode() == answer.content
    page = alice.get("/v1/jobs", params={"limit": 3})
    conforms(page.json(), "JobList")
    assert len(page.json()["jobs"]) == 3
    assert JobList.model_validate_json(page.content).model_dump_json().encode() == page.content


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


def _views() -> list[JobView]:
    """Views in every shape a job answer takes, built as the store builds them."""
    execution = Execution(
        duration_ms=12,
        tokens_used=30,
        input_tokens=20,
        output_tokens=10,
        cost=1.5e-07,
        model="m",
        provider="p",
        retry_count=1,
        timestamp="2026-11-22T05:40:01.120Z",
        llm_calls=2,
        transport_retries=0,
        wasted_tokens=12,
        wasted_cost=1e-16,
    )
    base = JobView(
        id="job_01jd5a8x3k6q2v9w0e4r7t1y5u",
        tenant="acme",
        status="queued",
        created_at="2026-11-22T05:39:58.790Z",
        started_at=None,
        finished_at=None,
        attempts=0,
        result=Envelope.in_progress(),
        turns=(),
        history=(),
        transcript=(),
        metadata={"k": "v", "ü": '\u2028 "q" \\ \x01 😀'},
        model=None,
        idempotency_key="idem-é",
    )
    done = {
        **{f: getattr(base, f) for f in base.__slots__ if f not in ("result_json", "turns_json")},
        "status": "succeeded",
        "started_at": "2026-11-22T05:39:58.801Z",
        "finished_at": "2026-11-22T05:40:01.120Z",
        "attempts": 1,
        "result": Envelope.success(
            {"name": "Zoë", "n": 1e16, "x": [0.1, -0.0, 12345678901234567890]},
            execution=execution,
        ),
        "history": (
            Rejection(
                turn=0,
                type="must_return",
                outcome="invalid",
                error_code="llm-invalid-output",
                diagnosis='$.age: expected integer, got string "30 ans"',
            ),
        ),
        "transcript": (
            TranscriptEntry(role="system", content="Answer in JSON.\n\t—"),
            TranscriptEntry(role="assistant", content='{"name": "Zoë"}'),
        ),
        "callback": CallbackStatus(
            url="https://hooks.example.com/x",
            events=("succeeded",),
            deliveries=(
                Delivery(
                    event="succeeded",
                    state="delivered",
                    webhook_id="msg_1",
                    attempts=1,
                    created_at="2026-11-22T05:40:01.120Z",
                    delivered_at="2026-11-22T05:40:01.300Z",
                ),
            ),
        ),
    }
    action = RequiredAction(
        tool_calls=(ActionCall(id="call_1", name="lookup", arguments={"q": "x", "n": 2.5}),),
        expires_at="2026-11-22T05:45:00.000Z",
    )
    return [
        base,
        JobView(**{**done, "result": Envelope.failure("cancelled", "by the client")}),
        JobView(**done),
        JobView(**{**done, "status": "requires_action", "required_action": action}),
        # a required action kept after the job went on is not shown
        JobView(**{**done, "status": "in_progress", "required_action": action}),
    ]


def test_a_job_is_written_as_its_response_model_writes_it() -> None:
    """``public_job_json``, which passes the stored envelope and turns on, writes every
    byte as ``public_job(view).model_dump_json()`` does; from a record read back from its
    hash fields too."""
    for view in _views():
        expected = public_job(view).model_dump_json().encode()
        assert public_job_json(view) == expected
        fields = {
            "id": view.id,
            "tenant": view.tenant,
            "status": view.status,
            "created_ms": "1763790000000",
            "attempts": str(view.attempts),
            "result": view.result.model_dump_json(),
            "turns": json.dumps(json.loads(expected)["turns"], separators=(",", ":")),
            # as a worker's commit writes them (app.store.leases)
            "history": HISTORY_JSON.dump_json(list(view.history)).decode(),
            "transcript": TRANSCRIPT_JSON.dump_json(list(view.transcript)).decode(),
            "metadata": json.dumps(view.metadata),
        }
        if view.idempotency_key is not None:
            fields["idem"] = view.idempotency_key
        if view.required_action is not None:
            fields["action"] = view.required_action.model_dump_json()
        stored = job_view({k: v.encode() for k, v in fields.items()})
        assert stored is not None
        assert stored.result_json == fields["result"]
        assert public_job_json(stored) == public_job(stored).model_dump_json().encode()
        # result, turns, history and transcript are parsed when read (LazyView), and
        # compare as a JobView's do
        assert (stored.result, stored.turns) == (view.result, view.turns)
        assert (stored.history, stored.transcript) == (view.history, view.transcript)
        assert isinstance(stored, LazyView)
        plain = JobView(**{f.name: getattr(stored, f.name) for f in dataclasses.fields(JobView)})
        assert stored == plain
        assert plain == stored
        assert stored != dataclasses.replace(plain, result=Envelope.failure("cancelled", "x"))
