"""The Worker class in-process: a real redis-server, the real router over the simulator.

``Gate`` wraps the router to count calls in flight and to hold a call until the test has
looked at the job, so nothing here depends on timing.
"""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import pytest
from redis.asyncio import Redis

from app import metrics
from app.core.turn.model import LLMRequest, LLMResponse, StructuredMode, StructuredOutput
from app.core.wire import codes
from app.providers.router import Router
from app.store import Claim, JobView, Written
from app.worker import Worker
from reprompt_sim.server import SimConfig, serve_in_background
from tests.both import Store
from tests.waiting import forever, until
from tests.worker.harness import (
    LEASE_MS,
    TENANT,
    Gate,
    eventually,
    finished,
    job,
    job_ends,
    running,
    sim_router,
    status_of,
    submit,
    worker_settings,
)


@pytest.fixture(scope="module")
def latent_sim_url() -> Iterator[str]:
    """Every answer takes 150 ms: long enough for jobs to overlap."""
    with serve_in_background(SimConfig(seed=4, latency_ms=150)) as url:
        yield url


@pytest.fixture
async def router(sim_url: str, tmp_path: Path) -> AsyncIterator[Router]:
    async with sim_router(sim_url, tmp_path) as router:
        yield router


def sample(name: str, labels: dict[str, str] | None = None) -> float:
    return metrics.REGISTRY.get_sample_value(name, labels or {}) or 0.0


async def test_never_runs_more_jobs_than_its_concurrency(
    store: Store, latent_sim_url: str, tmp_path: Path
) -> None:
    async with sim_router(latent_sim_url, tmp_path) as router:
        gate = Gate(router)
        worker = Worker(store, gate, worker_settings(worker_concurrency=3))
        ids = [await submit(store, job(name=f"c{i}")) for i in range(8)]
        async with running(worker):
            views = [await finished(store, job_id) for job_id in ids]
    assert [v.status for v in views] == ["succeeded"] * 8
    assert gate.calls == 8
    assert gate.max_in_flight == 3


async def test_a_stored_spec_that_no_longer_validates_fails_with_invalid_input(
    store: Store, router: Router
) -> None:
    job_id = await submit(store, {"task": "no signature and no schema"})
    gate = Gate(router)
    async with running(Worker(store, gate, worker_settings())):
        view = await finished(store, job_id)
    assert view.status == "failed"
    assert view.result.error == codes.INVALID_INPUT
    assert view.result.detail is not None
    assert "signature" in view.result.detail
    assert gate.calls == 0


class Broken(Gate):
    """A client with a bug the turn loop does not guard against."""

    def structured_mode(self, model: str | None, requested: StructuredOutput) -> StructuredMode:
        raise RuntimeError("bug")


async def test_an_unexpected_error_fails_the_job_with_internal_error_and_the_worker_goes_on(
    store: Store, router: Router
) -> None:
    ids = [await submit(store, job(name=f"bug{i}")) for i in range(2)]
    async with running(Worker(store, Broken(router), worker_settings(worker_concurrency=1))):
        views = [await finished(store, job_id) for job_id in ids]
    assert [(v.status, v.result.error) for v in views] == [("failed", codes.INTERNAL_ERROR)] * 2
    assert views[0].result.detail is not None
    assert "bug" not in views[0].result.detail  # no internals leak into the result


async def test_turns_and_progress_appear_in_the_job_while_it_runs(
    store: Store, router: Router
) -> None:
    spec = job(["broken_json", "ok"], budget={"maxTurns": 1, "returnRetries": 2})
    job_id = await submit(store, spec)
    gate = Gate(router, hold=lambda n: n == 2)  # the re-ask waits until we have looked
    async with running(Worker(store, gate, worker_settings())):

        async def first_turn_recorded() -> bool:
            view = await store.get(job_id, tenant=TENANT)
            return view is not None and len(view.turns) == 1

        await eventually(first_turn_recorded, what="the first turn to be recorded")
        view = await store.get(job_id, tenant=TENANT)
        assert view is not None
        assert view.status == "in_progress"
        assert view.turns[0].outcome == "invalid"
        assert view.result.status == "in-progress"
        # the re-ask is held inside its model call: the envelope says so
        progress = view.result.progress
        assert progress is not None
        assert progress.phase == "model-call"
        assert progress.turn == 2
        assert progress.type == "retry"
        assert progress.attempt == 2
        assert view.turns[0].job_attempt == 1
        gate.open()
        view = await finished(store, job_id)
    assert view.status == "succeeded"
    assert [t.outcome for t in view.turns] == ["invalid", "success"]
    assert [t.index for t in view.turns] == [1, 2]
    events = await store.events(job_id, after=None, block_ms=0)
    names = [e.name for e in events]
    assert names == [
        "job_queued",
        "job_start",
        "turn_start",
        "turn_end",
        "turn_start",
        "turn_end",
        "job_end",
    ]
    assert view.transcript
    assert set(view.transcript[0].model_dump()) == {"role", "content"}


async def test_metrics_count_turns_jobs_queue_wait_and_jobs_in_progress(
    store: Store, router: Router
) -> None:
    before = {
        "invalid": sample("reprompt_turns_total", {"type": "must_return", "outcome": "invalid"}),
        "success": sample("reprompt_turns_total", {"type": "retry", "outcome": "success"}),
        "finished": sample("reprompt_jobs_finished_total", {"status": "succeeded", "error": ""}),
        "waits": sample("reprompt_queue_wait_seconds_count"),
        "reasks": sample("reprompt_reasks_total", {"error": codes.LLM_INVALID_OUTPUT}),
    }
    spec = job(["broken_json", "ok"], budget={"maxTurns": 1, "returnRetries": 1})
    job_id = await submit(store, spec)
    async with running(Worker(store, router, worker_settings())):
        view = await finished(store, job_id)
    assert view.status == "succeeded"
    after = {
        "invalid": sample("reprompt_turns_total", {"type": "must_return", "outcome": "invalid"}),
        "success": sample("reprompt_turns_total", {"type": "retry", "outcome": "success"}),
        "finished": sample("reprompt_jobs_finished_total", {"status": "succeeded", "error": ""}),
        "waits": sample("reprompt_queue_wait_seconds_count"),
        "reasks": sample("reprompt_reasks_total", {"error": codes.LLM_INVALID_OUTPUT}),
    }
    assert {k: after[k] - before[k] for k in before} == {
        "invalid": 1,
        "success": 1,
        "finished": 1,
        "waits": 1,
        "reasks": 1,
    }
    assert sample("reprompt_jobs_in_progress") == 0


async def test_metrics_count_each_models_calls_tokens_latency_and_job_durations(
    store: Store, router: Router
) -> None:
    model = {"provider": "sim", "model": "sim-model"}

    def now() -> dict[str, float]:
        return {
            "calls": sample("reprompt_llm_calls_total", model),
            "input": sample("reprompt_llm_tokens_total", {**model, "direction": "input"}),
            "output": sample("reprompt_llm_tokens_total", {**model, "direction": "output"}),
            "latencies": sample("reprompt_llm_request_duration_seconds_count", model),
            "durations": sample("reprompt_job_duration_seconds_count", {"status": "succeeded"}),
        }

    before = now()
    cost_before = metrics.REGISTRY.get_sample_value("reprompt_llm_cost_usd_total", model)
    jobs = [
        await submit(store, job(["broken_json", "ok"], budget={"maxTurns": 1, "returnRetries": 1})),
        await submit(store, job(name="second")),
    ]
    async with running(Worker(store, router, worker_settings())):
        views = [await finished(store, job_id) for job_id in jobs]
    turns = [turn for view in views for turn in view.turns]
    assert len(turns) == 3
    after = now()
    assert {k: after[k] - before[k] for k in before} == {
        "calls": 3,
        "input": sum(t.usage.input_tokens for t in turns),
        "output": sum(t.usage.output_tokens for t in turns),
        "latencies": 3,
        "durations": 2,
    }
    assert all(t.usage.input_tokens > 0 for t in turns)
    # The simulator's model has no price here: no cost counted (another test in this
    # process may have priced it: the series, if any, is where it was).
    assert all(t.cost_usd is None for t in turns)
    cost_after = metrics.REGISTRY.get_sample_value("reprompt_llm_cost_usd_total", model)
    assert cost_after == cost_before


async def test_a_long_input_is_stored_once_and_a_short_one_kept_in_the_transcript(
    store: Store, router: Router
) -> None:
    long_input = {"rows": [{"city": f"city {i}", "note": "x" * 40} for i in range(60)]}
    short_input = {"city": "Lyon"}
    jobs = [
        await submit(store, job(name="long", input=long_input)),
        await submit(store, job(name="short", input=short_input)),
    ]
    async with running(Worker(store, router, worker_settings())):
        long_view, short_view = [await finished(store, job_id) for job_id in jobs]
    shown = json.dumps(long_input, ensure_ascii=False, indent=1)
    assert len(shown) > 2048
    task = long_view.transcript[1].content
    assert shown not in task
    assert f"[the job's input, {len(shown)} characters: see the job's input]" in task
    assert json.dumps(short_input, ensure_ascii=False, indent=1) in short_view.transcript[1].content


async def test_cancelling_a_running_job_aborts_its_model_call_and_commits_nothing(
    store: Store, router: Router
) -> None:
    gate = Gate(router, hold=lambda n: n == 1)  # the first call hangs until cancelled
    worker = Worker(store, gate, worker_settings(worker_concurrency=1))
    first = await submit(store, job(name="cancelled"))
    second = await submit(store, job(name="next"))
    async with running(worker):
        await status_of(store, first, "in_progress")
        await eventually(lambda: _true(gate.waiting == 1), what="the first call to hang")
        cancelled = await store.cancel(first, tenant=TENANT)
        assert cancelled is not None
        assert cancelled.status == "cancelled"
        await eventually(lambda: _true(gate.aborted == 1), what="the model call to be aborted")
        after = await finished(store, second)
    assert after.status == "succeeded"
    view = await store.get(first, tenant=TENANT)
    assert view is not None
    assert view.status == "cancelled"
    assert view.result.error == codes.CANCELLED
    assert view.turns == ()
    assert await job_ends(store, first) == 1


async def test_a_lost_lease_stops_the_job_and_the_requeued_job_runs_again(
    store: Store, router: Router
) -> None:
    gate = Gate(router, hold=lambda n: n == 1)
    job_id = await submit(store, job(name="lease"))
    async with running(Worker(store, gate, worker_settings(worker_concurrency=1))):
        await eventually(lambda: _true(gate.waiting == 1), what="the first call to hang")
        # As if the worker had been paused past its lease: a reaper takes the job back.
        reaped = await store.reap(now_ms=2**53)
        assert reaped.requeued == [job_id]
        # The heartbeat finds the lease gone and aborts the call; the job runs again.
        view = await finished(store, job_id)
    assert gate.aborted == 1
    assert view.status == "succeeded"
    assert view.attempts == 2
    assert len(view.turns) == 1
    assert await job_ends(store, job_id) == 1


async def test_a_zombie_worker_cannot_commit_over_the_new_owner(
    store: Store, router: Router
) -> None:
    # The zombie never heartbeats in time and its call hangs until we let it go; with one
    # slot it cannot claim the job again while it still holds the first claim. Settings
    # refuse a heartbeat longer than the lease, so the zombie's are copied past validation.
    zombie_gate = Gate(router, hold=lambda n: True)
    zombie = Worker(
        store,
        zombie_gate,
        worker_settings(worker_concurrency=1).model_copy(
            update={"heartbeat_ms": 600_000, "reap_interval_ms": 600_000}
        ),
        worker_id="zombie",
    )
    job_id = await submit(store, job(name="zombie"))
    stale_before = sample("reprompt_stale_commits_rejected_total")
    async with running(zombie):
        await eventually(lambda: _true(zombie_gate.waiting == 1), what="the zombie's call")
        # The healthy worker reaps the expired lease, runs the job and commits.
        async with running(Worker(store, router, worker_settings(reap_interval_ms=100))):
            won = await finished(store, job_id)
        assert won.status == "succeeded"
        assert won.attempts == 2
        zombie_gate.open()  # the zombie's answer arrives; its writes must all be refused
        await eventually(
            lambda: _true(sample("reprompt_stale_commits_rejected_total") > stale_before),
            what="the zombie's write to be refused",
        )
        await eventually(lambda: _true(zombie.running == 0), what="the zombie to drop the job")
    view = await store.get(job_id, tenant=TENANT)
    assert view is not None
    assert view.result == won.result
    assert view.turns == won.turns
    assert len(view.turns) == 1
    assert await job_ends(store, job_id) == 1


async def test_stop_lets_running_jobs_finish_within_the_drain_timeout(
    store: Store, router: Router, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO)
    gate = Gate(router, hold=lambda n: True)
    worker = Worker(store, gate, worker_settings(drain_timeout_s=30))
    job_id = await submit(store, job(name="drain"))
    stop = asyncio.Event()
    task = asyncio.create_task(worker.run(stop))
    await eventually(lambda: _true(gate.waiting == 1), what="the call to hang")
    stop.set()
    later = await submit(store, job(name="not-claimed"))
    # The worker is draining (it claims nothing more); the gate opens after the stop.
    await until(lambda: "draining 1 running jobs" in caplog.text, what="the worker to drain")
    gate.open()
    await asyncio.wait_for(task, 30)
    view = await store.get(job_id, tenant=TENANT)
    assert view is not None
    assert view.status == "succeeded"
    queued = await store.get(later, tenant=TENANT)
    assert queued is not None
    assert queued.status == "queued"


async def test_jobs_still_running_at_the_drain_timeout_go_back_to_the_queue(
    store: Store, router: Router
) -> None:
    gate = Gate(router, hold=lambda n: True)
    worker = Worker(store, gate, worker_settings(drain_timeout_s=0.2))
    ids = [await submit(store, job(name=f"release{i}")) for i in range(2)]
    stop = asyncio.Event()
    task = asyncio.create_task(worker.run(stop))
    await eventually(lambda: _true(gate.waiting == 2), what="both calls to hang")
    stop.set()
    await asyncio.wait_for(task, 30)
    assert gate.aborted == 2
    for job_id in ids:
        view = await store.get(job_id, tenant=TENANT)
        assert view is not None
        assert (view.status, view.attempts) == ("queued", 0)
    # Another worker finishes them; the released attempt was not counted.
    async with running(Worker(store, router, worker_settings())):
        views = [await finished(store, job_id) for job_id in ids]
    assert [(v.status, v.attempts) for v in views] == [("succeeded", 1)] * 2


async def _true(value: bool) -> bool:
    return value


class Stubborn(Gate):
    """Swallows the first cancellation, as ``asyncio.wait_for`` can on Python 3.11."""

    swallowed = 0
    sleeping = False

    async def complete(self, request: LLMRequest) -> LLMResponse:
        try:
            self.sleeping = True
            await forever()
        except asyncio.CancelledError:
            self.swallowed += 1
        return await super().complete(request)


async def test_a_cancellation_swallowed_on_the_way_is_repeated_until_the_job_stops(
    store: Store, router: Router
) -> None:
    client = Stubborn(router, hold=lambda n: True)
    worker = Worker(store, client, worker_settings(drain_timeout_s=0))
    job_id = await submit(store, job(name="stubborn"))
    stop = asyncio.Event()
    task = asyncio.create_task(worker.run(stop))
    await eventually(lambda: _true(client.sleeping), what="the call to start")
    stop.set()
    await asyncio.wait_for(task, 30)
    assert (client.swallowed, client.aborted) == (1, 1)
    view = await store.get(job_id, tenant=TENANT)
    assert view is not None
    assert (view.status, view.attempts) == ("queued", 0)


class SlowToReturnCommit:
    """A store whose ``complete`` lands in Redis, then comes back only once a heartbeat has
    found the job's lease gone: the window in which a heartbeat sees the job finished
    before the worker knows its commit succeeded."""

    def __init__(self, store: Store) -> None:
        self._store = store
        self.lost_before = sample("reprompt_lease_renewals_total", {"outcome": "lost"})

    def __getattr__(self, name: str) -> object:
        return getattr(self._store, name)

    async def complete(self, *args: object, **kwargs: object) -> Written:
        committed = await self._store.complete(*args, **kwargs)  # type: ignore[arg-type]
        await until(
            lambda: sample("reprompt_lease_renewals_total", {"outcome": "lost"}) > self.lost_before,
            what="a heartbeat to find the committed job's lease gone",
        )
        return committed


async def test_a_heartbeat_racing_a_successful_commit_does_not_drop_the_job(
    store: Store, router: Router, caplog: pytest.LogCaptureFixture
) -> None:
    settings = worker_settings()
    slow = SlowToReturnCommit(store)
    finished_before = sample("reprompt_jobs_finished_total", {"status": "succeeded", "error": ""})
    job_id = await submit(store, job(name="race"))
    async with running(Worker(slow, router, settings)) as _:  # type: ignore[arg-type]
        view = await finished(store, job_id)

        async def counted() -> bool:
            now = sample("reprompt_jobs_finished_total", {"status": "succeeded", "error": ""})
            return now == finished_before + 1

        await eventually(counted, what="the finished job to be counted")
    assert view.status == "succeeded"
    assert "lease lost" not in caplog.text


class SlowCommits(Store):
    """The real store, whose commits wait for ``let_commit``: a cancel can land first."""

    def __init__(self, redis: Redis, **options: Any) -> None:
        super().__init__(redis, **options)
        self.committing = asyncio.Event()
        self.let_commit = asyncio.Event()

    async def complete(self, claim: Claim, **fields: Any) -> Written:
        self.committing.set()
        await self.let_commit.wait()
        return await super().complete(claim, **fields)


async def test_a_cancel_that_lands_as_the_answer_is_committed_bills_the_answer_once(
    redis_url: str, prefix: str, router: Router
) -> None:
    redis = Redis.from_url(redis_url)
    store = SlowCommits(redis, prefix=prefix, lease_ms=LEASE_MS, max_attempts=3)
    try:
        job_id = await submit(store, job(name="raced"))
        async with running(Worker(store, router, worker_settings(worker_concurrency=1))):
            await until(store.committing.is_set, what="the answer's commit to begin")
            cancelled = await store.cancel(job_id, tenant=TENANT)
            assert cancelled is not None
            assert cancelled.status == "cancelled"
            store.let_commit.set()

            async def billed() -> JobView | None:
                view = await store.get(job_id, tenant=TENANT)
                return view if view is not None and view.turns else None

            view = await until(billed, what="the answer's call to be billed")
    finally:
        await store.aclose()
        await redis.aclose()
    assert view.status == "cancelled"
    (turn,) = view.turns  # the answer's call, once
    assert turn.outcome == "success"
    execution = view.result.execution
    assert view.result.error == codes.CANCELLED
    assert execution is not None
    assert execution.llm_calls == 1
    assert execution.tokens_used == turn.tokens > 0
    assert execution.wasted_tokens == turn.tokens  # cancelled: none of it was used
    assert await job_ends(store, job_id) == 1
