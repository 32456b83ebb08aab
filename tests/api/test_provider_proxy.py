"""Jobs whose model sits behind a forward proxy, through the HTTP API as an operator runs
it: the provider from ``OPENAI_BASE_URL`` (or a providers file), the proxy from
``HTTP_PROXY``/``NO_PROXY`` (or the file's ``proxy``).

The model is the simulator on loopback, named ``provider.test``: a host only the proxy
(tests/forwardproxy.py) can resolve, so a job that succeeds went through it.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import httpx
import pytest

from app.assembly import api_app
from app.core.wire import codes
from tests.forwardproxy import ForwardProxy
from tests.service import finished, scripted, serve, settings_for

HOST = "provider.test"
VARIABLES = (
    "HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY", "NO_PROXY", "REPROMPT_PROVIDERS",
    "OPENAI_API_KEY", "OPENAI_BASE_URL", "OPENAI_MODEL", "ANTHROPIC_API_KEY",
    "ANTHROPIC_BASE_URL",
)  # fmt: skip


@pytest.fixture(autouse=True)
def clean_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in VARIABLES:
        monkeypatch.delenv(name, raising=False)
        monkeypatch.delenv(name.lower(), raising=False)


@pytest.fixture
def proxy() -> Iterator[ForwardProxy]:
    with ForwardProxy.in_thread({HOST: "127.0.0.1"}) as running:
        yield running


@pytest.fixture
def behind_proxy(sim_url: str) -> str:
    """The simulator's OpenAI root as only the proxy can reach it."""
    return f"http://{HOST}:{urlsplit(sim_url).port}/v1"


@contextmanager
def service(redis_url: str, data_dir: Path) -> Iterator[str]:
    """The API and its worker, configured from the environment (no providers handed in)."""
    settings = settings_for(redis_url, data_dir, key_prefix=f"px{uuid.uuid4().hex[:10]}")
    with serve(api_app(settings, embedded_worker=True)) as url:
        yield url


def run_job(url: str, task: str) -> dict[str, Any]:
    # The test's own client ignores the proxy variables: they are for the service.
    with httpx.Client(base_url=url, timeout=30.0, trust_env=False) as http:
        submitted = http.post("/v1/jobs", json=scripted(task, ["ok"]))
        assert submitted.status_code == 202, submitted.text
        return finished(http, submitted.json()["id"])


def test_a_job_reaches_a_provider_only_the_proxy_in_http_proxy_can_reach(
    monkeypatch: pytest.MonkeyPatch,
    proxy: ForwardProxy,
    behind_proxy: str,
    redis_url: str,
    data_dir: Path,
) -> None:
    monkeypatch.setenv("OPENAI_BASE_URL", behind_proxy)
    monkeypatch.setenv("OPENAI_MODEL", "sim-model")
    monkeypatch.setenv("HTTP_PROXY", proxy.url)
    with service(redis_url, data_dir) as url:
        job = run_job(url, "Capital of Chile via the proxy")
    assert job["status"] == "succeeded", job
    assert job["result"]["execution"]["provider"] == "openai"
    assert f"POST {behind_proxy}/chat/completions" in proxy.seen


def test_no_proxy_sends_the_provider_straight(
    monkeypatch: pytest.MonkeyPatch,
    proxy: ForwardProxy,
    sim_url: str,
    redis_url: str,
    data_dir: Path,
) -> None:
    monkeypatch.setenv("OPENAI_BASE_URL", f"{sim_url}/v1")
    monkeypatch.setenv("OPENAI_MODEL", "sim-model")
    monkeypatch.setenv("HTTP_PROXY", proxy.url)
    monkeypatch.setenv("NO_PROXY", f"example.org,{urlsplit(sim_url).hostname}")
    with service(redis_url, data_dir) as url:
        job = run_job(url, "Capital of Peru past the proxy")
    assert job["status"] == "succeeded", job
    assert job["result"]["execution"]["provider"] == "openai"
    assert proxy.seen == []


def test_a_provider_proxy_in_the_providers_file_carries_its_calls(
    monkeypatch: pytest.MonkeyPatch,
    proxy: ForwardProxy,
    behind_proxy: str,
    redis_url: str,
    data_dir: Path,
    tmp_path: Path,
) -> None:
    providers = tmp_path / "providers.toml"
    providers.write_text(
        f'default = "sim-model"\n'
        f'[providers.corp]\nkind = "openai"\nbase_url = "{behind_proxy}"\n'
        f'proxy = "{proxy.url}"\n'
        f'[models.sim-model]\nprovider = "corp"\nstructured = "prompt"\n'
    )
    monkeypatch.setenv("REPROMPT_PROVIDERS", str(providers))
    with service(redis_url, data_dir) as url:
        job = run_job(url, "Capital of Mali via the file's proxy")
    assert job["status"] == "succeeded", job
    assert job["result"]["execution"]["provider"] == "corp"
    assert f"POST {behind_proxy}/chat/completions" in proxy.seen


def test_a_proxy_that_is_down_fails_the_job_as_unavailable_naming_the_proxy(
    monkeypatch: pytest.MonkeyPatch,
    behind_proxy: str,
    redis_url: str,
    data_dir: Path,
) -> None:
    with ForwardProxy.in_thread({}) as gone:
        port = gone.port  # stopped on exit: nothing listens there any more
    monkeypatch.setenv("OPENAI_BASE_URL", behind_proxy)
    monkeypatch.setenv("OPENAI_MODEL", "sim-model")
    monkeypatch.setenv("HTTP_PROXY", f"http://ops:t0ps3cret@127.0.0.1:{port}")
    with service(redis_url, data_dir) as url:
        job = run_job(url, "Capital of Fiji via a dead proxy")
    result = job["result"]
    assert job["status"] == "failed"
    assert result["error"] == codes.LLM_UNAVAILABLE
    assert f"cannot reach the proxy at 127.0.0.1:{port}" in result["detail"]
    assert "t0ps3cret" not in str(job)
