"""A job's bookkeeping (its 'started' line, its metrics) is done once the job waits for
its model call or its commit, not on the way to them: still all of it, in order, stamped
when it happened, and a failure of one part leaves the rest and the job alone."""

from __future__ import annotations

import logging
import time
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from app import metrics
from app.core.turn.model import LLMRequest, LLMResponse
from app.providers.router import Router
from app.worker import Worker
from tests.both import Store
from tests.worker.harness import (
    Gate,
    eventually,
    finished,
    job,
    running,
    sim_router,
    submit,
    worker_settings,
)


@pytest.fixture
async def router(sim_url: str, tmp_path: Path) -> AsyncIterator[Router]:
    async with sim_router(sim_url, tmp_path) as router:
        yield router


def sample(name: str, labels: dict[str, str] | None = None) -> float:
    return metrics.REGISTRY.get_sample_value(name, labels or {}) or 0.0


class Stamped(Gate):
    """A gate that notes when its first call reached it."""

    called_at = 0.0

    async def complete(self, request: LLMRequest) -> LLMResponse:
        if not self.called_at:
            self.called_at = time.time()
        return await super().complete(request)


def _lines(caplog: pytest.LogCaptureFixture, job_id: str) -> list[logging.LogRecord]:
    return [r for r in caplog.records if f"job {job_id} " in r.getMessage()]


async def test_a_jobs_start_is_counted_and_logged_while_its_model_call_waits_stamped_before_it(
    store: Store, router: Router, caplog: pytest.LogCaptureFixture
) -> None:
    turns = {"type": "must_return", "outcome": "success"}
    before_turns = sample("reprompt_turns_total", turns)
    before_waits = sample("reprompt_queue_wait_seconds_count")
    gate = Stamped(router, hold=lambda n: n == 1)
    caplog.set_level(logging.INFO, logger="app.worker")
    job_id = await submit(store, job(name="owed"))
    async with running(Worker(store, gate, worker_settings())):
        await eventually(lambda: _true(gate.waiting == 1), what="the model call to wait")
        # The call is held: what the start owes is done, the turn is not counted yet.
        (started,) = _lines(caplog, job_id)
        assert started.getMessage().startswith(f"job {job_id} started: attempt 1, ")
        assert started.created <= gate.called_at  # stamped as the job started
        assert sample("reprompt_queue_wait_seconds_count") == before_waits + 1
        assert sample("reprompt_jobs_in_progress") == 1
        assert sample("reprompt_turns_total", turns) == before_turns
        gate.open()
        view = await finished(store, job_id)
        await eventually(lambda: _true(len(_lines(caplog, job_id)) == 2), what="the end line")
    assert view.status == "succeeded"
    started, ended = _lines(caplog, job_id)
    assert ended.getMessage().startswith(f"job {job_id} succeeded: 1 calls, ")
    assert started.created <= ended.created
    assert sample("reprompt_turns_total", turns) == before_turns + 1
    assert sample("reprompt_jobs_in_progress") == 0


async def test_bookkeeping_that_fails_is_logged_and_the_rest_and_the_job_go_on(
    store: Store, router: Router, caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    real = metrics.job_started

    def failing(waited_s: float) -> None:
        real(waited_s)  # counted (the gauge goes back to 0), then a bug
        raise RuntimeError("a bug in the bookkeeping")

    monkeypatch.setattr(metrics, "job_started", failing)
    turns = {"type": "must_return", "outcome": "success"}
    before_turns = sample("reprompt_turns_total", turns)
    before_done = sample("reprompt_jobs_finished_total", {"status": "succeeded", "error": ""})
    caplog.set_level(logging.INFO, logger="app.worker")
    job_id = await submit(store, job(name="failing"))
    async with running(Worker(store, router, worker_settings())):
        view = await finished(store, job_id)
        await eventually(
            lambda: _true(any("succeeded" in r.getMessage() for r in _lines(caplog, job_id))),
            what="the end line",
        )
    assert view.status == "succeeded"
    failed = [
        r for r in caplog.records if r.getMessage() == f"job {job_id}: its bookkeeping failed"
    ]
    assert len(failed) == 1
    assert failed[0].exc_info is not None
    assert "a bug in the bookkeeping" in str(failed[0].exc_info[1])
    # What was owed after it was still done: the turn, then the job's end.
    assert sample("reprompt_turns_total", turns) == before_turns + 1
    done = sample("reprompt_jobs_finished_total", {"status": "succeeded", "error": ""})
    assert done == before_done + 1
    assert sample("reprompt_jobs_in_progress") == 0


async def test_quick_turns_each_write_their_record_in_order_and_each_is_counted(
    store: Store, router: Router
) -> None:
    # No turn lasts FLUSH_AFTER_S: the first turn's record is written as the second ends
    # (one record per write), the second with the commit.
    invalid = {"type": "must_return", "outcome": "invalid"}
    success = {"type": "retry", "outcome": "success"}
    before = (sample("reprompt_turns_total", invalid), sample("reprompt_turns_total", success))
    spec = job(["broken_json", "ok"], budget={"maxTurns": 1, "returnRetries": 1})
    job_id = await submit(store, spec)
    async with running(Worker(store, router, worker_settings())):
        view = await finished(store, job_id)
    assert view.status == "succeeded"
    assert [(t.index, t.outcome, t.job_attempt) for t in view.turns] == [
        (1, "invalid", 1),
        (2, "success", 1),
    ]
    events = await store.events(job_id, after=None, block_ms=0)
    assert [e.name for e in events] == [
        "job_queued",
        "job_start",
        "turn_start",
        "turn_end",
        "turn_start",
        "turn_end",
        "job_end",
    ]
    after = (sample("reprompt_turns_total", invalid), sample("reprompt_turns_total", success))
    assert (after[0] - before[0], after[1] - before[1]) == (1, 1)


async def _true(value: bool) -> bool:
    return value
