"""A Redis that may evict live jobs is refused at start-up (issue #10).

An external Redis with ``maxmemory-policy allkeys-lru`` silently dropped queued jobs when
it filled up. API and workers now read the policy when they start (``CONFIG GET``, else
``INFO memory`` where managed Redis disables CONFIG) and refuse ``allkeys-*``; they accept
``noeviction``, and ``volatile-*`` with a warning (only finished jobs and Idempotency-Keys
carry a TTL); a policy that cannot be read at all is warned about.
"""

from __future__ import annotations

import contextlib
import logging
import os
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from pydantic import SecretStr
from redis import Redis

from app.assembly import open_parts
from app.child import free_loopback_port
from app.providers.config import ModelConfig, ProviderConfig, ProvidersConfig
from app.redis_server import find_redis_server
from app.settings import Settings
from app.store.eviction import EvictingRedis
from tests.waiting import sync_until

ROOT = Path(__file__).resolve().parents[2]
NOWHERE = ProvidersConfig(
    providers={"p": ProviderConfig(kind="openai", base_url="http://127.0.0.1:9/v1")},
    models={"m": ModelConfig(provider="p")},
)

StartRedis = Callable[..., str]


@pytest.fixture
def redis_with(tmp_path: Path) -> Iterator[StartRedis]:
    """``redis_with("--maxmemory-policy", "allkeys-lru")``: a plain redis-server's URL."""
    started: list[subprocess.Popen[bytes]] = []

    def start(*flags: str) -> str:
        port = free_loopback_port()
        with (tmp_path / f"redis-{port}.log").open("wb") as log:
            process = subprocess.Popen(
                [
                    *(str(find_redis_server()), "--port", str(port), "--bind", "127.0.0.1"),
                    *("--save", "", "--appendonly", "no", "--dir", str(tmp_path), *flags),
                ],
                stdout=log,
                stderr=subprocess.STDOUT,
            )
        started.append(process)
        client = Redis(port=port)

        def answers() -> bool:
            assert process.poll() is None, (tmp_path / f"redis-{port}.log").read_text()
            with contextlib.suppress(Exception):
                return bool(client.ping())
            return False

        sync_until(answers, what="redis-server to answer")
        client.close()
        return f"redis://127.0.0.1:{port}/0"

    try:
        yield start
    finally:
        for process in started:
            process.terminate()
            process.wait(timeout=10)


def _settings(url: str) -> Settings:
    return Settings(redis_url=SecretStr(url), worker_metrics_port=0)


async def test_allkeys_lru_is_refused_naming_what_to_set(redis_with: StartRedis) -> None:
    url = redis_with("--maxmemory-policy", "allkeys-lru")
    with pytest.raises(EvictingRedis) as refused:
        async with open_parts(_settings(url), providers=NOWHERE):
            pytest.fail("started on an evicting Redis")
    assert "maxmemory-policy is allkeys-lru" in refused.value.detail
    assert "noeviction" in refused.value.detail


async def test_with_config_disabled_the_policy_is_read_from_info(redis_with: StartRedis) -> None:
    # As on managed Redis, where CONFIG is renamed away.
    url = redis_with("--maxmemory-policy", "allkeys-lfu", "--rename-command", "CONFIG", "")
    with pytest.raises(EvictingRedis, match="allkeys-lfu"):
        async with open_parts(_settings(url), providers=NOWHERE):
            pytest.fail("started on an evicting Redis")


async def test_noeviction_starts_quietly(
    redis_with: StartRedis, caplog: pytest.LogCaptureFixture
) -> None:
    url = redis_with("--maxmemory-policy", "noeviction")
    async with open_parts(_settings(url), providers=NOWHERE):
        pass
    assert "maxmemory-policy" not in caplog.text


async def test_volatile_policies_start_with_a_warning(
    redis_with: StartRedis, caplog: pytest.LogCaptureFixture
) -> None:
    url = redis_with("--maxmemory-policy", "volatile-lru")
    with caplog.at_level(logging.WARNING):
        async with open_parts(_settings(url), providers=NOWHERE):
            pass
    assert "maxmemory-policy is volatile-lru" in caplog.text
    assert "finished jobs" in caplog.text


async def test_a_policy_that_cannot_be_read_is_warned_about(
    redis_with: StartRedis, caplog: pytest.LogCaptureFixture
) -> None:
    url = redis_with(
        "--maxmemory-policy", "noeviction", "--rename-command", "CONFIG", "",
        "--rename-command", "INFO", "",
    )  # fmt: skip
    with caplog.at_level(logging.WARNING):
        async with open_parts(_settings(url), providers=NOWHERE):
            pass
    assert "could not read the Redis server's maxmemory-policy" in caplog.text


def _run(command: str, url: str, tmp_path: Path) -> subprocess.CompletedProcess[str]:
    env = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith(("REPROMPT_", "OPENAI_", "ANTHROPIC_", "REDIS_"))
    }
    env |= {
        "REPROMPT_REDIS_URL": url,
        "REPROMPT_DATA_DIR": str(tmp_path / "data"),
        "REPROMPT_WORKER_METRICS_PORT": "0",
        "REPROMPT_PORT": str(free_loopback_port()),
        "OPENAI_BASE_URL": "http://127.0.0.1:9/v1",
    }
    return subprocess.run(
        [sys.executable, "-m", "app.cli", command],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        check=False,
    )


@pytest.mark.parametrize("command", ["worker", "api"])
def test_worker_and_api_processes_refuse_an_allkeys_redis(
    command: str, redis_with: StartRedis, tmp_path: Path
) -> None:
    url = redis_with("--maxmemory-policy", "allkeys-lru")
    proc = _run(command, url, tmp_path)  # refused at start-up: it exits, serving nothing
    assert proc.returncode != 0
    assert "maxmemory-policy is allkeys-lru" in proc.stderr
    assert "maxmemory-policy noeviction" in proc.stderr
    assert "worker" not in command or proc.returncode == 2
