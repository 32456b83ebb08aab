"""A hostile provider's bytes cannot hold a job, grow a worker, or leak past the edge.

The provider client's HTTP/1.1 is aiohttp's (under httpx): a reply's head and header
lines are bounded by its parser, a body is read only up to the call's reply cap, and a
server that dribbles bytes (or sends chunk extensions or trailers without end) runs into
the call's timeout. Each case runs a job through the router against a raw loopback server
and checks that it fails, as ``llm-unavailable`` (retried, then given up), ``llm-timeout``
or ``llm-invalid-output`` (an oversized answer, not retried), that the client hung up,
and that nothing of the hostile bytes reached the job's record.
"""

from __future__ import annotations

import asyncio
import json

import pytest

from app.core.turn.loop import Runtime, run_job
from app.core.wire import codes
from app.core.wire.spec import JobSpec
from app.providers.config import ModelConfig, ProviderConfig, ProvidersConfig
from app.providers.http import make_client
from app.providers.router import build_router
from tests.providers.rawserver import OK_HEAD, RawServer, Script

# Retry waits are computed and recorded, never slept (tests/abuse/conftest.py).
pytestmark = pytest.mark.usefixtures("no_sleeping")

DRIBBLE_TIMEOUT_S = 1.0  # the provider's timeout_s where a dribbling server must run into it
# Elsewhere long enough that only a limit of the parser can end the call, however slow the
# machine: a flood on a loaded host must not turn into a timeout.
LIMIT_TIMEOUT_S = 60.0
MARK = b"HOSTILE-MARK"

JOB = JobSpec.model_validate(
    {"task": "Name a city.", "signature": "{city :string}", "budget": {"maxTurns": 1}}
)


def config(url: str, timeout_s: float) -> ProvidersConfig:
    base = url.removesuffix("/chat/completions")
    return ProvidersConfig(
        providers={
            "p": ProviderConfig(kind="openai", base_url=base, max_attempts=2, timeout_s=timeout_s)
        },
        models={"m": ModelConfig(provider="p", structured="prompt")},
    )


async def flood(writer: asyncio.StreamWriter, piece: bytes, total: int) -> None:
    """Write ``piece`` until ``total`` bytes went out or the client hung up."""
    sent = 0
    while sent < total and not writer.is_closing():
        writer.write(piece)
        sent += len(piece)
        await writer.drain()


async def header_flood(writer: asyncio.StreamWriter, index: int, server: RawServer) -> bool:
    writer.write(OK_HEAD)
    await flood(writer, b"x-" + MARK + b": " + b"a" * 1000 + b"\r\n", 50 * 1024 * 1024)
    return False


async def header_dribble(writer: asyncio.StreamWriter, index: int, server: RawServer) -> bool:
    writer.write(OK_HEAD)
    for _ in range(10_000):
        writer.write(b"x-" + MARK + b": 1\r\n")
        await writer.drain()
        await asyncio.sleep(0.01)
    return False


async def endless_chunk_line(writer: asyncio.StreamWriter, index: int, server: RawServer) -> bool:
    writer.write(OK_HEAD + b"transfer-encoding: chunked\r\n\r\n1;")
    await flood(writer, MARK * 1000, 50 * 1024 * 1024)
    return False


async def giant_chunk(writer: asyncio.StreamWriter, index: int, server: RawServer) -> bool:
    writer.write(OK_HEAD + b"transfer-encoding: chunked\r\n\r\nffffffffffffff\r\n")
    await flood(writer, MARK * 10_000, 200 * 1024 * 1024)
    return False


async def endless_trailers(writer: asyncio.StreamWriter, index: int, server: RawServer) -> bool:
    body = b'{"choices":[{"message":{"role":"assistant","content":"{\\"city\\":\\"Oslo\\"}"}}]}'
    writer.write(
        OK_HEAD + b"transfer-encoding: chunked\r\n\r\n%x\r\n%s\r\n0\r\n" % (len(body), body)
    )
    await flood(writer, b"x-" + MARK + b": 1\r\n", 50 * 1024 * 1024)
    return False


@pytest.mark.parametrize(
    ("script", "code"),
    [
        (header_flood, codes.LLM_UNAVAILABLE),
        (header_dribble, codes.LLM_TIMEOUT),
        (endless_chunk_line, codes.LLM_UNAVAILABLE),
        (giant_chunk, codes.LLM_INVALID_OUTPUT),
        (endless_trailers, codes.LLM_UNAVAILABLE),
    ],
    ids=["header-flood", "header-dribble", "endless-chunk-line", "giant-chunk", "endless-trailers"],
)
async def test_a_hostile_reply_fails_the_call_and_leaves_nothing_behind(
    script: Script, code: str
) -> None:
    async with RawServer(script) as server, make_client(trust_env=False) as http:
        timeout_s = DRIBBLE_TIMEOUT_S if code == codes.LLM_TIMEOUT else LIMIT_TIMEOUT_S
        router = build_router(config(server.url, timeout_s), http)
        result = await run_job(JOB, Runtime(client=router))
        await server.until(lambda s: s.open == 0)  # every hostile connection was dropped
    envelope = result.envelope
    assert envelope.status == "error"
    assert envelope.error == code
    record = json.dumps(envelope.model_dump(mode="json")) + "".join(
        turn.model_dump_json() for turn in result.turns
    )
    assert MARK.decode() not in record
    assert len(record) < 8192
    assert 1 <= len(server.requests) <= 2  # retried at most as configured
