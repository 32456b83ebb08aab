"""A real redis-server (the embedded one) for the whole session; a fresh key prefix per test."""

from __future__ import annotations

import secrets
from collections.abc import AsyncIterator, Callable, Iterator
from typing import Any

import pytest
from redis.asyncio import Redis

from app.redis_server import EmbeddedRedis
from app.store import connect
from tests.both import Store

StoreFactory = Callable[..., Store]


@pytest.fixture(scope="session")
def redis_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[EmbeddedRedis]:
    with EmbeddedRedis(tmp_path_factory.mktemp("store")) as server:
        yield server


@pytest.fixture
async def redis(redis_server: EmbeddedRedis) -> AsyncIterator[Redis]:
    client = connect(redis_server.url)
    yield client
    await client.aclose()


@pytest.fixture
def prefix() -> str:
    # Tests share one server; a prefix of their own keeps them apart without FLUSHDB.
    return "t" + secrets.token_hex(6)


@pytest.fixture
def make_store(redis: Redis, prefix: str) -> StoreFactory:
    def make(**options: Any) -> Store:
        return Store(redis, prefix=prefix, **options)

    return make


@pytest.fixture
def store(make_store: StoreFactory) -> Store:
    return make_store()
