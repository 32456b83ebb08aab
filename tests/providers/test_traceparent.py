"""With tracing on, a model call is a client span of OpenTelemetry's httpx instrumentation,
a child of the ``chat {model}`` span, and the provider receives its ``traceparent``: the
job's trace. Read at a loopback provider that records what it is sent."""

from __future__ import annotations

import asyncio

import pytest

pytest.importorskip("opentelemetry.instrumentation.httpx")

from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import SpanKind

from app.core.turn.model import LLMRequest, Message
from app.providers.config import ModelConfig, ProviderConfig, ProvidersConfig
from app.providers.http import make_client, open_clients
from app.providers.router import build_router
from app.tracing import JOB_SPAN, Tracing
from tests.providers.rawserver import RawServer, json_reply

ANSWER = (
    b'{"model":"m","choices":[{"message":{"role":"assistant","content":"hi"},'
    b'"finish_reason":"stop"}]}'
)


async def answer(writer: asyncio.StreamWriter, index: int, server: RawServer) -> bool:
    writer.write(json_reply(ANSWER))
    await writer.drain()
    return True


def config(url: str) -> ProvidersConfig:
    return ProvidersConfig(
        providers={
            "p": ProviderConfig(kind="openai", base_url=url.removesuffix("/chat/completions"))
        },
        models={"m": ModelConfig(provider="p", structured="prompt")},
    )


def header(request: bytes, name: bytes) -> str | None:
    head = request.partition(b"\r\n\r\n")[0]
    for line in head.split(b"\r\n")[1:]:
        key, _, value = line.partition(b":")
        if key.strip().lower() == name:
            return value.strip().decode()
    return None


async def test_a_model_call_is_a_client_span_and_sends_the_jobs_traceparent() -> None:
    exporter = InMemorySpanExporter()
    tracing = Tracing.to(exporter)
    async with RawServer(answer) as server:
        async with open_clients(config(server.url), tracing=tracing) as clients:
            router = build_router(config(server.url), clients, tracing=tracing)
            with tracing.job(job_id="job_1", attempt=1, tenant="t"):
                response = await router.complete(LLMRequest(messages=(Message("user", "hi"),)))
        await tracing.shutdown()
    assert response.choices[0].content == "hi"
    spans = exporter.get_finished_spans()
    (job,) = (s for s in spans if s.name == JOB_SPAN)
    (chat,) = (s for s in spans if s.name == "chat m")
    (http,) = (s for s in spans if s.kind == SpanKind.CLIENT and s.name == "POST")
    assert http.parent is not None
    assert http.parent.span_id == chat.context.span_id
    assert (http.attributes or {})["http.status_code"] == 200
    traceparent = header(server.requests[0], b"traceparent")
    assert traceparent is not None
    version, trace_id, parent_id, _ = traceparent.split("-")
    assert version == "00"
    assert int(trace_id, 16) == job.context.trace_id
    assert int(parent_id, 16) == http.context.span_id


async def test_without_tracing_no_span_and_no_traceparent_is_sent() -> None:
    async with RawServer(answer) as server, make_client(trust_env=False) as http:
        router = build_router(config(server.url), http)
        await router.complete(LLMRequest(messages=(Message("user", "hi"),)))
    assert header(server.requests[0], b"traceparent") is None
