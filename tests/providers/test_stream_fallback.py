"""A provider that answers a streaming request whole: one partial at the end, and a warning."""

from __future__ import annotations

import asyncio
import json

from app.core.turn.loop import Runtime, run_job
from app.core.wire.partial import PartialAnswer, PartialEvent
from app.core.wire.spec import JobSpec
from app.providers.config import ModelConfig, ProviderConfig, ProvidersConfig
from app.providers.http import make_client
from app.providers.router import build_router
from tests.providers.rawserver import RawServer, json_reply

ANSWER = {"city": "Oslo", "population": 700000}


async def whole(writer: asyncio.StreamWriter, index: int, server: RawServer) -> bool:
    body = {
        "model": "m",
        "choices": [
            {"index": 0, "message": {"content": json.dumps(ANSWER)}, "finish_reason": "stop"}
        ],
        "usage": {"prompt_tokens": 10, "completion_tokens": 8},
    }
    writer.write(json_reply(json.dumps(body).encode()))
    await writer.drain()
    return True


async def test_an_answer_that_came_whole_is_one_partial_with_a_warning() -> None:
    job = JobSpec.model_validate(
        {"task": "Name a city.", "signature": "{city :string, population :int}", "stream": True}
    )
    seen: list[PartialEvent] = []
    async with RawServer(whole) as server, make_client(trust_env=False) as http:
        base = server.url.removesuffix("/chat/completions")
        config = ProvidersConfig(
            providers={"p": ProviderConfig(kind="openai", base_url=base)},
            models={"m": ModelConfig(provider="p", structured="prompt")},
        )
        result = await run_job(
            job, Runtime(client=build_router(config, http), partials=seen.append)
        )
    assert result.envelope.status == "success"
    assert [e.data for e in seen if isinstance(e, PartialAnswer)] == [ANSWER]
    assert any("did not stream" in w for w in result.envelope.warnings)
    assert b'"stream":true' in server.requests[0]
