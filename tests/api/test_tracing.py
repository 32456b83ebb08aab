"""Traces through the service: a client's traceparent on POST /v1/jobs, the worker's job,
turn and model-call spans (GenAI conventions), transport retries as span events.

The service runs for real (uvicorn on loopback, the embedded redis-server, the simulator,
an in-process worker); its spans go to the SDK's in-memory exporter (``Tracing.to``).
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

pytest.importorskip("opentelemetry.sdk")

from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import SpanKind, StatusCode

from app.core.wire import codes
from app.providers.retry import set_testing
from app.tracing import JOB_SPAN, RETRY_EVENT, TURN_SPAN, Tracing
from tests.api.test_tools import answer, calls, tool_job, waiting
from tests.service import KEYS, StartApi, client, finished, scripted
from tests.waiting import sync_until

TRACE_ID = "4bf92f3577b34da6a3ce929d0e0e4736"
PARENT_ID = "00f067aa0ba902b7"
TRACEPARENT = f"00-{TRACE_ID}-{PARENT_ID}-01"
TRACESTATE = "congo=t61rcWkgMzE,rojo=00f067aa0ba902b7"


@pytest.fixture
def no_sleep() -> Iterator[None]:
    """Transport retries decided and recorded as usual, their waits not slept."""
    set_testing(True)
    try:
        yield
    finally:
        set_testing(False)


@pytest.fixture
def exporter() -> InMemorySpanExporter:
    return InMemorySpanExporter()


@pytest.fixture
def traced_api(start_api: StartApi, exporter: InMemorySpanExporter) -> str:
    return start_api(embedded_worker=True, tracing=Tracing.to(exporter))


def job_spans(exporter: InMemorySpanExporter, job_id: str) -> list[Any]:
    """The finished spans of the job (its span ends just after its commit): job first."""

    def found() -> list[Any] | None:
        spans = exporter.get_finished_spans()
        jobs = [
            s
            for s in spans
            if s.name == JOB_SPAN and (s.attributes or {}).get("reprompt.job.id") == job_id
        ]
        if not jobs:
            return None
        trace_id = jobs[0].context.trace_id
        return [*jobs, *(s for s in spans if s.context.trace_id == trace_id and s not in jobs)]

    return sync_until(found, what=f"a span of job {job_id}")


def children(spans: list[ReadableSpan], parent: ReadableSpan, name: str) -> list[ReadableSpan]:
    found = [
        s
        for s in spans
        if s.name == name and s.parent is not None and s.parent.span_id == parent.context.span_id
    ]
    return sorted(found, key=lambda s: s.start_time or 0)


def attrs(span: ReadableSpan) -> dict[str, Any]:
    return dict(span.attributes or {})


def has(attributes: Any, expected: dict[str, Any]) -> None:
    """``attributes`` hold ``expected`` (and maybe more)."""
    actual = dict(attributes or {})
    assert {key: actual.get(key) for key in expected} == expected, actual


def test_a_job_span_is_a_child_of_the_clients_traceparent_with_turn_and_model_call_spans(
    traced_api: str, exporter: InMemorySpanExporter, no_sleep: None
) -> None:
    with client(traced_api, KEYS["alice"]) as http:
        # A rate limit (a transport retry inside the first call), a wrong answer, a good one.
        body = scripted("Capital of Laos", ["rate_limit", "missing_field", "ok"])
        response = http.post(
            "/v1/jobs", json=body, headers={"traceparent": TRACEPARENT, "tracestate": TRACESTATE}
        )
        assert response.status_code == 202, response.text
        job = finished(http, response.json()["id"])
    assert job["status"] == "succeeded", job
    first, second = job["turns"]
    spans = job_spans(exporter, job["id"])

    (job_span,) = [s for s in spans if s.name == JOB_SPAN]
    assert job_span.parent is not None
    assert job_span.parent.is_remote
    assert f"{job_span.parent.trace_id:032x}" == TRACE_ID
    assert f"{job_span.parent.span_id:016x}" == PARENT_ID
    assert f"{job_span.context.trace_id:032x}" == TRACE_ID
    assert job_span.context.trace_state.to_header() == TRACESTATE
    assert job_span.kind is SpanKind.CONSUMER
    execution = job["result"]["execution"]
    has(
        job_span.attributes,
        {
            "reprompt.job.id": job["id"],
            "reprompt.job.attempt": 1,
            "reprompt.tenant": "default",
            "reprompt.job.status": "succeeded",
            "reprompt.job.llm_calls": 2,
            "reprompt.job.retry_count": 1,
            "reprompt.job.transport_retries": 1,
            "reprompt.job.wasted_tokens": execution["wastedTokens"],
        },
    )
    assert execution["wastedTokens"] > 0
    assert job_span.status.status_code is StatusCode.UNSET

    turn1, turn2 = children(spans, job_span, TURN_SPAN)
    wasted = first["usage"]["inputTokens"] + first["usage"]["outputTokens"]
    has(
        turn1.attributes,
        {
            "reprompt.turn.index": 1,
            "reprompt.turn.type": "must_return",
            "reprompt.turn.outcome": "invalid",
            "reprompt.error.code": codes.LLM_INVALID_OUTPUT,
            "reprompt.turn.wasted_tokens": wasted,
            "reprompt.turn.transport_retries": 1,
        },
    )
    has(
        turn2.attributes,
        {
            "reprompt.turn.index": 2,
            "reprompt.turn.type": "retry",
            "reprompt.turn.outcome": "success",
            "reprompt.turn.wasted_tokens": 0,
        },
    )
    assert "reprompt.error.code" not in attrs(turn2)

    for turn, record, retries in ((turn1, first, 1), (turn2, second, 0)):
        (call,) = children(spans, turn, "chat sim-model")
        assert call.kind is SpanKind.CLIENT
        has(
            call.attributes,
            {
                "gen_ai.operation.name": "chat",
                "gen_ai.provider.name": "sim",
                "gen_ai.system": "sim",
                "gen_ai.request.model": "sim-model",
                "gen_ai.response.model": "sim/sim-model",
                "gen_ai.usage.input_tokens": record["usage"]["inputTokens"],
                "gen_ai.usage.output_tokens": record["usage"]["outputTokens"],
                "gen_ai.response.finish_reasons": ("stop",),
                "reprompt.transport.retries": retries,
                "server.address": "127.0.0.1",
            },
        )
        events = [e for e in call.events if e.name == RETRY_EVENT]
        assert len(events) == retries
        # Each HTTP request of the call (a retried one too): a client span of
        # OpenTelemetry's httpx instrumentation, under the call's span.
        posts = children(spans, call, "POST")
        assert [p.kind for p in posts] == [SpanKind.CLIENT] * (retries + 1)
        assert [attrs(p).get("http.status_code") for p in posts] == [429] * retries + [200]
    (call,) = children(spans, turn1, "chat sim-model")
    (retry,) = call.events
    has(
        retry.attributes,
        {
            "error.type": codes.LLM_RATE_LIMIT,
            "reprompt.retry.attempt": 1,
        },
    )
    # Nothing of the tenant's text is on any span.
    for span in spans:
        for value in attrs(span).values():
            assert "Capital of Laos" not in str(value)


def test_a_call_that_fails_for_good_is_an_error_span_with_each_retry_as_an_event(
    traced_api: str, exporter: InMemorySpanExporter, no_sleep: None
) -> None:
    with client(traced_api, KEYS["alice"]) as http:
        body = scripted("Capital of Fiji", ["server_error"] * 3)
        response = http.post("/v1/jobs", json=body, headers={"traceparent": TRACEPARENT})
        job = finished(http, response.json()["id"])
    assert job["status"] == "failed", job
    assert job["result"]["error"] == codes.LLM_UNAVAILABLE
    spans = job_spans(exporter, job["id"])
    (job_span,) = [s for s in spans if s.name == JOB_SPAN]
    assert job_span.status.status_code is StatusCode.ERROR
    has(
        job_span.attributes,
        {
            "reprompt.job.status": "failed",
            "reprompt.error.code": codes.LLM_UNAVAILABLE,
            "error.type": codes.LLM_UNAVAILABLE,
        },
    )
    (turn,) = children(spans, job_span, TURN_SPAN)
    assert turn.status.status_code is StatusCode.ERROR
    has(turn.attributes, {"reprompt.turn.outcome": "error", "error.type": codes.LLM_UNAVAILABLE})
    (call,) = children(spans, turn, "chat sim-model")
    assert call.status.status_code is StatusCode.ERROR
    has(call.attributes, {"error.type": codes.LLM_UNAVAILABLE, "reprompt.transport.retries": 2})
    assert "gen_ai.usage.input_tokens" not in attrs(call)
    assert [dict(e.attributes or {})["reprompt.retry.attempt"] for e in call.events] == [1, 2]


def test_generate_takes_the_traceparent_too_and_a_job_without_one_starts_its_own_trace(
    traced_api: str, exporter: InMemorySpanExporter
) -> None:
    with client(traced_api, KEYS["alice"]) as http:
        with_parent = http.post(
            "/v1/generate",
            json=scripted("Capital of Togo", ["ok"]),
            headers={"traceparent": TRACEPARENT},
        )
        without = http.post("/v1/jobs", json=scripted("Capital of Oman", ["ok"]))
        assert with_parent.status_code == 200, with_parent.text
        alone = finished(http, without.json()["id"])
    (parented,) = [s for s in job_spans(exporter, with_parent.json()["id"]) if s.name == JOB_SPAN]
    assert parented.parent is not None
    assert f"{parented.parent.span_id:016x}" == PARENT_ID
    (root,) = [s for s in job_spans(exporter, alone["id"]) if s.name == JOB_SPAN]
    assert root.parent is None
    assert f"{root.context.trace_id:032x}" != TRACE_ID


def test_a_job_that_waits_for_client_tools_has_a_span_per_claim_in_the_clients_trace(
    traced_api: str, exporter: InMemorySpanExporter
) -> None:
    with client(traced_api, KEYS["alice"]) as http:
        created = http.post(
            "/v1/jobs", json=tool_job([calls("lookup"), "ok"]), headers={"traceparent": TRACEPARENT}
        )
        assert created.status_code == 202, created.text
        paused = waiting(http, created.json()["id"])
        assert answer(http, paused).status_code == 200
        job = finished(http, paused["id"])
    assert job["status"] == "succeeded", job
    claims: list[ReadableSpan] = sync_until(
        lambda: (
            spans
            if len(spans := [s for s in job_spans(exporter, job["id"]) if s.name == JOB_SPAN]) >= 2
            else None
        ),
        what="both claims' spans",
    )
    first, second = sorted(claims, key=lambda s: attrs(s)["reprompt.job.attempt"])
    has(
        first.attributes,
        {
            "reprompt.job.status": "requires_action",
            "reprompt.job.resumed": False,
            "reprompt.job.pending_tool_calls": 1,
        },
    )
    has(second.attributes, {"reprompt.job.status": "succeeded", "reprompt.job.resumed": True})
    for span in (first, second):
        assert span.parent is not None
        assert f"{span.parent.span_id:016x}" == PARENT_ID
    assert any(e.name == "reprompt.tool_outputs" for e in second.events)
