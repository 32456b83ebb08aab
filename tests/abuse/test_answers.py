"""An answer's size and the CPU spent checking it are bounded; a busy check never stalls
the worker's event loop.

Before: an answer of any size was parsed and checked on the event loop, so one big
answer could hold a worker's heartbeats (and every other job it ran) for seconds, and
the whole answer was kept in memory for recording.
"""

from __future__ import annotations

import json
import secrets
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import pytest
from redis.asyncio import Redis

from app.core.answer.check import check_answer
from app.core.answer.verdict import MAX_ANSWER_CHARS, answer_limit
from app.core.turn.loop import Runtime, run_job
from app.core.wire import codes
from app.core.wire.spec import JobSpec
from app.providers.embedded import open_router
from app.providers.http import make_client
from app.redis_server import EmbeddedRedis
from app.worker import Worker
from reprompt_sim.server import SimConfig, serve_in_background
from tests.abuse.service import sim_providers
from tests.both import Store
from tests.core.fakes import ScriptedClient, answer, reply
from tests.worker.harness import finished, running, submit, worker_settings


def spec(**extra: Any) -> JobSpec:
    return JobSpec.model_validate({"task": "x", "signature": "{a :int}", **extra})


def test_the_answer_limit_follows_the_output_limit_up_to_a_ceiling() -> None:
    assert answer_limit(16) == 256
    assert answer_limit(1024) == 16_384
    assert answer_limit(200_000) == MAX_ANSWER_CHARS == 524_288


async def test_an_answer_over_the_limit_is_rejected_unread_and_recorded_short() -> None:
    huge = '{"a": 1, "pad": "' + "x" * 20_000 + '"}'  # valid JSON, and too long for 256 tokens
    client = ScriptedClient([reply(huge), answer({"a": 1})])
    result = await run_job(
        spec(maxOutputTokens=256, budget={"maxTurns": 1, "returnRetries": 1}),
        Runtime(client=client),
    )
    first = result.turns[0]
    assert first.outcome == "invalid"
    assert first.error_code == codes.LLM_INVALID_OUTPUT
    assert first.diagnosis is not None
    assert f"{len(huge)} characters long; this request allows at most 4096" in first.diagnosis
    assert first.answer is not None
    assert len(first.answer) < 2500  # head and tail, not the answer
    assert all(len(m.content) <= 20_000 for m in result.transcript)
    assert result.envelope.status == "success"


def test_a_max_size_answer_is_checked_within_its_work_budget() -> None:
    # Every character costs; the budget is 10,000 steps plus 8 per character of answer. A
    # check that needed more (quadratic repair of ~160 KB of single-quoted strings) would
    # end as kind "limit", not ok.
    hostile = "[" + ",".join(["'a'"] * 40_000) + "]"
    checked = check_answer(hostile, {"type": "array", "items": {"type": "string"}})
    assert checked.ok
    assert checked.kind is None


# -- a real worker, Redis and the simulator -----------------------------------------------------


@pytest.fixture
async def store(tmp_path: Path) -> AsyncIterator[Store]:
    with EmbeddedRedis(tmp_path / "redis") as server:
        redis = Redis.from_url(server.url)
        try:
            yield Store(redis, prefix="answers", lease_ms=500, max_attempts=3)
        finally:
            await redis.aclose()


@pytest.fixture(scope="module")
def sim_url() -> Iterator[str]:
    with serve_in_background(SimConfig(seed=9)) as url:
        yield url


def job(task: str, **extra: Any) -> dict[str, Any]:
    return {"task": f"{task} ({secrets.token_hex(4)})", "budget": {"maxTurns": 1}, **extra}


async def test_a_worker_busy_on_a_hostile_answer_keeps_heartbeating_and_runs_other_jobs(
    store: Store, sim_url: str, tmp_path: Path
) -> None:
    # 400 KB of single-quoted strings: repairing and checking it takes over a second of
    # CPU, more than the lease (500 ms). The simulator answers with exactly this text.
    hostile = "[" + ",".join(["'a'"] * 100_000) + "]"
    busy = job(
        f"List letters\n[[sim {json.dumps({'expect': hostile})}]]",
        schema={"type": "array", "items": {"type": "string"}},
        maxOutputTokens=200_000,
    )
    quick = job("Name a city", signature="{city :string, population :int}")
    settings = worker_settings(lease_ms=500, heartbeat_ms=100, reap_interval_ms=100)
    async with (
        make_client() as http,
        open_router(http, data_dir=tmp_path, config=sim_providers(sim_url)) as router,
    ):
        busy_id = await submit(store, busy)
        async with running(Worker(store, router, settings)):
            quick_ids = [await submit(store, quick) for _ in range(3)]
            quick_views = [await finished(store, job_id) for job_id in quick_ids]
            busy_view = await finished(store, busy_id)
    assert busy_view.status == "succeeded", busy_view.result
    assert len(busy_view.result.data) == 100_000
    # Never lost its 500 ms lease through a check of over a second: the event loop went on
    # heartbeating (a lost lease would have started attempt 2 or refused the commit).
    assert [t.job_attempt for t in busy_view.turns] == [1]
    assert [v.status for v in quick_views] == ["succeeded"] * 3
    assert busy_view.finished_at is not None
    assert all((v.finished_at or "") <= busy_view.finished_at for v in quick_views)
