"""The embedded redis-server: persistence across restarts, one server per data dir."""

from __future__ import annotations

import socket
from pathlib import Path

import pytest
from redis.asyncio import Redis

from app.redis_server import EmbeddedRedis, EmbeddedRedisError
from app.store import connect
from tests.both import Store
from tests.store.helpers import submit


async def test_queued_jobs_survive_a_restart_of_the_embedded_redis(tmp_path: Path) -> None:
    server = await EmbeddedRedis(tmp_path).astart()
    try:
        client = connect(server.url)
        store = Store(client)
        ids = [(await submit(store)).id for _ in range(3)]
        await store.aclose()
        await client.aclose()
    finally:
        await server.astop()
    assert not server.running

    async with EmbeddedRedis(tmp_path) as restarted:
        client = connect(restarted.url)
        try:
            store = Store(client)
            assert (await store.queue_stats())[0] == 3
            claimed = [c for _ in ids for c in await store.claim("w1")]
            assert [c.job_id for c in claimed] == ids
        finally:
            await store.aclose()
            await client.aclose()


async def test_the_server_is_loopback_only_with_aof_and_no_rdb(tmp_path: Path) -> None:
    async with EmbeddedRedis(tmp_path) as server:
        assert server.redacted_url.startswith("redis://:***@127.0.0.1:")
        client = Redis.from_url(server.url, decode_responses=True)
        try:
            config = await client.config_get("*")
        finally:
            await client.aclose()
    assert config["bind"] == "127.0.0.1"
    assert config["protected-mode"] == "yes"
    assert config["appendonly"] == "yes"
    assert config["appendfsync"] == "everysec"
    assert config["save"] == ""
    assert config["dir"] == str((tmp_path / "redis").resolve())
    assert (tmp_path / "redis" / "appendonly.aof").exists()


def test_a_second_server_on_the_same_data_dir_is_refused(tmp_path: Path) -> None:
    with EmbeddedRedis(tmp_path), pytest.raises(EmbeddedRedisError, match="another redis-server"):
        EmbeddedRedis(tmp_path).start()


def test_a_server_that_cannot_start_reports_its_log(tmp_path: Path) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        with pytest.raises(EmbeddedRedisError, match=r"(?s)did not start.*Address already in use"):
            EmbeddedRedis(tmp_path, port=port, start_timeout_s=5).start()


def test_stop_is_idempotent(tmp_path: Path) -> None:
    server = EmbeddedRedis(tmp_path).start()
    server.stop()
    server.stop()

    with pytest.raises(EmbeddedRedisError):
        _ = server.url
