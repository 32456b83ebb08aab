"""The store over TLS (``rediss://``): the batcher's pipelines and the hub's subscription
on connections redis-py opened with a TLS handshake. The embedded
redis-server speaks plain TCP, so a TLS-terminating proxy on loopback stands in front of
it (the certificate in ``tls/`` is a self-signed one for 127.0.0.1, for these tests only).
"""

from __future__ import annotations

import asyncio
import contextlib
import ssl
from collections.abc import AsyncIterator
from pathlib import Path
from urllib.parse import urlsplit

import pytest
from redis.asyncio import Redis
from redis.exceptions import ResponseError

from app.redis_server import EmbeddedRedis
from app.store import JobStore, Leases
from app.store.batching import Batcher
from app.store.connection import connect
from tests.store.helpers import SPEC, SUCCESS, subscribed

TLS = Path(__file__).with_name("tls")


@contextlib.asynccontextmanager
async def tls_proxy(upstream_port: int) -> AsyncIterator[int]:
    """A TLS server on loopback that pipes every connection to ``upstream_port``."""
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    context.load_cert_chain(TLS / "cert.pem", TLS / "key.pem")
    pipes: set[asyncio.Task[None]] = set()

    async def pipe(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            while data := await reader.read(65536):
                writer.write(data)
                await writer.drain()
        except (ConnectionError, ssl.SSLError):
            pass
        finally:
            writer.close()

    async def serve(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        up_reader, up_writer = await asyncio.open_connection("127.0.0.1", upstream_port)
        for task in (pipe(reader, up_writer), pipe(up_reader, writer)):
            pipes.add(asyncio.ensure_future(task))

    server = await asyncio.start_server(serve, "127.0.0.1", 0, ssl=context)
    try:
        yield server.sockets[0].getsockname()[1]
    finally:
        server.close()
        for task in pipes:
            task.cancel()
        await asyncio.gather(*pipes, return_exceptions=True)


@pytest.fixture
async def tls_url(redis_server: EmbeddedRedis) -> AsyncIterator[str]:
    """The embedded redis-server's URL (password included) as ``rediss://`` via the proxy."""
    plain = urlsplit(redis_server.url)
    async with tls_proxy(redis_server.port) as port:
        yield f"rediss://:{plain.password}@127.0.0.1:{port}/0?ssl_ca_certs={TLS / 'cert.pem'}"


async def test_the_batcher_pipelines_over_tls(tls_url: str, prefix: str) -> None:
    client = connect(tls_url)
    assert isinstance(client, Redis)
    batcher = Batcher(client)
    try:
        keys = [f"{prefix}:{i}" for i in range(300)]
        await asyncio.gather(*(batcher.call("SET", key, i) for i, key in enumerate(keys)))
        replies = await asyncio.gather(*(batcher.call("GET", key) for key in keys))
        pair: list[object] = await asyncio.gather(
            batcher.call("INCR", keys[0] + ":n"), batcher.call("GET", keys[1])
        )
        await batcher.call("SET", keys[0] + ":text", "x")
        with pytest.raises(ResponseError, match="not an integer"):
            await batcher.call("INCR", keys[0] + ":text")
    finally:
        await batcher.aclose()
        await client.aclose()
    assert replies == [str(i).encode() for i in range(len(keys))]  # each its own, in order
    assert pair == [1, b"1"]
    # An error reply raises in its own caller only (above), as redis-py raises it.


async def test_a_job_goes_round_over_tls(tls_url: str, redis: Redis, prefix: str) -> None:
    """Submit (a script through the batcher), the worker's wake-up and the long-poll's
    end (the hub's subscription), claim and commit, all over TLS."""
    client = connect(tls_url)
    jobs, leases = JobStore(client, prefix=prefix), Leases(client, prefix=prefix)
    try:
        idle = asyncio.ensure_future(leases.wait_for_work(10))
        await subscribed(redis, leases.channels["work"])
        job, created = await jobs.submit(tenant="acme", spec=SPEC)
        assert created
        assert await asyncio.wait_for(idle, 5) == 0
        [lease] = await leases.claim("w1")
        assert lease.job_id == job.id
        poll = asyncio.ensure_future(jobs.wait(job.id, tenant="acme", wait_ms=10_000))
        await subscribed(redis, jobs.channels["done"])
        await leases.complete(lease, envelope=SUCCESS, history=(), transcript=())
        view = await asyncio.wait_for(poll, 5)
    finally:
        await jobs.aclose()
        await leases.aclose()
        await client.aclose()
    assert view is not None
    assert view.status == "succeeded"
    assert view.result.data == {"greeting": "hi"}
