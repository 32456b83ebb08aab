"""Tool outputs a client sends wrong or late (#29): a 422 naming the field for an entry that
answers nothing, a 409 at once for outputs after ``expiresAt``."""

from __future__ import annotations

import asyncio
import json
import uuid
from collections.abc import Iterator
from datetime import datetime
from typing import Any

import httpx
import pytest
from redis.asyncio import Redis

from tests.service import KEYS, StartApi, api_keys, assert_problem, client
from tests.waiting import sync_until

PARAMS: dict[str, Any] = {"type": "object", "properties": {"sku": {"type": "string"}}}
CALL = {"call": [{"name": "lookup", "arguments": {"sku": "A1"}}]}


def tool_job(**extra: Any) -> dict[str, Any]:
    script = {"script": [CALL, "ok"], "counter": "requests", "expect": {"price": 9.5}}
    directive = json.dumps(script)
    return {
        "task": f"Price of A1 ({uuid.uuid4().hex[:8]})\n[[sim {directive}]]",
        "signature": "{price :float}",
        "tools": [{"name": "lookup", "parameters": PARAMS}],
        "budget": {"maxTurns": 3},
        **extra,
    }


def paused(http: httpx.Client, job_id: str) -> dict[str, Any]:
    def check() -> dict[str, Any] | None:
        job: dict[str, Any] = http.get(f"/v1/jobs/{job_id}", params={"waitMs": 5000}).json()
        return job if job["status"] == "requires_action" else None

    return sync_until(check, what=f"job {job_id} to require action")


@pytest.fixture
def worker_api(start_api: StartApi) -> str:
    # The reaper looks once an hour: whatever refuses late outputs here is not its pass.
    return start_api(embedded_worker=True, api_keys=api_keys(), reap_interval_ms=3_600_000)


@pytest.fixture
def alice(worker_api: str) -> Iterator[httpx.Client]:
    with client(worker_api, KEYS["alice"]) as http:
        yield http


def test_an_output_with_neither_output_nor_error_is_refused(alice: httpx.Client) -> None:
    job = paused(alice, alice.post("/v1/jobs", json=tool_job()).json()["id"])
    (call,) = job["requiredAction"]["toolCalls"]
    url = f"/v1/jobs/{job['id']}/tool-outputs"
    response = alice.post(url, json={"outputs": [{"toolCallId": call["id"]}]})
    body = assert_problem(response, 422, "invalid-input", "outputs.0")
    assert "give output" in body["detail"]
    assert alice.get(f"/v1/jobs/{job['id']}").json()["status"] == "requires_action"
    # An explicit null is an answer (the tool returned null).
    answered = alice.post(url, json={"outputs": [{"toolCallId": call["id"], "output": None}]})
    assert answered.status_code == 200, answered.text


def redis_ms(redis_url: str) -> int:
    async def read() -> int:
        redis = Redis.from_url(redis_url)
        try:
            seconds, micros = await redis.time()
        finally:
            await redis.aclose()
        return seconds * 1000 + micros // 1000

    return asyncio.run(read())


def test_outputs_after_expires_at_are_refused_at_once(alice: httpx.Client, redis_url: str) -> None:
    job = paused(alice, alice.post("/v1/jobs", json=tool_job(toolTimeoutMs=1000)).json()["id"])
    action = job["requiredAction"]
    expires_ms = int(datetime.fromisoformat(action["expiresAt"]).timestamp() * 1000)
    # Wait on Redis's clock (the one the store compares with) passing expiresAt.
    sync_until(lambda: redis_ms(redis_url) > expires_ms or None, what="expiresAt to pass")
    assert alice.get(f"/v1/jobs/{job['id']}").json()["status"] == "requires_action"  # no reaper
    body = {"outputs": [{"toolCallId": c["id"], "output": 1} for c in action["toolCalls"]]}
    late = alice.post(f"/v1/jobs/{job['id']}/tool-outputs", json=body)
    problem = assert_problem(late, 409, "conflict")
    assert "expiresAt" in problem["detail"]
    assert alice.get(f"/v1/jobs/{job['id']}").json()["status"] == "requires_action"
