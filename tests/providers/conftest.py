"""Fixtures: a scripted loopback provider, one shared httpx client, retries that never sleep."""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator

import httpx
import pytest

from app.providers.http import make_client
from app.providers.retry import set_testing
from tests.providers.upstream import Upstream


@pytest.fixture
def upstream() -> Iterator[Upstream]:
    server = Upstream()
    server.start()
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture
async def http() -> AsyncIterator[httpx.AsyncClient]:
    async with make_client(trust_env=False) as client:
        yield client


@pytest.fixture(autouse=True)
def no_sleeping() -> Iterator[None]:
    """Retry waits are computed and recorded, never slept."""
    set_testing(True)
    try:
        yield
    finally:
        set_testing(False)
