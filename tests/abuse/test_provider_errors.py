"""An upstream auth or configuration failure reaches the tenant as a generic message; the
provider's own words (which may echo a key) go to the operator's log only.

Before: a 401 whose message echoed a key with an unfamiliar prefix (``fk-TOPSECR…``, which
the transport's redaction does not know) was copied into the tenant's envelope and turn.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator
from pathlib import Path

import pytest

from app.core.turn.calling import CONFIG_FAILURE
from app.core.turn.loop import Runtime, run_job
from app.core.wire import codes
from app.core.wire.spec import JobSpec
from app.providers.embedded import open_router
from app.providers.http import make_client
from tests.providers.upstream import Reply, Upstream, one_model

ECHOED = "fk-TOPSECRET-a1b2-c3d4"


@pytest.fixture
def upstream() -> Iterator[Upstream]:
    server = Upstream()
    server.start()
    try:
        yield server
    finally:
        server.stop()


@pytest.mark.parametrize("status", [400, 401, 403, 404])
async def test_a_provider_config_failure_shows_the_tenant_a_generic_message(
    upstream: Upstream, tmp_path: Path, caplog: pytest.LogCaptureFixture, status: int
) -> None:
    message = f"Incorrect API key provided: {ECHOED}. Ask your admin (org acme-internal)."
    upstream.script(Reply(status, {"error": {"message": message, "type": "invalid_request_error"}}))
    spec = JobSpec.model_validate({"task": "x", "signature": "{a :int}", "model": "m"})
    caplog.set_level(logging.WARNING, logger="app.core.turn.calling")
    async with (
        make_client() as http,
        open_router(http, data_dir=tmp_path, config=one_model(upstream.url)) as router,
    ):
        result = await run_job(spec, Runtime(client=router))
    envelope = result.envelope
    assert envelope.error == codes.LLM_CONFIG
    assert envelope.detail is not None
    assert CONFIG_FAILURE in envelope.detail
    (turn,) = result.turns
    assert turn.error_code == codes.LLM_CONFIG
    assert turn.diagnosis == CONFIG_FAILURE
    shown = envelope.model_dump_json() + turn.model_dump_json()
    assert "TOPSECRET" not in shown
    assert "acme-internal" not in shown
    # The operator's log has the provider's words (what the transport kept of them).
    assert "acme-internal" in caplog.text


async def test_other_provider_errors_keep_their_detail(upstream: Upstream, tmp_path: Path) -> None:
    upstream.script(Reply(503, {"error": {"message": "The engine is currently overloaded"}}))
    spec = JobSpec.model_validate({"task": "x", "signature": "{a :int}", "model": "m"})
    config = one_model(upstream.url, max_attempts=1)
    async with (
        make_client() as http,
        open_router(http, data_dir=tmp_path, config=config) as router,
    ):
        result = await run_job(spec, Runtime(client=router))
    assert result.envelope.error == codes.LLM_UNAVAILABLE
    assert result.envelope.detail is not None
    assert "overloaded" in result.envelope.detail
