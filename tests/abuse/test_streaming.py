"""A streaming job's hostile inputs: the ``stream`` field, and a provider whose stream is a
1 MB string that never closes, a flood of tiny events, or nesting without end.

Each stream is cut off with the usual error (the reply cap: ``llm-invalid-output``, not
retried), the connection is closed, and what was shown before it stays within the checks:
no partial ever holds the hostile bytes.
"""

from __future__ import annotations

import asyncio
import json
from typing import Any

import httpx
import pytest

from app.core.turn.loop import Runtime, run_job
from app.core.wire import codes
from app.core.wire.partial import PartialAnswer, PartialEvent
from app.core.wire.spec import JobSpec
from app.providers.config import ModelConfig, ProviderConfig, ProvidersConfig
from app.providers.http import make_client
from app.providers.router import build_router
from tests.providers.rawserver import RawServer, Script
from tests.service import assert_problem, scripted

pytestmark = pytest.mark.usefixtures("no_sleeping")

MARK = "HOSTILE-MARK"
JOB = JobSpec.model_validate(
    {
        "task": "Name a city.",
        "signature": "{city :string, note :string}",
        "budget": {"maxTurns": 1},
        "maxOutputTokens": 1024,
        "stream": True,
    }
)
STREAM_HEAD = (
    b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ntransfer-encoding: chunked\r\n\r\n"
)


def test_stream_must_be_a_boolean(alice: httpx.Client) -> None:
    response = alice.post("/v1/jobs", json=scripted("Stream it", ["ok"], stream="yes"))
    assert_problem(response, 422, "invalid-input", "stream")


def config(url: str) -> ProvidersConfig:
    base = url.removesuffix("/chat/completions")
    return ProvidersConfig(
        providers={"p": ProviderConfig(kind="openai", base_url=base, max_attempts=2)},
        models={"m": ModelConfig(provider="p", structured="prompt")},
    )


def event(content: str) -> bytes:
    data = json.dumps({"choices": [{"index": 0, "delta": {"content": content}}]})
    body = f"data: {data}\n\n".encode()
    return b"%x\r\n%s\r\n" % (len(body), body)


async def send_events(writer: asyncio.StreamWriter, pieces: Any) -> None:
    writer.write(STREAM_HEAD)
    for piece in pieces:
        if writer.is_closing():
            return
        writer.write(event(piece))
        await writer.drain()


async def unclosed_string(writer: asyncio.StreamWriter, index: int, server: RawServer) -> bool:
    pieces = ['{"city": "Oslo", "note": "', *([MARK + "x" * 4000] * 256)]
    await send_events(writer, pieces)
    return False


async def tiny_events(writer: asyncio.StreamWriter, index: int, server: RawServer) -> bool:
    pieces = ['{"city": "Oslo", "note": "', *(["y"] * 1_000_000)]
    await send_events(writer, pieces)
    return False


async def endless_nesting(writer: asyncio.StreamWriter, index: int, server: RawServer) -> bool:
    pieces = ['{"city": "Oslo", "note": ', *(["[" * 100] * 10_000)]
    await send_events(writer, pieces)
    return False


@pytest.mark.parametrize("script", [unclosed_string, tiny_events, endless_nesting])
async def test_a_hostile_stream_is_cut_off_and_its_partials_stay_checked(script: Script) -> None:
    seen: list[PartialEvent] = []
    async with RawServer(script) as server, make_client(trust_env=False) as http:
        router = build_router(config(server.url), http)
        result = await run_job(JOB, Runtime(client=router, partials=seen.append))
        await server.until(lambda s: s.open == 0)  # the client hung up
    envelope = result.envelope
    assert envelope.status == "error"
    assert envelope.error == codes.LLM_INVALID_OUTPUT
    assert len(server.requests) == 1  # an oversized reply is not retried
    shown = [e for e in seen if isinstance(e, PartialAnswer)]
    assert shown  # "city" was complete and checked before the flood
    assert all(e.data == {"city": "Oslo"} for e in shown)
    assert MARK not in json.dumps([e.model_dump() for e in seen])
