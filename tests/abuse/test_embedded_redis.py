"""The embedded redis-server is private to its owner and bounded (issue #10).

It had no password (any local user could read or rewrite every job on its loopback port),
its AOF was world-readable, and it had no memory limit. Now: a random password per start,
passed on stdin (never in ``ps`` or on disk) and never logged; data dir 0700 and files
0600; ``maxmemory`` with ``noeviction``: a full server refuses writes and loses nothing.
"""

from __future__ import annotations

import contextlib
import logging
import os
import stat
import subprocess
import sys
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import httpx
import pytest
from redis.asyncio import Redis
from redis.exceptions import AuthenticationError, OutOfMemoryError, ResponseError

from app.assembly import open_parts
from app.child import free_loopback_port
from app.providers.config import ModelConfig, ProviderConfig, ProvidersConfig
from app.redis_server import DEFAULT_MAXMEMORY_BYTES, EmbeddedRedis, EmbeddedRedisError
from app.settings import Settings
from reprompt_sim.server import SimConfig, serve_in_background
from tests.waiting import sync_until

ROOT = Path(__file__).resolve().parents[2]

NOWHERE = ProvidersConfig(
    providers={"p": ProviderConfig(kind="openai", base_url="http://127.0.0.1:9/v1")},
    models={"m": ModelConfig(provider="p")},
)


@pytest.fixture
async def server(tmp_path: Path) -> AsyncIterator[EmbeddedRedis]:
    async with EmbeddedRedis(tmp_path) as running:
        yield running


def _password(server: EmbeddedRedis) -> str:
    password = urlsplit(server.url).password
    assert password
    return password


async def test_a_client_without_the_password_is_refused(server: EmbeddedRedis) -> None:
    anonymous = Redis(host="127.0.0.1", port=server.port)
    try:
        with pytest.raises((AuthenticationError, ResponseError), match=r"(?i)auth"):
            await anonymous.get("anything")
    finally:
        await anonymous.aclose()
    owner = Redis.from_url(server.url)
    try:
        assert await owner.ping()
    finally:
        await owner.aclose()


async def test_every_start_has_a_new_strong_password(tmp_path: Path) -> None:
    seen = set()
    for _ in range(2):
        async with EmbeddedRedis(tmp_path) as server:
            seen.add(_password(server))
    assert len(seen) == 2
    assert all(len(password) >= 32 for password in seen)


async def test_the_password_is_not_on_the_command_line_or_on_disk(server: EmbeddedRedis) -> None:
    password = _password(server).encode()
    client = Redis.from_url(server.url)
    try:
        await client.set("k", "v")
        await client.bgrewriteaof()
    finally:
        await client.aclose()
    pid = int((server.dir / "redis.pid").read_text())
    seen = {"cmdline": _read(f"/proc/{pid}/cmdline"), "environ": _read(f"/proc/{pid}/environ")}
    for root, _, files in os.walk(server.data_dir):
        seen |= {name: _read(os.path.join(root, name)) for name in files}
    assert "appendonly.aof" in seen
    assert [where for where, data in seen.items() if password in data] == []


def _read(path: str) -> bytes:
    with open(path, "rb") as file:
        return file.read()


async def test_the_data_dir_is_0700_and_its_files_0600(server: EmbeddedRedis) -> None:
    client = Redis.from_url(server.url)
    try:
        await client.set("job", "a task and its answer")
        await client.bgrewriteaof()
    finally:
        await client.aclose()
    assert stat.S_IMODE(os.stat(server.dir).st_mode) == 0o700
    modes = {
        name: stat.S_IMODE(os.stat(os.path.join(root, name)).st_mode)
        for root, _, files in os.walk(server.dir)
        for name in files
    }
    assert "appendonly.aof" in modes
    assert "redis-server.log" in modes
    assert {name: mode for name, mode in modes.items() if mode != 0o600} == {}


async def test_what_an_older_version_left_readable_is_made_private(tmp_path: Path) -> None:
    old = tmp_path / "redis"
    old.mkdir(mode=0o755)
    old.chmod(0o755)
    aof = old / "appendonly.aof"
    aof.write_bytes(b"")
    aof.chmod(0o644)
    async with EmbeddedRedis(tmp_path):
        assert stat.S_IMODE(old.stat().st_mode) == 0o700
        assert stat.S_IMODE(aof.stat().st_mode) == 0o600


async def test_it_is_bounded_by_maxmemory_with_noeviction(server: EmbeddedRedis) -> None:
    client = Redis.from_url(server.url, decode_responses=True)
    try:
        config = await client.config_get("maxmemory*")
    finally:
        await client.aclose()
    assert int(str(config["maxmemory"])) == DEFAULT_MAXMEMORY_BYTES == 1024**3
    assert config["maxmemory-policy"] == "noeviction"


async def test_when_full_it_refuses_writes_and_evicts_nothing(tmp_path: Path) -> None:
    async with EmbeddedRedis(tmp_path, maxmemory_bytes=8 * 1024 * 1024) as server:
        client = Redis.from_url(server.url)
        try:
            stored = await _fill(client)
            assert stored > 10
            assert await client.exists(*[f"job:{i}" for i in range(stored)]) == stored
        finally:
            await client.aclose()


async def _fill(client: Redis) -> int:
    """Store 64 KiB values until the server refuses one; how many it took."""
    for stored in range(1000):
        try:
            await client.set(f"job:{stored}", b"x" * 64 * 1024)
        except OutOfMemoryError:
            return stored
    pytest.fail("8 MiB of maxmemory held 64 MB")


async def test_serve_passes_its_maxmemory_setting_and_never_logs_the_password(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG)
    settings = Settings(data_dir=tmp_path, embedded_redis_maxmemory_mb=100)
    async with open_parts(settings, providers=NOWHERE, embedded_redis=True) as parts:
        config = await parts.redis.config_get("maxmemory")
        password = await parts.redis.config_get("requirepass")
    assert int(str(config["maxmemory"])) == 100 * 1024 * 1024
    secret = str(password["requirepass"])
    assert len(secret) >= 32
    assert "embedded redis-server on redis://:***@127.0.0.1:" in caplog.text
    assert secret not in caplog.text


async def test_a_full_store_refuses_a_submission_as_503_store_full(tmp_path: Path) -> None:
    from app.api.problems import render
    from app.store import JobStore, StoreFull

    async with EmbeddedRedis(tmp_path, maxmemory_bytes=8 * 1024 * 1024) as server:
        client = Redis.from_url(server.url)
        store = JobStore(client)
        try:
            await _fill(client)
            spec = {"task": "x", "input": "y" * 65536, "signature": "{a :int}"}
            with pytest.raises(StoreFull) as full:  # right away, or after a few that fit
                await _submit_until_refused(store, spec)
        finally:
            await store.aclose()
            await client.aclose()
    answer = render(full.value, "/v1/jobs")
    assert answer.status_code == 503
    assert answer.headers["retry-after"] == "30"
    assert b'"code":"store-full"' in answer.body


async def _submit_until_refused(store: Any, spec: dict[str, Any]) -> None:
    for _ in range(200):
        await store.submit(tenant="acme", spec=spec)


# -- a crash of `reprompt serve` (#29) ----------------------------------------------------


def _serve(tmp_path: Path, providers: Path) -> tuple[subprocess.Popen[bytes], str]:
    """``reprompt serve`` on a free loopback port over ``tmp_path/data``; once it is ready."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("REPROMPT_", "REDIS_"))}
    env |= {
        "PYTHONUNBUFFERED": "1",
        "REPROMPT_DATA_DIR": str(tmp_path / "data"),
        "REPROMPT_PROVIDERS": str(providers),
        "REPROMPT_LEASE_MS": "3000",
        "REPROMPT_HEARTBEAT_MS": "500",
        "REPROMPT_REAP_INTERVAL_MS": "500",
    }
    port = free_loopback_port()
    with (tmp_path / f"serve-{port}.log").open("wb") as log:  # the child has its own copy
        process = subprocess.Popen(
            [sys.executable, "-m", "app.cli", "serve", "--port", str(port)],
            cwd=ROOT,
            env=env,
            stdout=log,
            stderr=subprocess.STDOUT,
        )
    url = f"http://127.0.0.1:{port}"

    def ready() -> bool | None:
        assert process.poll() is None, (tmp_path / f"serve-{port}.log").read_text()
        with contextlib.suppress(httpx.HTTPError):
            return httpx.get(f"{url}/readyz", timeout=2).status_code == 200 or None
        return None

    sync_until(ready, what="reprompt serve to be ready")
    return process, url


def _gone(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] == "Z"


@pytest.mark.slow
def test_after_serve_is_sigkilled_mid_load_the_next_start_runs_every_job(
    tmp_path: Path,
) -> None:
    providers = tmp_path / "providers.toml"
    with serve_in_background(SimConfig(seed=3, latency_ms=300)) as sim_url:
        providers.write_text(
            f'[providers.sim]\nkind = "openai"\nbase_url = "{sim_url}/v1"\n\n'
            '[models.sim-model]\nprovider = "sim"\nstructured = "prompt"\n'
        )
        first, url = _serve(tmp_path, providers)
        try:
            body = {"task": "Extract the person.", "signature": "{name :string}"}
            ids = [httpx.post(f"{url}/v1/jobs", json=body).json()["id"] for _ in range(20)]

            def running() -> bool | None:
                jobs = httpx.get(f"{url}/v1/jobs", params={"limit": 100}).json()["jobs"]
                return any(j["status"] == "in_progress" for j in jobs) or None

            sync_until(running, what="jobs in flight")
            redis_pid = int((tmp_path / "data" / "redis" / "redis.pid").read_text())
        finally:
            first.kill()  # SIGKILL: no shutdown hook runs
            first.wait()
        # The next start does not wait for anyone to clean up by hand.
        second, url = _serve(tmp_path, providers)
        try:
            assert _gone(redis_pid)  # the orphan is gone (it died with its parent)

            def ended() -> list[str] | None:
                statuses = [httpx.get(f"{url}/v1/jobs/{i}").json()["status"] for i in ids]
                terminal = ("succeeded", "failed", "cancelled")
                return statuses if all(s in terminal for s in statuses) else None

            statuses = sync_until(ended, what="every job to end after the restart")
            assert len(statuses) == 20  # none lost
            assert statuses.count("succeeded") == 20
        finally:
            second.terminate()
            second.wait(timeout=60)


async def test_a_server_left_by_an_owner_that_is_gone_is_stopped_cleanly_and_replaced(
    tmp_path: Path,
) -> None:
    left = EmbeddedRedis(tmp_path).start()
    try:
        client = Redis.from_url(left.url)
        try:
            await client.set("queued-job", "kept")  # in the AOF only after a clean shutdown
        finally:
            await client.aclose()
        # Its owner is gone: the pid names another process now (another start time).
        (tmp_path / "redis" / "owner").write_text(f"{os.getpid()} 1\n")
        orphan = int((tmp_path / "redis" / "redis.pid").read_text())
        async with EmbeddedRedis(tmp_path) as again:
            assert _gone(orphan)
            client = Redis.from_url(again.url)
            try:
                assert await client.get("queued-job") == b"kept"
            finally:
                await client.aclose()
    finally:
        left.stop()


async def test_a_server_whose_owner_is_alive_is_refused_as_before(tmp_path: Path) -> None:
    async with EmbeddedRedis(tmp_path):
        with pytest.raises(EmbeddedRedisError, match="another redis-server uses"):
            EmbeddedRedis(tmp_path).start()
