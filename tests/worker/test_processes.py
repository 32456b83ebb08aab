"""Worker processes (``reprompt worker``) killed, paused, stopped and cancelled.

Real processes on a real redis-server, answering from the simulator. A scripted ``slow``
answer (``SLOW_MS``) keeps a job in flight while the test does something to its worker;
the same conversation asked again is answered at once, so the job's next owner finishes
it quickly. Leases are short (``LEASE_MS``) and reapers fast, to keep the suite quick.
"""

from __future__ import annotations

import asyncio
import json
import signal
from collections.abc import Callable
from typing import Any

import pytest

from app.child import free_loopback_port
from app.core.turn.checkpoint import ToolOutput
from app.core.wire import codes
from tests.both import Store
from tests.store.helpers import names
from tests.worker.harness import (
    SLOW_MS,
    TENANT,
    WorkerProcess,
    eventually,
    finished,
    holder,
    job,
    job_ends,
    scrape,
    status_of,
    submit,
)

pytestmark = pytest.mark.slow

Spawn = Callable[..., WorkerProcess]


async def test_a_job_whose_worker_is_killed_finishes_on_another_worker(
    store: Store, spawn: Spawn
) -> None:
    first = await spawn().ready()
    job_id = await submit(store, job(["slow"], name="sigkill"))
    await first.wait_log(rf"job {job_id} started: attempt 1\b")
    first.send(signal.SIGKILL)
    assert await first.exit_code() == -signal.SIGKILL
    port = free_loopback_port()
    second = spawn(worker_metrics_port=port)

    view = await finished(store, job_id)
    assert view.status == "succeeded"
    assert view.attempts == 2
    assert len(view.turns) == 1
    assert await job_ends(store, job_id) == 1
    assert second.logged(rf"job {job_id} started: attempt 2\b")
    await second.wait_log(rf"job {job_id} succeeded")  # logged after the commit
    # The second worker reaped the dead one's lease, and says so on its /metrics.
    assert scrape(port, "reprompt_leases_expired_total") == 1
    assert scrape(port, "reprompt_jobs_finished_total", status="succeeded", error="") == 1


async def test_a_paused_worker_resumed_after_its_lease_expired_cannot_commit(
    store: Store, spawn: Spawn
) -> None:
    zombie = await spawn(env={"OPENAI_MODEL": "zombie-model"}).ready()
    job_id = await submit(store, job(["slow"], name="sigstop"))
    await zombie.wait_log(rf"job {job_id} started: attempt 1\b")
    zombie.send(signal.SIGSTOP)
    # While it sleeps its lease runs out; another worker reaps, re-runs and commits.
    healthy = spawn()
    won = await finished(store, job_id)
    assert won.status == "succeeded"
    assert won.attempts == 2
    assert won.result.execution is not None
    assert won.result.execution.model == "gpt-4o-mini"  # the healthy worker's model
    # Its log line comes after the commit the store already shows: wait for it.
    await healthy.wait_log(rf"job {job_id} succeeded")

    # Wake the zombie up: it finds the lease gone (by a heartbeat, or a refused write).
    zombie.send(signal.SIGCONT)
    await zombie.wait_log(rf"job {job_id}: (lease lost|stale (write|commit) refused)")
    # Whatever it might still try to write comes before it runs the next job to its end:
    # the only worker left, it takes that one.
    healthy.kill()
    other = await submit(store, job(name="after-zombie"))
    assert (await finished(store, other)).status == "succeeded"
    await zombie.wait_log(rf"job {other} succeeded")
    view = await store.get(job_id, tenant=TENANT)
    assert view is not None
    assert (view.status, view.result, view.turns) == ("succeeded", won.result, won.turns)
    assert len(view.turns) == 1
    assert await job_ends(store, job_id) == 1
    assert not zombie.logged(rf"job {job_id} succeeded")
    assert zombie.proc.poll() is None  # the zombie lives on and takes other work


async def test_a_job_that_kills_its_worker_every_time_fails_after_max_attempts(
    store: Store, spawn: Spawn
) -> None:
    # One job at a time: a worker the poison job kills holds no other job (that job would
    # be lost with it, as many times, and fail worker-lost too).
    workers = [spawn(worker_concurrency=1) for _ in range(4)]
    await asyncio.gather(*(w.ready() for w in workers))
    poison = await submit(store, job(["slow"] * 5, name="poison"))
    normal = [await submit(store, job(name=f"normal{i}")) for i in range(4)]
    for attempt in (1, 2, 3):
        # Whoever claims the poison job dies of it (as if it crashed the process).

        async def claimed(attempt: int = attempt) -> WorkerProcess | None:
            return holder(workers, poison, attempt)

        victim = await eventually(claimed, what=f"attempt {attempt} of the poison job")
        victim.send(signal.SIGKILL)
        workers.remove(victim)
        normal.append(await submit(store, job(name=f"during{attempt}")))
    view = await finished(store, poison)
    assert view.status == "failed"
    assert view.result.error == codes.WORKER_LOST
    assert view.attempts == 3
    assert await job_ends(store, poison) == 1
    views = [await finished(store, job_id) for job_id in normal]
    assert [v.status for v in views] == ["succeeded"] * len(normal)
    assert [await job_ends(store, job_id) for job_id in normal] == [1] * len(normal)


async def test_sigterm_lets_running_jobs_finish_then_exits_0(store: Store, spawn: Spawn) -> None:
    draining = await spawn(worker_concurrency=2, drain_timeout_s=30).ready()
    running = [await submit(store, job(["slow"], name=f"drain{i}")) for i in range(2)]
    waiting = [await submit(store, job(name=f"waiting{i}")) for i in range(2)]
    ids = running + waiting
    for job_id in running:
        await draining.wait_log(rf"job {job_id} started")
    draining.send(signal.SIGTERM)
    assert await draining.exit_code() == 0  # after the running jobs, not the 30 s drain cap
    for job_id in running:
        view = await store.get(job_id, tenant=TENANT)
        assert view is not None
        assert (view.status, view.attempts) == ("succeeded", 1)
    # It claimed nothing after the signal: the rest wait for another worker.
    for job_id in waiting:
        view = await store.get(job_id, tenant=TENANT)
        assert view is not None
        assert view.status == "queued"
    spawn()
    views = [await finished(store, job_id) for job_id in ids]
    assert [(v.status, v.attempts) for v in views] == [("succeeded", 1)] * 4
    assert [await job_ends(store, job_id) for job_id in ids] == [1] * len(ids)


async def test_sigterm_releases_jobs_still_running_at_the_drain_timeout(
    store: Store, spawn: Spawn
) -> None:
    draining = await spawn(worker_concurrency=2, drain_timeout_s=0.3).ready()
    ids = [await submit(store, job(["slow"], name=f"release{i}")) for i in range(2)]
    for job_id in ids:
        await draining.wait_log(rf"job {job_id} started")
    draining.send(signal.SIGTERM)
    assert await draining.exit_code(within=SLOW_MS / 1000 + 10) == 0
    for job_id in ids:
        assert draining.logged(rf"job {job_id} released")
        view = await store.get(job_id, tenant=TENANT)
        assert view is not None
        assert (view.status, view.attempts) == ("queued", 0)
    spawn()
    views = [await finished(store, job_id) for job_id in ids]
    assert [(v.status, v.attempts) for v in views] == [("succeeded", 1)] * 2
    assert [await job_ends(store, job_id) for job_id in ids] == [1] * len(ids)


async def test_a_second_sigterm_releases_running_jobs_at_once(store: Store, spawn: Spawn) -> None:
    draining = await spawn(drain_timeout_s=60).ready()
    job_id = await submit(store, job(["slow"], name="hurry"))
    await draining.wait_log(rf"job {job_id} started")
    draining.send(signal.SIGTERM)
    await draining.wait_log("draining 1 running jobs")
    draining.send(signal.SIGTERM)
    assert await draining.exit_code(within=SLOW_MS / 1000 + 10) == 0
    assert draining.logged(rf"job {job_id} released")
    view = await store.get(job_id, tenant=TENANT)
    assert view is not None
    assert (view.status, view.attempts) == ("queued", 0)


async def test_cancel_aborts_a_running_job_and_the_worker_moves_on(
    store: Store, spawn: Spawn
) -> None:
    worker = await spawn(worker_concurrency=1).ready()
    doomed = await submit(store, job(["slow"], name="doomed"))
    after = await submit(store, job(name="after-cancel"))
    await worker.wait_log(rf"job {doomed} started")
    cancelled = await store.cancel(doomed, tenant=TENANT)
    assert cancelled is not None
    assert cancelled.status == "cancelled"
    # Stopped through the cancellation feed, not discovered later by a refused write.
    await worker.wait_log(rf"job {doomed} cancelled, aborting it")
    await worker.wait_log(rf"job {doomed} stopped: cancelled")
    view = await finished(store, after)
    assert view.status == "succeeded"
    view = await status_of(store, doomed, "cancelled")
    assert view.result.error == codes.CANCELLED
    assert view.turns == ()
    assert await job_ends(store, doomed) == 1
    assert not worker.logged(rf"job {doomed}: stale")


async def test_a_worker_without_a_redis_url_refuses_to_start(spawn: Spawn) -> None:
    worker = spawn(env={"REPROMPT_REDIS_URL": None})
    assert await worker.exit_code() == 2
    assert "REPROMPT_REDIS_URL is not set" in worker.log()


def tool_job(script: list[Any], *, name: str) -> dict[str, Any]:
    """A job whose model calls the client tool ``lookup`` as ``script`` says."""
    spec = job(name=name)
    answer = {"city": "Oslo", "population": 709_000}
    directive = json.dumps({"script": script, "counter": "requests", "expect": answer})
    spec["task"] = spec["task"].split("\n")[0] + f"\n[[sim {directive}]]"
    spec["budget"] = {"maxTurns": 3}
    spec["tools"] = [{"name": "lookup", "parameters": {"type": "object"}}]
    return spec


LOOKUP = {"call": [{"name": "lookup", "arguments": {"q": "Oslo"}}]}


async def test_a_worker_killed_right_after_a_pause_loses_nothing(
    store: Store, spawn: Spawn
) -> None:
    first = await spawn().ready()
    job_id = await submit(store, tool_job([LOOKUP, "ok"], name="pause-kill"))
    await first.wait_log(rf"job {job_id} requires_action")
    first.send(signal.SIGKILL)
    assert await first.exit_code() == -signal.SIGKILL
    paused = await status_of(store, job_id, "requires_action")
    assert paused.required_action is not None
    (call,) = paused.required_action.tool_calls
    view, _ = await store.submit_outputs(
        job_id, tenant=TENANT, outputs=[ToolOutput(tool_call_id=call.id, output={"n": 1})]
    )
    assert view is not None
    second = spawn()
    done = await finished(store, job_id)
    assert done.status == "succeeded", done.result
    assert [t.type for t in done.turns] == ["normal", "normal"]
    assert done.attempts == 1  # the pause gave its attempt back; nothing was lost
    await second.wait_log(rf"job {job_id} succeeded")  # logged after the commit
    assert await job_ends(store, job_id) == 1


async def test_a_worker_killed_after_resuming_is_resumed_again_from_the_checkpoint(
    store: Store, spawn: Spawn
) -> None:
    first = await spawn().ready()
    job_id = await submit(store, tool_job([LOOKUP, "slow", "ok"], name="resume-kill"))
    paused = await status_of(store, job_id, "requires_action")
    assert paused.required_action is not None
    (call,) = paused.required_action.tool_calls
    await store.submit_outputs(
        job_id, tenant=TENANT, outputs=[ToolOutput(tool_call_id=call.id, output={"n": 2})]
    )
    # The resumed run waits on a slow answer: kill it there.
    await first.wait_log(rf"job {job_id} started: attempt 1\b.*", within=30)
    await status_of(store, job_id, "in_progress")

    async def resumed_turn_started() -> bool:  # the resumed turn's call: the slow answer
        return (await names(store, job_id)).count("turn_start") >= 2

    await eventually(resumed_turn_started, what="the resumed turn's call")
    first.send(signal.SIGKILL)
    spawn()
    done = await finished(store, job_id)
    assert done.status == "succeeded", done.result
    assert done.attempts == 2
    assert done.turns[0].type == "normal"
    assert done.turns[-1].type == "normal"
    tool_messages = [m.content for m in done.transcript if m.role == "tool"]
    assert tool_messages == ['{"n": 2}']  # the same outputs, once
    assert await job_ends(store, job_id) == 1
