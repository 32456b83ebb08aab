"""Traces of ``reprompt worker`` processes, configured by the standard ``OTEL_*`` variables
alone: spans exported over OTLP/HTTP to a receiver on loopback, or to the console; and
nothing at all without the variables or with ``OTEL_SDK_DISABLED=true``.
"""

from __future__ import annotations

import gzip
import os
import signal
import threading
from collections.abc import Callable, Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest

pytest.importorskip("opentelemetry.proto")

from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
    ExportTraceServiceRequest,
    ExportTraceServiceResponse,
)

from app.tracecontext import TraceContext
from app.tracing import JOB_SPAN, TURN_SPAN
from tests.both import Store
from tests.worker.harness import TENANT, WorkerProcess, finished, job

pytestmark = pytest.mark.slow

Spawn = Callable[..., WorkerProcess]

TRACE = "4bf92f3577b34da6a3ce929d0e0e4736"
PARENT = "00f067aa0ba902b7"


class Receiver:
    """An OTLP/HTTP trace receiver on loopback: every export request, decoded."""

    def __init__(self) -> None:
        self.requests: list[ExportTraceServiceRequest] = []
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                length = min(int(self.headers.get("content-length") or 0), 16 * 1024 * 1024)
                body = self.rfile.read(length)
                if self.headers.get("content-encoding") == "gzip":
                    body = gzip.decompress(body)
                request = ExportTraceServiceRequest()
                request.ParseFromString(body)
                receiver.requests.append(request)
                reply = ExportTraceServiceResponse().SerializeToString()
                self.send_response(200)
                self.send_header("content-type", "application/x-protobuf")
                self.send_header("content-length", str(len(reply)))
                self.end_headers()
                self.wfile.write(reply)

            def log_message(self, format: str, *args: Any) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    def spans(self) -> list[tuple[dict[str, Any], Any]]:
        """Every span received, with its resource's attributes."""
        out = []
        for request in self.requests:
            for resource_spans in request.resource_spans:
                resource = {a.key: a.value.string_value for a in resource_spans.resource.attributes}
                for scope_spans in resource_spans.scope_spans:
                    out += [(resource, span) for span in scope_spans.spans]
        return out


@pytest.fixture
def receiver() -> Iterator[Receiver]:
    receiver = Receiver()
    receiver.thread.start()
    try:
        yield receiver
    finally:
        receiver.server.shutdown()
        receiver.server.server_close()


def otel_env(**variables: str) -> dict[str, str | None]:
    """Exactly these ``OTEL_*`` variables for the worker (the test's own are unset)."""
    unset: dict[str, str | None] = {k: None for k in os.environ if k.startswith("OTEL_")}
    return unset | dict(variables)


async def run_one_job(store: Store, worker: WorkerProcess, name: str) -> str:
    """A job with the client's trace context, run to its end; then the worker stops (its
    exporters flush on the way out)."""
    view, _ = await store.submit(
        tenant=TENANT,
        spec=job(["ok"], name=name),
        trace=TraceContext(f"00-{TRACE}-{PARENT}-01", "vendor=abc"),
    )
    assert (await finished(store, view.id)).status == "succeeded"
    worker.send(signal.SIGTERM)
    assert await worker.exit_code() == 0
    return view.id


def attribute(span: Any, key: str) -> Any:
    for item in span.attributes:
        if item.key == key:
            value = item.value
            return getattr(value, value.WhichOneof("value"))
    return None


async def test_a_worker_exports_its_spans_over_otlp_when_the_otel_variables_say_so(
    store: Store, spawn: Spawn, receiver: Receiver
) -> None:
    env = otel_env(
        OTEL_EXPORTER_OTLP_ENDPOINT=receiver.url,
        OTEL_SERVICE_NAME="reprompt-test-worker",
        OTEL_BSP_SCHEDULE_DELAY="100",
    )
    worker = await spawn(env=env).ready()
    assert worker.logged("traces on: exported by otlp")
    job_id = await run_one_job(store, worker, "otlp")

    spans = receiver.spans()
    resources = {resource["service.name"] for resource, _ in spans}
    assert resources == {"reprompt-test-worker"}
    by_name: dict[str, list[Any]] = {}
    for _, span in spans:
        by_name.setdefault(span.name, []).append(span)
    (job_span,) = by_name[JOB_SPAN]
    assert attribute(job_span, "reprompt.job.id") == job_id
    assert attribute(job_span, "reprompt.job.status") == "succeeded"
    assert job_span.trace_id.hex() == TRACE
    assert job_span.parent_span_id.hex() == PARENT
    assert job_span.trace_state == "vendor=abc"
    (turn,) = by_name[TURN_SPAN]
    assert turn.parent_span_id == job_span.span_id
    (call,) = [span for _, span in spans if span.name.startswith("chat ")]
    assert call.name == f"chat {attribute(call, 'gen_ai.request.model')}"
    assert call.parent_span_id == turn.span_id
    assert attribute(call, "gen_ai.operation.name") == "chat"
    assert attribute(call, "gen_ai.usage.output_tokens") > 0


async def test_the_console_exporter_writes_the_spans_to_the_workers_output(
    store: Store, spawn: Spawn
) -> None:
    worker = await spawn(env=otel_env(OTEL_TRACES_EXPORTER="console")).ready()
    await run_one_job(store, worker, "console")
    assert worker.logged(f'"name": "{JOB_SPAN}"')
    assert worker.logged(f'"trace_id": "0x{TRACE}"')


@pytest.mark.parametrize(
    "variables",
    [
        {},
        {"OTEL_SERVICE_NAME": "named-only", "OTEL_TRACES_EXPORTER": "none"},
        {
            "OTEL_SDK_DISABLED": "true",
            "OTEL_TRACES_EXPORTER": "otlp,console",
            "OTEL_EXPORTER_OTLP_ENDPOINT": "RECEIVER",
        },
    ],
    ids=["no-variables", "exporter-none", "sdk-disabled"],
)
async def test_without_otel_configuration_nothing_is_traced_or_exported(
    store: Store, spawn: Spawn, receiver: Receiver, variables: dict[str, str]
) -> None:
    env = otel_env(**{k: receiver.url if v == "RECEIVER" else v for k, v in variables.items()})
    worker = await spawn(env=env).ready()
    await run_one_job(store, worker, "off")
    assert not worker.logged("traces on")
    assert not worker.logged(JOB_SPAN)
    assert receiver.requests == []
