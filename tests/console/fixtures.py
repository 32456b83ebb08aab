"""The console's fixtures (a plugin: tests/conftest.py's ``pytest_plugins``).

* ``console`` — a service for the console's tests (session): tenants ``alice`` and
  ``bob`` and an operator key, an in-process worker on the simulator, caps wide enough
  for a 1 MB input, its own key prefix on the shared redis-server.
* ``signed_in(key)`` — an ``httpx.Client`` with a console session of that key.
* ``chromium`` — Debian's chromium driven by Playwright (tests/console/browser.py).
"""

from __future__ import annotations

import base64
import hashlib
import re
import uuid
from collections.abc import Callable, Iterator
from contextlib import ExitStack
from pathlib import Path
from typing import Any

import httpx
import pytest

from app.assembly import api_app
from app.providers.config import ModelConfig, ProviderConfig, ProvidersConfig
from app.settings import Settings
from tests.service import KEYS, api_keys, serve, settings_for

OPERATOR_KEY = "operator-secret-key"
WEBHOOK_SECRET = "whsec_" + base64.b64encode(b"console-callback-secret-32-bytes").decode()
SIGNINS_PER_MINUTE = 1000  # the rate limit's own test starts an instance with a small one


@pytest.fixture(scope="session")
def priced(sim_url: str) -> ProvidersConfig:
    """The simulator as a model with a price, so pages show costs."""
    model = ModelConfig(
        provider="sim", structured="prompt", input_usd_per_mtok=2.5, output_usd_per_mtok=10.0
    )
    return ProvidersConfig(
        default="sim-model",
        providers={"sim": ProviderConfig(kind="openai", base_url=f"{sim_url}/v1")},
        models={"sim-model": model},
    )


@pytest.fixture(scope="session")
def console(redis_url: str, data_dir: Path, priced: ProvidersConfig) -> Iterator[str]:
    app = api_app(console_settings(redis_url, data_dir), embedded_worker=True, providers=priced)
    with serve(app) as url:
        yield url


def console_settings(redis_url: str, data_dir: Path, **overrides: Any) -> Settings:
    values: dict[str, Any] = {
        "api_keys": api_keys(),
        "console_operator_keys": [hashlib.sha256(OPERATOR_KEY.encode()).hexdigest()],
        "key_prefix": f"c{uuid.uuid4().hex[:10]}",
        "max_body_bytes": 4_000_000,
        "max_input_bytes": 1_200_000,
        "max_task_chars": 20_000,
        "max_turns": 50,
        "max_return_retries": 20,
        "console_signins_per_minute": SIGNINS_PER_MINUTE,
        # Callbacks to receivers on loopback (the redelivery test).
        "outbound_allow": ["127.0.0.1"],
        "callback_backoff_ms": 20,
        "callback_max_backoff_s": 1,
        "webhook_secrets": f"alice={WEBHOOK_SECRET}",
        **overrides,
    }
    return settings_for(redis_url, data_dir, **values)


SignedIn = Callable[[str], httpx.Client]


@pytest.fixture
def signed_in(console: str) -> Iterator[SignedIn]:
    """``signed_in(key)``: a client with a console session (cookie) of ``key``."""
    with ExitStack() as stack:

        def sign_in(key: str) -> httpx.Client:
            http = stack.enter_context(httpx.Client(base_url=console, timeout=30.0))
            response = http.post("/console/signin", data={"key": key})
            assert response.status_code == 303, response.text
            assert response.headers["location"] == "/console/jobs"
            return http

        yield sign_in


def csrf_of(html: str) -> str:
    """The CSRF token of a console page's forms."""
    found = re.search(r'name="csrf" value="([^"]+)"', html)
    assert found is not None, "no CSRF field on the page"
    return found.group(1)


def api(console: str, tenant: str) -> httpx.Client:
    """The /v1 API of the console's service, as ``tenant``."""
    return httpx.Client(
        base_url=console, headers={"authorization": f"Bearer {KEYS[tenant]}"}, timeout=30.0
    )
