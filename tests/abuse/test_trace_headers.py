"""Hostile trace context on POST /v1/jobs: oversized, malformed, repeated or binary
``traceparent`` / ``tracestate`` headers are ignored (W3C: no parent, no state), never a
4xx or a 500; the job runs and its span starts a trace of its own."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from typing import Any

import httpx
import pytest

pytest.importorskip("opentelemetry.sdk")

from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from app.tracing import JOB_SPAN, Tracing
from tests.service import StartApi, client
from tests.waiting import sync_until

TRACE = "4bf92f3577b34da6a3ce929d0e0e4736"
PARENT = "00f067aa0ba902b7"
VALID = f"00-{TRACE}-{PARENT}-01"

Headers = list[tuple[str, str | bytes]]


@pytest.fixture
def exporter() -> InMemorySpanExporter:
    return InMemorySpanExporter()


@pytest.fixture
def http(start_api: StartApi, exporter: InMemorySpanExporter) -> Iterator[httpx.Client]:
    with client(start_api(embedded_worker=True, tracing=Tracing.to(exporter))) as session:
        yield session


def submit(http: httpx.Client, headers: Headers) -> str:
    """Submit a job with ``headers``: accepted; its id."""
    spec = {
        "task": f"Name a colour ({uuid.uuid4().hex[:8]})",
        "signature": "{colour :string}",
        "budget": {"maxTurns": 1, "returnRetries": 0},
    }
    raw = [(k.encode(), v if isinstance(v, bytes) else v.encode()) for k, v in headers]
    response = http.post("/v1/jobs", json=spec, headers=raw)
    assert response.status_code == 202, response.text
    job_id: str = response.json()["id"]
    return job_id


def job_span(exporter: InMemorySpanExporter, job_id: str) -> Any:
    def span() -> Any:
        for each in exporter.get_finished_spans():
            if each.name == JOB_SPAN and (each.attributes or {}).get("reprompt.job.id") == job_id:
                return each
        return None

    return sync_until(span, what=f"job {job_id}'s span")


@pytest.mark.parametrize(
    "headers",
    [
        [("traceparent", "x" * 8000)],
        [("traceparent", VALID + "-" + "0" * 8000)],
        [("traceparent", f"01-{TRACE}-{PARENT}-01" + "-x" * 4000)],
        [("traceparent", "00-" + "0" * 32 + f"-{PARENT}-01")],
        [("traceparent", f"ff-{TRACE}-{PARENT}-01")],
        [("traceparent", VALID.upper())],
        [("traceparent", VALID), ("traceparent", VALID)],
        [("traceparent", VALID.encode()[:-2] + b"\xff\xfe")],
        [("traceparent", ("00-" + "é" * 32 + f"-{PARENT}-01").encode())],
        [("traceparent", ""), ("tracestate", "a=1")],
        [("tracestate", "a=1")],
    ],
    ids=[
        "8k-garbage",
        "8k-suffix",
        "8k-later-version",
        "zero-trace-id",
        "version-ff",
        "upper-case",
        "repeated",
        "binary",
        "non-ascii",
        "empty",
        "state-only",
    ],
)
def test_a_bad_traceparent_is_ignored_and_the_job_starts_its_own_trace(
    http: httpx.Client, exporter: InMemorySpanExporter, headers: Headers
) -> None:
    span = job_span(exporter, submit(http, headers))
    assert span.parent is None
    assert f"{span.context.trace_id:032x}" != TRACE


@pytest.mark.parametrize(
    "tracestate",
    [
        ["a=" + "v" * 8000],
        ["k=v"] * 2000,
        [",".join(f"m{i}=1" for i in range(33))],
        ["a=1,a=2"],
        ["Bad=1"],
        ["a=x=y"],
    ],
    ids=["8k-value", "2000-headers", "33-members", "repeated-key", "upper-key", "bad-value"],
)
def test_a_bad_tracestate_is_dropped_and_the_parent_kept(
    http: httpx.Client, exporter: InMemorySpanExporter, tracestate: list[str]
) -> None:
    headers: Headers = [("traceparent", VALID), *(("tracestate", v) for v in tracestate)]
    span = job_span(exporter, submit(http, headers))
    assert span.parent is not None
    assert f"{span.parent.span_id:016x}" == PARENT
    assert span.context.trace_state.to_header() == ""
