"""OpenTelemetry traces of jobs, turns and model calls: on when the standard ``OTEL_*``
variables ask for them, nothing at all otherwise (docs/tracing.md).

    tracing = open_tracing()               # None: off; the callers check and do nothing
    with tracing.job(claim) as job:        # the worker: one span per claim of a job
        job.on_event(event)                # the loop's events: one child span per turn
        job.ended(envelope)
    with tracing.model_call(...) as call:  # the router: one span per model called,
        call.retry(code, attempt, wait_s)  # its transport retries as events
        call.answered(response)

The one module that imports OpenTelemetry (the ``otel`` extra: API, SDK, the OTLP/HTTP
exporter and the httpx instrumentation); without those packages ``open_tracing`` says why
in the log and returns None.
Model-call spans follow the GenAI semantic conventions (``gen_ai.*``); the rest of what
reprompt knows goes in ``reprompt.*`` attributes. No prompt, answer or diagnosis text is
ever put on a span: those may hold a tenant's data.
"""

from __future__ import annotations

import asyncio
import logging
import os
from collections.abc import Mapping, Sequence
from contextvars import Token
from types import TracebackType
from typing import Final

import httpx

from app import __version__
from app.core.turn.model import LLMRequest, LLMResponse
from app.core.wire.envelope import Envelope
from app.core.wire.errors import ProviderError
from app.core.wire.events import LoopEvent, ToolsAnswered, TurnEnded, TurnStarted
from app.tracecontext import TraceContext

try:
    from opentelemetry import context as otel_context
    from opentelemetry import trace
    from opentelemetry.context import Context
    from opentelemetry.sdk.resources import Resource
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import (
        BatchSpanProcessor,
        ConsoleSpanExporter,
        SimpleSpanProcessor,
        SpanExporter,
    )
    from opentelemetry.trace import Span, SpanKind, Status, StatusCode, Tracer
    from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator
except ImportError:  # pragma: no cover - the otel extra is installed wherever tests run
    AVAILABLE = False
else:
    AVAILABLE = True
try:
    from opentelemetry.instrumentation.httpx import AsyncOpenTelemetryTransport
except ImportError:  # pragma: no cover - part of the otel extra
    INSTRUMENTED = False
else:
    INSTRUMENTED = True

log = logging.getLogger(__name__)

SCOPE: Final = "reprompt"
SERVICE_NAME: Final = "reprompt"
JOB_SPAN: Final = "reprompt.job"
TURN_SPAN: Final = "reprompt.turn"
RETRY_EVENT: Final = "reprompt.transport_retry"
TOOL_OUTPUTS_EVENT: Final = "reprompt.tool_outputs"
# OTEL_TRACES_EXPORTER names this module knows; "none" is the spec's way to say off.
EXPORTERS: Final = ("otlp", "console")
ENDPOINT_VARS: Final = ("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "OTEL_EXPORTER_OTLP_ENDPOINT")


def configured(environ: Mapping[str, str] = os.environ) -> tuple[str, ...]:
    """The exporters the ``OTEL_*`` variables ask for; ``()`` when traces are off.

    Off unless ``OTEL_TRACES_EXPORTER`` names an exporter or an OTLP endpoint is set (which
    means ``otlp``); ``OTEL_SDK_DISABLED=true`` turns everything off.
    """
    if environ.get("OTEL_SDK_DISABLED", "").strip().lower() == "true":
        return ()
    names = [
        name.strip().lower()
        for name in environ.get("OTEL_TRACES_EXPORTER", "").split(",")
        if name.strip()
    ]
    if not names:
        return ("otlp",) if any(environ.get(var, "").strip() for var in ENDPOINT_VARS) else ()
    return tuple(dict.fromkeys(name for name in names if name != "none"))


def open_tracing(environ: Mapping[str, str] = os.environ) -> Tracing | None:
    """The process's tracing as the ``OTEL_*`` variables configure it, or None (off).

    The exporters read their own variables (``OTEL_EXPORTER_OTLP_*``, ``OTEL_BSP_*``), the
    provider the sampler's and the resource's (``OTEL_TRACES_SAMPLER``,
    ``OTEL_SERVICE_NAME``, ``OTEL_RESOURCE_ATTRIBUTES``). Close it with ``shutdown``.
    """
    names = configured(environ)
    if not names:
        return None
    if not AVAILABLE:
        log.warning(
            "OTEL_* variables ask for traces (%s), but OpenTelemetry is not installed: "
            "no traces (pip install 'reprompt[otel]')",
            ", ".join(names),
        )
        return None
    exporters = [exporter for name in names if (exporter := _exporter(name, environ))]
    if not exporters:
        return None
    provider = TracerProvider(resource=_resource(), shutdown_on_exit=False)
    for exporter in exporters:
        provider.add_span_processor(BatchSpanProcessor(exporter))
    log.info("traces on: exported by %s", ", ".join(names))
    return Tracing(provider.get_tracer(SCOPE, __version__), provider)


def _exporter(name: str, environ: Mapping[str, str]) -> SpanExporter | None:
    if name == "console":
        return ConsoleSpanExporter()
    if name != "otlp":
        log.warning("OTEL_TRACES_EXPORTER %r is not supported here (use otlp or console)", name)
        return None
    protocol = (
        environ.get("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL")
        or environ.get("OTEL_EXPORTER_OTLP_PROTOCOL")
        or "http/protobuf"
    ).strip()
    try:
        if protocol == "http/protobuf":
            from opentelemetry.exporter.otlp.proto.http.trace_exporter import (
                OTLPSpanExporter as HttpExporter,
            )

            exporter: SpanExporter = HttpExporter()
            return exporter
        if protocol == "grpc":
            from opentelemetry.exporter.otlp.proto.grpc.trace_exporter import (
                OTLPSpanExporter as GrpcExporter,
            )

            exporter = GrpcExporter()
            return exporter
    except ImportError as exc:
        log.warning("no OTLP %s exporter (%s): no traces are exported by otlp", protocol, exc)
        return None
    log.warning("OTLP protocol %r is not supported (use http/protobuf or grpc)", protocol)
    return None


def _resource() -> Resource:
    """``OTEL_RESOURCE_ATTRIBUTES`` and ``OTEL_SERVICE_NAME``, else reprompt's name."""
    resource = Resource.create()
    extra: dict[str, str] = {}
    name = resource.attributes.get("service.name")
    if not isinstance(name, str) or name.startswith("unknown_service"):
        extra["service.name"] = SERVICE_NAME
    if "service.version" not in resource.attributes:
        extra["service.version"] = __version__
    return resource.merge(Resource(extra)) if extra else resource


class Tracing:
    """Where a process's spans go: a tracer, and the provider it owns (if it owns one).

    Model calls' HTTP requests get their client spans (and the ``traceparent`` they send)
    from OpenTelemetry's httpx instrumentation: ``http_transport`` wraps a transport."""

    def __init__(self, tracer: Tracer, provider: TracerProvider | None = None) -> None:
        self.tracer = tracer
        self._provider = provider
        self._propagator = TraceContextTextMapPropagator()

    @classmethod
    def to(cls, exporter: SpanExporter) -> Tracing:
        """Every span straight to ``exporter``, without batching.

        For an embedding process's own exporter, or the SDK's ``InMemorySpanExporter`` in tests.
        """
        provider = TracerProvider(resource=_resource(), shutdown_on_exit=False)
        provider.add_span_processor(SimpleSpanProcessor(exporter))
        return cls(provider.get_tracer(SCOPE, __version__), provider)

    def http_transport(self, transport: httpx.AsyncBaseTransport) -> httpx.AsyncBaseTransport:
        """``transport``, each request a client span whose context goes out in ``traceparent``.

        The span is a child of the current one: the ``chat {model}`` span.
        """
        if not INSTRUMENTED:
            log.warning(
                "traces on, but opentelemetry-instrumentation-httpx is not installed: model "
                "calls get no HTTP client span and send no traceparent"
            )
            return transport
        traced: httpx.AsyncBaseTransport = AsyncOpenTelemetryTransport(
            transport, tracer_provider=self._provider
        )
        return traced

    async def shutdown(self) -> None:
        """Export what is still buffered and stop (the provider's own, if it has one)."""
        if self._provider is not None:
            await asyncio.to_thread(self._provider.shutdown)

    def job(
        self,
        *,
        job_id: str,
        attempt: int,
        tenant: str,
        resumed: bool = False,
        parent: TraceContext | None = None,
    ) -> JobSpan:
        """A span for one claim of a job.

        A child of the submitting client's span when the job came with a ``traceparent``, else
        the root of a trace of its own.
        """
        if parent is None:
            context = Context()
        else:
            carrier = {"traceparent": parent.traceparent}
            if parent.tracestate:
                carrier["tracestate"] = parent.tracestate
            context = self._propagator.extract(carrier, context=Context())
        span = self.tracer.start_span(
            JOB_SPAN,
            context=context,
            kind=SpanKind.CONSUMER,
            attributes={
                "reprompt.job.id": job_id,
                "reprompt.job.attempt": attempt,
                "reprompt.job.resumed": resumed,
                "reprompt.tenant": tenant,
            },
        )
        return JobSpan(self.tracer, span)

    def model_call(
        self,
        request: LLMRequest,
        *,
        provider: str,
        model: str,
        upstream_model: str,
        wire: str,
        server: tuple[str, int] | None = None,
    ) -> ModelCallSpan:
        """A span for one model's answer to ``request``, transport retries included.

        Named ``chat {model}`` as the GenAI conventions say; a child of the current span.
        """
        attributes: dict[str, str | bool | int | float] = {
            "gen_ai.operation.name": "chat",
            "gen_ai.provider.name": provider,
            "gen_ai.system": provider,
            "gen_ai.request.model": upstream_model,
            "gen_ai.request.max_tokens": request.max_output_tokens,
            "gen_ai.output.type": "text" if request.output_schema is None else "json",
            "reprompt.model": model,
            "reprompt.provider.wire": wire,
        }
        if request.temperature is not None:
            attributes["gen_ai.request.temperature"] = request.temperature
        if request.seed is not None:
            attributes["gen_ai.request.seed"] = request.seed
        if request.tools:
            attributes["reprompt.request.tools"] = len(request.tools)
        if server is not None:
            attributes["server.address"], attributes["server.port"] = server
        span = self.tracer.start_span(
            f"chat {upstream_model}", kind=SpanKind.CLIENT, attributes=attributes
        )
        return ModelCallSpan(span)


class JobSpan:
    """The span of one claim of a job, and the span of the turn running in it.

    Entered, it is the current span of the job's task; each ``TurnStarted`` opens a turn
    span (current until its ``TurnEnded``, so model-call spans nest under it).
    """

    __slots__ = ("_ended", "_job_token", "_span", "_tracer", "_turn", "_turn_token")

    def __init__(self, tracer: Tracer, span: Span) -> None:
        self._tracer = tracer
        self._span = span
        self._turn: Span | None = None
        self._turn_token: Token[Context] | None = None
        self._job_token: Token[Context] | None = None
        self._ended = False

    def __enter__(self) -> JobSpan:
        self._job_token = otel_context.attach(trace.set_span_in_context(self._span))
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self._close_turn(None if exc is None else _error_type(exc))
        span = self._span
        if exc is not None and not self._ended:
            if isinstance(exc, asyncio.CancelledError):
                span.set_attribute("reprompt.job.stopped", "cancelled")
            else:
                span.record_exception(exc)
                span.set_status(Status(StatusCode.ERROR, type(exc).__name__))
                span.set_attribute("error.type", type(exc).__qualname__)
        span.end()
        if self._job_token is not None:
            otel_context.detach(self._job_token)
            self._job_token = None

    # -- the loop's events ------------------------------------------------------------

    def on_event(self, event: LoopEvent) -> None:
        if isinstance(event, TurnStarted):
            self._close_turn("superseded")
            attributes: dict[str, str | bool | int] = {
                "reprompt.turn.index": event.turn,
                "reprompt.turn.type": event.type,
                "reprompt.turn.attempt": event.attempt,
                "reprompt.turn.retries_left": event.remaining,
                "reprompt.turn.escalated": event.escalated,
                "reprompt.turn.simplified": event.simplified,
                "reprompt.turn.tools_offered": event.tools_count,
            }
            if event.model is not None:
                attributes["reprompt.turn.model"] = event.model
            self._turn = self._tracer.start_span(
                TURN_SPAN,
                context=trace.set_span_in_context(self._span),
                attributes=attributes,
            )
            self._turn_token = otel_context.attach(trace.set_span_in_context(self._turn))
        elif isinstance(event, TurnEnded):
            turn = self._turn
            if turn is None:
                return
            record = event.record
            attributes = {
                "reprompt.turn.outcome": record.outcome,
                "reprompt.turn.input_tokens": record.usage.input_tokens,
                "reprompt.turn.output_tokens": record.usage.output_tokens,
                "reprompt.turn.wasted_tokens": record.tokens if record.wasted else 0,
                "reprompt.turn.transport_retries": record.transport_retries,
                "reprompt.turn.calls_left": event.calls_left,
            }
            optional: dict[str, str | int | float | None] = {
                "reprompt.error.code": record.error_code,
                "reprompt.turn.cost_usd": record.cost_usd,
                "reprompt.turn.provider": record.provider,
                "reprompt.turn.response_model": record.model,
                "reprompt.turn.finish_reason": record.finish_reason,
                "reprompt.turn.repeat_of": record.repeat_of,
            }
            turn.set_attributes(attributes)
            turn.set_attributes({k: v for k, v in optional.items() if v is not None})
            if record.tool_calls:
                turn.set_attribute("reprompt.turn.tool_calls", list(record.tool_calls))
            if record.outcome == "error":
                code = record.error_code or "error"
                turn.set_attribute("error.type", code)
                turn.set_status(Status(StatusCode.ERROR, code))
            self._close_turn(None, ended=True)
        elif isinstance(event, ToolsAnswered):
            self._span.add_event(TOOL_OUTPUTS_EVENT, {"reprompt.tool_calls": len(event.calls)})

    def _close_turn(self, error: str | None, *, ended: bool = False) -> None:
        """End the open turn span (if any); ``error``: why it ends without its record."""
        turn, token = self._turn, self._turn_token
        if turn is None:
            return
        self._turn = self._turn_token = None
        if not ended:
            turn.set_attribute("reprompt.turn.outcome", "unfinished")
            if error is not None:
                turn.set_attribute("error.type", error)
                turn.set_status(Status(StatusCode.ERROR, error))
        turn.end()
        if token is not None:
            otel_context.detach(token)

    # -- how the claim ended ----------------------------------------------------------

    def ended(self, envelope: Envelope, *, committed: bool = True) -> None:
        """The job's result (``committed`` False: another owner's, the write was refused)."""
        self._ended = True
        span = self._span
        attributes: dict[str, str | int | float] = {
            "reprompt.job.status": envelope.job_status if committed else "stale"
        }
        execution = envelope.execution
        if execution is not None:
            attributes.update(
                {
                    "reprompt.job.llm_calls": execution.llm_calls,
                    "reprompt.job.retry_count": execution.retry_count,
                    "reprompt.job.transport_retries": execution.transport_retries,
                    "reprompt.job.input_tokens": execution.input_tokens,
                    "reprompt.job.output_tokens": execution.output_tokens,
                    "reprompt.job.wasted_tokens": execution.wasted_tokens,
                }
            )
            if execution.cost is not None:
                attributes["reprompt.job.cost_usd"] = execution.cost
            if execution.wasted_cost is not None:
                attributes["reprompt.job.wasted_cost_usd"] = execution.wasted_cost
        if envelope.error is not None:
            attributes["reprompt.error.code"] = envelope.error
            attributes["error.type"] = envelope.error
            span.set_status(Status(StatusCode.ERROR, envelope.error))
        span.set_attributes(attributes)

    def paused(self, tool_calls: int) -> None:
        """The job waits for its client's tool outputs; the next claim has its own span."""
        self._ended = True
        self._span.set_attributes(
            {
                "reprompt.job.status": "requires_action",
                "reprompt.job.pending_tool_calls": tool_calls,
            }
        )

    def stopped(self, reason: str) -> None:
        """The worker stopped the job (cancelled, lease lost, drained): nothing committed."""
        self._ended = True
        self._span.set_attribute("reprompt.job.stopped", reason)


class ModelCallSpan:
    """The span of one model's answer to a request: ``chat {model}``."""

    __slots__ = ("_span", "_token")

    def __init__(self, span: Span) -> None:
        self._span = span
        self._token: Token[Context] | None = None

    def __enter__(self) -> ModelCallSpan:
        self._token = otel_context.attach(trace.set_span_in_context(self._span))
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        span = self._span
        if exc is not None:
            code = _error_type(exc)
            if isinstance(exc, ProviderError):
                span.set_attribute("reprompt.transport.retries", exc.transport_retries)
                span.set_attribute("reprompt.transport.wait_ms", exc.transport_wait_ms)
            span.set_attribute("error.type", code)
            span.set_status(Status(StatusCode.ERROR, code))
        span.end()
        if self._token is not None:
            otel_context.detach(self._token)
            self._token = None

    def retry(self, code: str, attempt: int, wait_s: float) -> None:
        """A transport retry: attempt ``attempt`` failed with ``code``; the next in ``wait_s``."""
        self._span.add_event(
            RETRY_EVENT,
            {
                "error.type": code,
                "reprompt.retry.attempt": attempt,
                "reprompt.retry.wait_s": wait_s,
            },
        )

    def answered(self, response: LLMResponse) -> None:
        attributes: dict[str, str | int | Sequence[str]] = {
            "gen_ai.response.model": response.response_model or response.model,
            "gen_ai.response.finish_reasons": [response.finish_reason],
            "reprompt.transport.retries": response.transport_retries,
            "reprompt.transport.wait_ms": response.transport_wait_ms,
        }
        if response.usage is not None:
            attributes["gen_ai.usage.input_tokens"] = response.usage.input_tokens
            attributes["gen_ai.usage.output_tokens"] = response.usage.output_tokens
        self._span.set_attributes(attributes)


def _error_type(exc: BaseException) -> str:
    if isinstance(exc, ProviderError):
        return exc.code
    if isinstance(exc, asyncio.CancelledError):
        return "cancelled"
    if isinstance(exc, TimeoutError):
        return "timeout"
    return type(exc).__qualname__
