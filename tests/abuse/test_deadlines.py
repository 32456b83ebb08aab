"""A job that names no deadline gets one (issue #10).

With no ``budget.deadlineMs`` a job against a provider that never answers could run for
about 30 calls × 3 transport attempts × 60 s. The API now fills in
``REPROMPT_DEFAULT_DEADLINE_MS`` (10 minutes, never more than ``REPROMPT_MAX_DEADLINE_MS``)
when a job is submitted without one.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from pydantic import SecretStr
from redis import Redis

from app.api.limits import stored_spec_json, with_default_deadline
from app.assembly import api_app
from app.core.wire import codes
from app.core.wire.spec import JobSpec
from app.loopback import serve_in_thread
from app.providers.config import ModelConfig, ProviderConfig, ProvidersConfig
from app.redis_server import EmbeddedRedis
from app.settings import Settings
from app.store.ids import shard_of
from app.store.keys import Keys
from tests.providers.silent import Silent
from tests.waiting import sync_until

# The job ends at this deadline as ``deadline-exceeded``, long before the provider's
# timeout (60 s, 3 attempts) would end the call as a timeout of its own.
DEADLINE_MS = 1500
PREFIX = "deadlines"


@pytest.fixture
def silent() -> Iterator[Silent]:
    with Silent() as provider:
        yield provider


@pytest.fixture
def service(silent: Silent, tmp_path: Path) -> Iterator[tuple[str, Redis]]:
    """The API with an in-process worker on a real Redis; the silent provider behind it."""
    providers = ProvidersConfig(
        providers={
            "p": ProviderConfig(
                kind="openai", base_url=f"{silent.url}/v1", timeout_s=60, max_attempts=3
            )
        },
        models={"m": ModelConfig(provider="p", structured="prompt")},
    )
    with EmbeddedRedis(tmp_path / "redis") as redis:
        settings = Settings(
            redis_url=SecretStr(redis.url),
            data_dir=tmp_path,
            key_prefix=PREFIX,
            default_deadline_ms=DEADLINE_MS,
            worker_metrics_port=0,
            drain_timeout_s=0,
        )
        app = api_app(settings, embedded_worker=True, providers=providers)
        client = Redis.from_url(redis.url, decode_responses=True)
        try:
            with serve_in_thread(
                app, name="deadlines", lifespan="on", startup_timeout_s=60, shutdown_timeout_s=60
            ) as url:
                yield url, client
        finally:
            client.close()


def _stored_spec(redis: Redis, job_id: str) -> dict[str, Any]:
    raw = redis.hget(Keys(PREFIX).shard(shard_of(job_id)).job(job_id), "spec")
    assert isinstance(raw, str)
    spec: dict[str, Any] = json.loads(raw)
    return spec


JOB = {"task": "Name a city.", "signature": "{city :string}", "budget": {"maxTurns": 1}}


def test_a_job_without_a_deadline_ends_at_the_default_one(
    service: tuple[str, Redis],
) -> None:
    url, redis = service
    with httpx.Client(base_url=url, timeout=30) as http:
        submitted = http.post("/v1/jobs", json=JOB)
        assert submitted.status_code == 202, submitted.text
        job_id = submitted.json()["id"]
        assert _stored_spec(redis, job_id)["budget"]["deadlineMs"] == DEADLINE_MS

        def ended() -> dict[str, Any] | None:
            job: dict[str, Any] = http.get(f"/v1/jobs/{job_id}", params={"waitMs": 2000}).json()
            return None if job["status"] in ("queued", "in_progress") else job

        job = sync_until(ended, what="the job to end")
    assert job["status"] == "failed"
    assert job["result"]["error"] == codes.DEADLINE_EXCEEDED


def test_a_job_that_names_its_deadline_keeps_it(service: tuple[str, Redis]) -> None:
    url, redis = service
    own = {**JOB, "budget": {"maxTurns": 1, "deadlineMs": 1200}}
    with httpx.Client(base_url=url, timeout=30) as http:
        submitted = http.post("/v1/jobs", json=own)
        assert submitted.status_code == 202, submitted.text
        assert _stored_spec(redis, submitted.json()["id"])["budget"]["deadlineMs"] == 1200


def test_the_default_is_ten_minutes_within_the_cap() -> None:
    spec = JobSpec.model_validate(JOB)
    assert with_default_deadline(spec, Settings()).budget.deadline_ms == 600_000
    capped = Settings(max_deadline_ms=60_000)
    assert with_default_deadline(spec, capped).budget.deadline_ms == 60_000


@pytest.mark.parametrize(
    "budget", [{"maxTurns": 1}, {"maxTurns": 2, "deadlineMs": 1200}, {"maxCostUsd": 0.5}]
)
def test_the_stored_spec_is_the_spec_with_its_default_deadline(budget: dict[str, Any]) -> None:
    spec = JobSpec.model_validate({**JOB, "budget": budget})
    for settings in (Settings(), Settings(max_deadline_ms=60_000)):
        stored = stored_spec_json(spec, settings)
        assert stored == with_default_deadline(spec, settings).model_dump(
            mode="json", by_alias=True
        )
        assert json.dumps(stored) == json.dumps(
            with_default_deadline(spec, settings).model_dump(mode="json", by_alias=True)
        )
    assert spec.budget.deadline_ms == budget.get("deadlineMs")  # the spec itself unchanged
