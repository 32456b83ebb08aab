"""The API's side of the store: ``JobStore``, its parts joined, and the commands on a job.

store = JobStore(redis, options)
job, created = await store.submit(tenant="acme", spec=body)     # submitting.py
job = await store.wait(job.id, tenant="acme", wait_ms=30_000)   # reading.py
jobs, cursor = await store.list(tenant="acme")                  # listing.py
job = await store.cancel(job.id, tenant="acme")                 # here
"""

from __future__ import annotations

import hashlib
import json
import time
from collections.abc import Sequence
from typing import ClassVar, Final

from redis.asyncio.cluster import RedisCluster
from redis.exceptions import RedisClusterException, RedisError

from app.core.turn.checkpoint import RequiredAction, ToolOutput
from app.core.wire import codes
from app.core.wire.envelope import CANCELLED_BY_CLIENT, Envelope
from app.core.wire.errors import InvalidInput
from app.core.wire.events import JobEnded, ToolOutputsEvent
from app.store.errors import NotWaiting, edge
from app.store.ids import is_job_id
from app.store.listing import STATUSES, Listing
from app.store.protocol import (
    CANCEL,
    OUTPUTS,
    STATS,
    CancelArgs,
    CancelKeys,
    OutputsArgs,
    OutputsKeys,
    StatsArgs,
    StatsKeys,
)
from app.store.records import JobView, StoredOutputs, event_json, text
from app.store.sessions import ConsoleSessions
from app.store.submitting import Submitting, body_digest

__all__ = ["STATUSES", "JobStore", "body_digest", "outputs_digest"]

_STATS_TENANTS: Final = 1000


class JobStore(Submitting, Listing):
    """Jobs as the API sees them. A job of another tenant does not exist for the caller."""

    # long-polls (``wait``, ``submit(wait_ms=)``), ``events``
    HEARS: ClassVar[tuple[str, ...]] = ("done", "events")

    @edge
    async def cancel(self, job_id: str, *, tenant: str) -> JobView | None:
        """Cancel a queued or running job (terminal at once); a finished job stays as it is.

        A running job's claim is revoked (its worker's later writes are refused) and its id
        is published to the workers so the turn loop stops.
        """
        if not is_job_id(job_id):
            return None
        shard = self.shard_of(job_id)
        result = Envelope.failure(codes.CANCELLED, CANCELLED_BY_CLIENT)
        ended = JobEnded(status="cancelled", result=result)
        outcome = await self.scripts.run(
            CANCEL,
            CancelKeys(
                job=shard.job(job_id),
                tenant_queue=shard.tenant_queue(tenant),
                ring=shard.ring,
                leases=shard.leases,
                running=shard.running,
                actions=shard.actions,
            ),
            CancelArgs(
                id=job_id,
                tenant=tenant,
                result=result.model_dump_json(),
                job_end=event_json("job_end", ended.model_dump_json()),
                retention_s=self.options.retention_s,
                done_channel=self.channels["done"],
                cancel_channel=self.channels["cancel"],
                finished_ms=int(time.time() * 1000),
            ),
        )
        if text(outcome) == "missing":
            return None
        return await self.get(job_id, tenant=tenant)

    @edge
    async def submit_outputs(
        self, job_id: str, *, tenant: str, outputs: Sequence[ToolOutput]
    ) -> tuple[JobView | None, bool]:
        """Answer a job's ``requires_action``: ``(job, replayed)``; ``(None, False)``: no job.

        Every call of the pause must be answered once (else ``InvalidInput`` naming
        ``outputs``); the same outputs again answer as the first time did (replayed);
        other outputs for an answered pause, a job not waiting, or outputs after the pause's
        ``expiresAt``, raise ``NotWaiting``.
        """
        view = await self.get(job_id, tenant=tenant)
        if view is None:
            return None, False
        digest = outputs_digest(outputs)
        action = view.required_action
        if action is not None:
            _check_outputs(action, outputs)
        shard = self.shard_of(job_id)
        stored = StoredOutputs(outputs=tuple(outputs), received_ms=int(time.time() * 1000))
        event = ToolOutputsEvent(tool_call_ids=tuple(o.tool_call_id for o in outputs))
        reply = await self.scripts.run(
            OUTPUTS,
            OutputsKeys(
                job=shard.job(job_id),
                tenant_queue=shard.tenant_queue(tenant),
                ring=shard.ring,
                actions=shard.actions,
            ),
            OutputsArgs(
                id=job_id,
                tenant=tenant,
                outputs=stored.model_dump_json(),
                digest=digest,
                pause=view.pauses,
                outputs_event=event_json("tool_outputs_received", event.model_dump_json()),
                queued_result=self._queued_result,
                work_channel=self.channels["work"],
                shard=shard.index,
                events_channel=self.channels["events"],
            ),
        )
        outcome = text(reply[0])
        if outcome == "missing":
            return None, False
        if outcome == "state":
            raise NotWaiting(text(reply[1]))
        if outcome == "expired":
            raise NotWaiting("requires_action", expired=True)
        return await self.get(job_id, tenant=tenant), outcome == "existing"

    @edge
    async def queue_stats(self) -> tuple[int, float]:
        """``(depth, age in seconds of the oldest queued job)`` over every shard."""
        depth, oldest_ms = 0, 0
        for shard in self.keys.all_shards():
            queued, age_ms, _ = await self.scripts.run(
                STATS,
                StatsKeys(ring=shard.ring),
                StatsArgs(
                    queue_prefix=shard.queue_prefix,
                    job_prefix=shard.job_prefix,
                    max_tenants=_STATS_TENANTS,
                ),
            )
            depth += int(queued)
            oldest_ms = max(oldest_ms, int(age_ms))
        return depth, oldest_ms / 1000

    @edge
    async def spec(self, job_id: str, *, tenant: str) -> str | None:
        """The job's spec as submitted (JSON text), None when not the tenant's (the console's
        "run again")."""
        if not is_job_id(job_id):
            return None
        spec, owner = await self._redis.hmget(self.shard_of(job_id).job(job_id), ["spec", "tenant"])
        if spec is None or owner is None or text(owner) != tenant:
            return None
        return text(spec)

    def console_sessions(self) -> ConsoleSessions:
        """The console's sign-in sessions, on this store's Redis."""
        return ConsoleSessions(self._redis, self.keys)

    async def ping(self) -> bool:
        """Whether Redis answers; on a cluster, whether every master does (each holds
        shards: PING alone asks one node)."""
        try:
            if isinstance(self._redis, RedisCluster):
                return bool(await self._redis.ping(target_nodes=RedisCluster.PRIMARIES))
            return bool(await self._redis.ping())
        except (RedisError, RedisClusterException, OSError):
            return False


def outputs_digest(outputs: Sequence[ToolOutput]) -> str:
    """The identity of an outputs body: SHA-256 of its canonical JSON."""
    canonical = json.dumps(
        [o.model_dump(mode="json") for o in outputs],
        sort_keys=True,
        separators=(",", ":"),
        ensure_ascii=False,
    )
    return hashlib.sha256(canonical.encode()).hexdigest()


def _check_outputs(action: RequiredAction, outputs: Sequence[ToolOutput]) -> None:
    """Each call of the pause answered exactly once, nothing else."""
    wanted = [call.id for call in action.tool_calls]
    given = [o.tool_call_id for o in outputs]
    twice = sorted({i for i in given if given.count(i) > 1})
    unknown = sorted(set(given) - set(wanted))
    missing = [i for i in wanted if i not in given]
    problems = []
    if twice:
        problems.append(f"answered more than once: {', '.join(twice)}")
    if unknown:
        problems.append(f"not a call this job waits for: {', '.join(unknown)}")
    if missing:
        problems.append(f"not answered: {', '.join(missing)}")
    if problems:
        raise InvalidInput("; ".join(problems), field="outputs")
