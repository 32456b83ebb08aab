"""Leases that run out: heartbeats renew a worker's, the reaper takes back expired ones.

    lost = await leases.heartbeats([(c.job_id, c.token) for c in held])  # every lease at once
    reaped = await leases.reap()   # any worker may: each batch is one script

An expired lease requeues its job (front of the queue, the attempt counted) or, after
``max_attempts``, fails it ``worker-lost``; an expired ``requires_action`` requeues the
job without outputs.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from typing import Final

from app.core.wire import codes
from app.core.wire.envelope import Envelope
from app.core.wire.events import JobEnded, QueueEvent
from app.store.errors import edge
from app.store.ids import shard_of
from app.store.keys import ShardKeys
from app.store.lane import OnLane
from app.store.protocol import (
    EXPIRE,
    HEARTBEAT,
    HEARTBEATS,
    REAP,
    ExpireArgs,
    ExpireKeys,
    HeartbeatArgs,
    HeartbeatKeys,
    HeartbeatsArgs,
    HeartbeatsKeys,
    ReapArgs,
    ReapKeys,
)
from app.store.records import ReapResult, event_json, text

_REAP_BATCH: Final = 100
# The most leases one heartbeat script renews: about a millisecond of Redis per script.
HEARTBEAT_BATCH: Final = 1000


class Expiry(OnLane):
    """The heartbeats and the reaper of ``Leases``."""

    @edge
    async def heartbeat(self, job_id: str, token: int) -> bool:
        """Extend the lease by ``lease_ms``; ``False``: the lease is lost, stop working."""
        shard = self.shard_of(job_id)
        reply = await self.scripts.run(
            HEARTBEAT,
            HeartbeatKeys(job=shard.job(job_id), leases=shard.leases),
            HeartbeatArgs(id=job_id, token=token, lease_ms=self.options.lease_ms),
        )
        return bool(int(reply))

    @edge
    async def heartbeats(
        self, held: Sequence[tuple[str, int]], *, batch: int = HEARTBEAT_BATCH
    ) -> set[str]:
        """Extend every ``(job_id, token)``'s lease; the ids whose lease is lost.

        One script per shard and ``batch`` jobs, sent together, each lease fenced by its
        token (a lost one is left alone). If any script fails this raises, though the
        others may have renewed their leases.
        """
        by_shard: dict[int, list[tuple[str, int]]] = {}
        for job_id, token in held:
            by_shard.setdefault(shard_of(job_id), []).append((job_id, token))
        calls = []
        for index, jobs in by_shard.items():
            shard = self.keys.shard(index)
            keys = HeartbeatsKeys(leases=shard.leases)
            args = HeartbeatsArgs(job_prefix=shard.job_prefix, lease_ms=self.options.lease_ms)
            for start in range(0, len(jobs), batch):
                pairs: list[str | int] = []
                for job_id, token in jobs[start : start + batch]:
                    pairs += (job_id, token)
                calls.append(self._lane_scripts.run(HEARTBEATS, keys, args, pairs))
        lost: set[str] = set()
        for reply in await asyncio.gather(*calls, return_exceptions=True):
            if isinstance(reply, BaseException):
                raise reply
            lost.update(text(job_id) for job_id in reply)
        return lost

    @edge
    async def reap(self, now_ms: int | None = None) -> ReapResult:
        """Take back every shard's jobs whose lease or ``requires_action`` expired.

        ``now_ms`` overrides the server clock for the lease test only (tests).
        """
        result = ReapResult(requeued=[], failed=[], expired=[])
        for shard in self.keys.all_shards():
            result.expired.extend(await self._expire_on(shard))
            await self._reap_on(shard, now_ms, result)
        return result

    async def _expire_on(self, shard: ShardKeys) -> list[str]:
        """Requeue, without outputs, the shard's jobs whose ``requires_action`` expired."""
        event = QueueEvent(status="queued", reason="tool-timeout")
        args = ExpireArgs(
            job_prefix=shard.job_prefix,
            queue_prefix=shard.queue_prefix,
            batch=_REAP_BATCH,
            requeued_event=event_json("job_requeued", event.model_dump_json()),
            queued_result=self._queued_result,
            work_channel=self.channels["work"],
            shard=shard.index,
            events_channel=self.channels["events"],
        )
        keys = ExpireKeys(actions=shard.actions, ring=shard.ring)
        expired: list[str] = []
        while True:
            ids, scanned = await self._lane_scripts.run(EXPIRE, keys, args)
            expired.extend(text(i) for i in ids)
            if int(scanned) < _REAP_BATCH:
                return expired

    async def _reap_on(self, shard: ShardKeys, now_ms: int | None, into: ReapResult) -> None:
        """Requeue (front, attempt counted) or fail (``worker-lost``) the shard's jobs whose
        lease expired."""
        options = self.options
        result = Envelope.failure(
            codes.WORKER_LOST,
            f"the worker running this job was lost {options.max_attempts} times "
            "(its lease expired each time); the job is not tried again",
        )
        ended = JobEnded(status="failed", result=result)
        args = ReapArgs(
            cutoff_ms="" if now_ms is None else now_ms,
            max_attempts=options.max_attempts,
            job_prefix=shard.job_prefix,
            queue_prefix=shard.queue_prefix,
            failed_result=result.model_dump_json(),
            failed_event=event_json("job_end", ended.model_dump_json()),
            retention_s=options.retention_s,
            queued_result=self._queued_result,
            batch=_REAP_BATCH,
            done_channel=self.channels["done"],
            work_channel=self.channels["work"],
            shard=shard.index,
        )
        keys = ReapKeys(leases=shard.leases, ring=shard.ring, running=shard.running)
        while True:
            again, dead, scanned = await self._lane_scripts.run(REAP, keys, args)
            into.requeued.extend(text(i) for i in again)
            into.failed.extend(text(i) for i in dead)
            if int(scanned) < _REAP_BATCH:
                return
