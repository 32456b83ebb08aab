"""requires_action in Redis: the pause lets go of the job, the outputs requeue it once, an
expired wait requeues it without outputs, a cancel ends it; all on a real redis-server."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import pytest
from redis.asyncio import Redis

from app.core.turn.checkpoint import Checkpoint, RequiredAction, ToolOutput
from app.core.turn.loop import Runtime, run_job
from app.core.turn.model import ToolCall
from app.core.wire.envelope import Progress
from app.core.wire.errors import InvalidInput
from app.core.wire.spec import JobSpec
from app.store import Claim, NotWaiting
from tests.both import Store
from tests.core.fakes import FakeClock, ScriptedClient, reply
from tests.store.helpers import (
    LONG_MS,
    after_lease,
    all_events,
    claim,
    complete,
    leases_key,
    names,
    server_ms,
    turn,
    watched,
)

TOOLS: list[dict[str, Any]] = [
    {"name": "lookup", "parameters": {"type": "object"}},
    {"name": "stock", "parameters": {"type": "object"}},
]
SPEC: dict[str, Any] = {
    "task": "Price?",
    "signature": "{price :float}",
    "tools": TOOLS,
    "budget": {"maxTurns": 3},
}


async def checkpoint() -> Checkpoint:
    """A real checkpoint: the loop paused on a turn that called both tools."""
    calls = [ToolCall("c1", "lookup", '{"sku": "A1"}'), ToolCall("c2", "stock", "{}")]
    client = ScriptedClient([reply(None, finish="tool_calls", tool_calls=calls)])
    result = await run_job(JobSpec.model_validate(SPEC), Runtime(client, clock=FakeClock()))
    assert result.paused is not None
    return result.paused


async def paused(
    redis: Redis, store: Store, *, expires_in_ms: int = 60_000
) -> tuple[Claim, Checkpoint]:
    job, _ = await store.submit(tenant="acme", spec=SPEC)
    lease = await claim(store)
    state = await checkpoint()
    action = RequiredAction.of(state, "2030-01-01T00:00:00.000Z")
    written = await store.pause(
        lease,
        state=state,
        action=action,
        expires_ms=await server_ms(redis) + expires_in_ms,
        progress=Progress(phase="requires_action"),
        turn=turn(1, type="normal", outcome="tool_calls"),
    )
    assert written
    assert lease.job_id == job.id
    return lease, state


OUTPUTS = [
    ToolOutput(tool_call_id="c1", output={"price": 9.5}),
    ToolOutput(tool_call_id="c2", output=3),
]


async def test_a_paused_job_holds_no_lease_and_shows_its_calls(redis: Redis, store: Store) -> None:
    lease, _ = await paused(redis, store)
    assert await redis.zscore(leases_key(store, lease.job_id), lease.job_id) is None
    view = await store.get(lease.job_id, tenant="acme")
    assert view is not None
    assert view.status == "requires_action"
    assert view.attempts == 0  # a pause is not a lost worker
    assert view.required_action is not None
    assert [(c.id, c.name, c.arguments) for c in view.required_action.tool_calls] == [
        ("c1", "lookup", {"sku": "A1"}),
        ("c2", "stock", {}),
    ]
    assert [t.outcome for t in view.turns] == ["tool_calls"]
    assert (await names(store, lease.job_id))[-1] == "requires_action"
    # nothing to claim, and the worker's later writes are refused
    assert await store.claim("w2") == []
    assert not await complete(store, lease)


async def test_a_long_poll_returns_when_the_job_pauses(redis: Redis, store: Store) -> None:
    job, _ = await store.submit(tenant="acme", spec=SPEC)
    lease = await claim(store)
    waiting = asyncio.create_task(store.wait(job.id, tenant="acme", wait_ms=LONG_MS))
    await watched(store, "done", job.id)
    assert not waiting.done()
    state = await checkpoint()
    await store.pause(
        lease,
        state=state,
        action=RequiredAction.of(state, "2030-01-01T00:00:00.000Z"),
        expires_ms=await server_ms(redis) + 60_000,
        progress=Progress(phase="requires_action"),
    )
    view = await waiting  # returned on the pause: waited out, it would hang
    assert view is not None
    assert view.status == "requires_action"


async def test_outputs_requeue_the_job_and_the_next_claim_resumes_it(
    redis: Redis, store: Store
) -> None:
    lease, state = await paused(redis, store)
    view, replayed = await store.submit_outputs(lease.job_id, tenant="acme", outputs=OUTPUTS)
    assert view is not None
    assert not replayed
    assert view.status == "queued"
    assert view.required_action is None
    resumed = await claim(store, "w2")
    assert resumed.job_id == lease.job_id
    assert resumed.attempt == lease.attempt  # the pause did not count as an attempt
    assert resumed.checkpoint == state
    assert resumed.outputs is not None
    assert resumed.outputs.by_call["c1"].output == {"price": 9.5}
    assert "tool_outputs_received" in await names(store, lease.job_id)


async def test_the_same_outputs_again_are_a_replay_and_other_outputs_a_conflict(
    redis: Redis, store: Store
) -> None:
    lease, _ = await paused(redis, store)
    await store.submit_outputs(lease.job_id, tenant="acme", outputs=OUTPUTS)
    view, replayed = await store.submit_outputs(lease.job_id, tenant="acme", outputs=OUTPUTS)
    assert view is not None
    assert replayed
    other = [OUTPUTS[0], ToolOutput(tool_call_id="c2", output=4)]
    with pytest.raises(NotWaiting):
        await store.submit_outputs(lease.job_id, tenant="acme", outputs=other)
    # requeued once: one job in the queue
    depth, _ = await store.queue_stats()
    assert depth == 1


@pytest.mark.parametrize(
    ("given", "needle"),
    [
        ([OUTPUTS[0]], "not answered: c2"),
        ([*OUTPUTS, ToolOutput(tool_call_id="c9", output=1)], "not a call this job waits for: c9"),
        ([OUTPUTS[0], OUTPUTS[0], OUTPUTS[1]], "answered more than once: c1"),
    ],
)
async def test_outputs_must_answer_each_call_once(
    redis: Redis, store: Store, given: list[ToolOutput], needle: str
) -> None:
    lease, _ = await paused(redis, store)
    with pytest.raises(InvalidInput, match=needle) as caught:
        await store.submit_outputs(lease.job_id, tenant="acme", outputs=given)
    assert caught.value.field == "outputs"
    view = await store.get(lease.job_id, tenant="acme")
    assert view is not None
    assert view.status == "requires_action"


async def test_another_tenant_cannot_answer(redis: Redis, store: Store) -> None:
    lease, _ = await paused(redis, store)
    assert await store.submit_outputs(lease.job_id, tenant="evil", outputs=OUTPUTS) == (
        None,
        False,
    )


async def test_an_expired_wait_requeues_the_job_without_outputs(redis: Redis, store: Store) -> None:
    lease, state = await paused(redis, store, expires_in_ms=-1)
    reaped = await store.reap()
    assert reaped.expired == [lease.job_id]
    resumed = await claim(store, "w2")
    assert resumed.checkpoint == state
    assert resumed.outputs is None
    events = await all_events(store, lease.job_id)
    requeued = [e.decoded() for e in events if e.name == "job_requeued"]
    assert requeued[-1]["reason"] == "tool-timeout"
    # too late now: the job is not waiting any more
    with pytest.raises(NotWaiting):
        await store.submit_outputs(lease.job_id, tenant="acme", outputs=OUTPUTS)


async def test_a_job_waiting_for_outputs_can_be_cancelled(redis: Redis, store: Store) -> None:
    lease, _ = await paused(redis, store)
    cancelled = await store.cancel(lease.job_id, tenant="acme")
    assert cancelled is not None
    assert cancelled.status == "cancelled"
    assert await redis.zcard(store.shard_of(lease.job_id).actions) == 0
    with pytest.raises(NotWaiting, match="cancelled"):
        await store.submit_outputs(lease.job_id, tenant="acme", outputs=OUTPUTS)
    assert (await store.reap()).expired == []


async def test_a_stale_pause_is_refused_but_its_paid_turn_kept(redis: Redis, store: Store) -> None:
    job, _ = await store.submit(tenant="acme", spec=SPEC)
    lease = await claim(store)
    await store.reap(now_ms=await after_lease(redis, store))  # the worker was "lost"
    state = await checkpoint()
    written = await store.pause(
        lease,
        state=state,
        action=RequiredAction.of(state, "2030-01-01T00:00:00.000Z"),
        expires_ms=0,
        progress=Progress(phase="requires_action"),
        turn=turn(1),
    )
    assert not written
    view = await store.get(job.id, tenant="acme")
    assert view is not None
    assert view.status == "queued"
    assert view.required_action is None
    assert [t.index for t in view.turns] == [1]  # the call was paid for: recorded


async def test_completion_drops_the_checkpoint(redis: Redis, store: Store) -> None:
    lease, _ = await paused(redis, store)
    await store.submit_outputs(lease.job_id, tenant="acme", outputs=OUTPUTS)
    resumed = await claim(store, "w2")
    assert await complete(store, resumed)
    key = store.shard_of(lease.job_id).job(lease.job_id)
    assert await redis.hmget(key, ["checkpoint", "outputs"]) == [None, None]
    stored = json.loads(await redis.hget(key, "turns") or "[]")
    assert len(stored) == 1
