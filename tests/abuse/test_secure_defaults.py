"""An API without keys on a non-loopback address refuses to start (issue #10).

`reprompt api --host 0.0.0.0` with no ``REPROMPT_API_KEYS`` used to serve every job to
anyone who could reach it, and said nothing. Now it refuses, says why and what to set,
unless ``--insecure-no-auth`` (``REPROMPT_INSECURE_NO_AUTH=1``) says a proxy in front
authenticates callers. Loopback stays open by default.
"""

from __future__ import annotations

import hashlib
import os
import signal
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path

import httpx
import pytest

from app.child import free_loopback_port
from app.settings import Settings, is_loopback
from tests.waiting import sync_until

ROOT = Path(__file__).resolve().parents[2]
NOWHERE = "http://127.0.0.1:9/v1"  # a provider that is configured but never called here


def _env(tmp_path: Path, **extra: str) -> dict[str, str]:
    env = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith(("REPROMPT_", "OPENAI_", "ANTHROPIC_", "REDIS_"))
    }
    return env | {
        "PYTHONUNBUFFERED": "1",
        "REPROMPT_DATA_DIR": str(tmp_path / "data"),
        "OPENAI_BASE_URL": NOWHERE,
        **extra,
    }


def _reprompt(*args: str, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "app.cli", *args],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        check=False,
    )


@pytest.mark.parametrize("command", ["api", "serve"])
def test_no_keys_on_a_public_address_refuses_to_start_and_says_what_to_set(
    command: str, tmp_path: Path
) -> None:
    proc = _reprompt(
        command, "--host", "0.0.0.0", "--port", str(free_loopback_port()), env=_env(tmp_path)
    )
    assert proc.returncode == 2, proc.stderr
    said = proc.stderr
    assert "without authentication" in said
    assert "0.0.0.0" in said
    for remedy in ("REPROMPT_API_KEYS", "--insecure-no-auth", "REPROMPT_INSECURE_NO_AUTH=1"):
        assert remedy in said
    # It refused before starting anything: no embedded redis-server was left behind.
    assert not (tmp_path / "data" / "redis" / "redis.pid").exists()


def test_the_refusal_also_reads_the_host_from_the_environment(tmp_path: Path) -> None:
    proc = _reprompt("api", env=_env(tmp_path, REPROMPT_HOST="::"))
    assert proc.returncode == 2, proc.stderr
    assert "REPROMPT_API_KEYS" in proc.stderr


class Running:
    def __init__(self, proc: subprocess.Popen[str], port: int) -> None:
        self.proc, self.port = proc, port

    def output(self) -> str:
        self.proc.send_signal(signal.SIGTERM)
        out, _ = self.proc.communicate(timeout=60)
        return out


Starter = Callable[..., Running]


@pytest.fixture
def start(tmp_path: Path) -> Iterator[Starter]:
    """``start(*args, **env)``: ``reprompt *args`` on 0.0.0.0, once it answers /healthz."""
    started: list[subprocess.Popen[str]] = []

    def run(*args: str, **env: str) -> Running:
        port = free_loopback_port()
        proc = subprocess.Popen(
            [sys.executable, "-m", "app.cli", *args, "--host", "0.0.0.0", "--port", str(port)],
            cwd=ROOT,
            env=_env(tmp_path, **env),
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )
        started.append(proc)

        def healthy() -> bool:
            assert proc.poll() is None, proc.communicate()[0]
            try:
                return httpx.get(f"http://127.0.0.1:{port}/healthz", timeout=2).status_code == 200
            except httpx.TransportError:
                return False

        sync_until(healthy, what="the API to start", every=0.1)
        return Running(proc, port)

    try:
        yield run
    finally:
        for proc in started:
            if proc.poll() is None:
                proc.kill()
                proc.wait(timeout=30)


def test_insecure_no_auth_starts_open_and_warns(start: Starter) -> None:
    running = start("api", "--insecure-no-auth")
    jobs = httpx.get(f"http://127.0.0.1:{running.port}/v1/jobs", timeout=10)
    assert jobs.status_code == 200  # open, as asked
    assert "WITHOUT authentication" in running.output()


def test_the_environment_equivalent_of_insecure_no_auth_is_honoured(start: Starter) -> None:
    running = start("api", REPROMPT_INSECURE_NO_AUTH="1")
    assert "WITHOUT authentication" in running.output()


def test_with_api_keys_a_public_address_starts_and_requires_them(start: Starter) -> None:
    digest = hashlib.sha256(b"a-real-secret").hexdigest()
    running = start("api", REPROMPT_API_KEYS=f"ops:{digest}")
    url = f"http://127.0.0.1:{running.port}/v1/jobs"
    assert httpx.get(url, timeout=10).status_code == 401
    authorized = {"authorization": "Bearer a-real-secret"}
    assert httpx.get(url, headers=authorized, timeout=10).status_code == 200
    assert "WITHOUT authentication" not in running.output()


@pytest.mark.parametrize(
    "host", ["127.0.0.1", "127.1.2.3", "localhost", "LOCALHOST.", "::1", "[::1]"]
)
def test_loopback_stays_open_by_default(host: str) -> None:
    assert is_loopback(host)
    assert Settings(host=host).exposed_without_auth() is None


@pytest.mark.parametrize("host", ["0.0.0.0", "::", "", "10.1.2.3", "192.168.0.7", "api.internal"])
def test_any_other_address_needs_keys_or_the_explicit_opt_out(host: str) -> None:
    assert not is_loopback(host)
    assert "REPROMPT_API_KEYS" in (Settings(host=host).exposed_without_auth() or "")
    assert Settings(host=host, insecure_no_auth=True).exposed_without_auth() is None
    digest = hashlib.sha256(b"k").hexdigest()
    assert Settings(host=host, api_keys=[f"t:{digest}"]).exposed_without_auth() is None
