"""A real redis-server (the embedded one) for the whole session; a fresh key prefix per test."""

from __future__ import annotations

import secrets
from collections.abc import AsyncIterator, Callable, Iterator
from typing import Any

import pytest
from redis.asyncio import Redis

from app.redis_server import EmbeddedRedis
from tests.both import Store

StoreFactory = Callable[..., Store]


@pytest.fixture(scope="session")
def redis_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[EmbeddedRedis]:
    with EmbeddedRedis(tmp_path_factory.mktemp("store")) as server:
        yield server


@pytest.fixture
async def redis(redis_server: EmbeddedRedis) -> AsyncIterator[Redis]:
    client = Redis.from_url(redis_server.url, max_connections=1000)
    yield client
    await client.aclose()


@pytest.fixture
def prefix() -> str:
    # Tests share one server; a prefix of their own keeps them apart without FLUSHDB.
    return "t" + secrets.token_hex(6)


@pytest.fixture
async def make_store(redis: Redis, prefix: str) -> AsyncIterator[StoreFactory]:
    made: list[Store] = []

    def make(**options: Any) -> Store:
        made.append(Store(redis, prefix=prefix, **options))
        return made[-1]

    yield make
    for store in made:
        await store.aclose()  # its pub/sub subscription


@pytest.fixture
def store(make_store: StoreFactory) -> Store:
    return make_store()
