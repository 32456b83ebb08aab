"""The worker's side of the store: claim, heartbeat, fenced writes, commit, release, reap.

    leases = Leases(redis, options)
    claim = await leases.claim("worker-1")            # None: queue empty
    if claim is None:
        await leases.wait_for_work(timeout_s=5)
    ok = await leases.record_turn(claim.job_id, claim.token, record, progress)
    ok = await leases.complete(claim.job_id, claim.token, envelope=..., history=...,
                               transcript=...)
    # ok is False when the lease was lost (reaped, cancelled): nothing was written

Every write checks, in the same script, that the job is ``in_progress`` under the claim's
fencing token: a paused worker that wakes after its lease was reaped (or the job
cancelled) writes nothing.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections.abc import AsyncGenerator, Sequence
from typing import Final

from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import RedisError
from redis.exceptions import TimeoutError as RedisTimeoutError

from app.core import codes
from app.core.conversation import TranscriptEntry
from app.core.envelope import Envelope, Progress
from app.core.events import JobEnded
from app.core.turn import Rejection, TurnRecord
from app.core.wire import Wire
from app.store.connection import WAKE_CAP, Role, dumps
from app.store.errors import edge
from app.store.ids import is_job_id
from app.store.records import Claim, JobView, ReapResult, text

_REAP_BATCH: Final = 100
_PUBSUB_POLL_S: Final = 10.0


class Leases(Role):
    """Jobs as workers see them: leased, written under a fencing token, committed once."""

    @edge
    async def claim(self, worker_id: str) -> Claim | None:
        """Lease the oldest queued job to ``worker_id``; ``None`` when the queue is empty."""
        reply = await self._run(
            "claim",
            [self.keys.queue, self.keys.leases, self.keys.fence],
            [
                self.keys.job_prefix,
                self.keys.events_prefix,
                worker_id,
                self.options.lease_ms,
                self.options.events_maxlen,
            ],
        )
        if not reply:
            return None
        job_id, token, attempt, spec, tenant, created_ms, model = list(reply)
        return Claim(
            job_id=text(job_id),
            token=int(token),
            attempt=int(attempt),
            spec=json.loads(spec),
            tenant=text(tenant),
            created_at_ms=int(created_ms),
            model=None if model is None else text(model),
        )

    @edge
    async def wait_for_work(self, timeout_s: float) -> None:
        """Sleep until a job is queued or requeued, or ``timeout_s`` passes (BLPOP, no polling)."""
        block_ms = self._block_ms(int(timeout_s * 1000))
        if block_ms <= 0:
            return
        await self._redis.blpop([self.keys.wake], timeout=block_ms / 1000)

    @edge
    async def heartbeat(self, job_id: str, token: int) -> bool:
        """Extend the lease by ``lease_ms``; ``False``: the lease is lost, stop working."""
        reply = await self._run(
            "heartbeat",
            [self.keys.job(job_id), self.keys.leases],
            [job_id, token, self.options.lease_ms],
        )
        return bool(int(reply))

    @edge
    async def record_event(
        self,
        job_id: str,
        token: int,
        name: str,
        data: Wire,
        *,
        progress: Progress | None = None,
    ) -> bool:
        """Append an event to the job's stream (trimmed to about ``events_maxlen``), fenced;
        with ``progress``, the in-progress envelope shows it from now on."""
        result = "" if progress is None else Envelope.in_progress(progress).model_dump_json()
        reply = await self._run(
            "event",
            [self.keys.job(job_id), self.keys.events(job_id)],
            [token, self.options.events_maxlen, name, data.model_dump_json(), result],
        )
        return reply is not None

    @edge
    async def record_turn(
        self, job_id: str, token: int, turn: TurnRecord, progress: Progress
    ) -> bool:
        """Append a turn record and set ``result`` to the in-progress envelope, fenced."""
        reply = await self._run(
            "turn",
            [self.keys.job(job_id), self.keys.turns(job_id)],
            [
                token,
                turn.model_dump_json(),
                Envelope.in_progress(progress).model_dump_json(),
            ],
        )
        return bool(int(reply))

    @edge
    async def complete(
        self,
        job_id: str,
        token: int,
        *,
        envelope: Envelope,
        history: Sequence[Rejection],
        transcript: Sequence[TranscriptEntry],
    ) -> bool:
        """Commit the final envelope, fenced; ``False``: stale, nothing was written.

        The job's state follows from the envelope (``Envelope.job_status``). Emits
        ``job_end`` and starts the retention clock on every key.
        """
        status = envelope.job_status
        if status == "in_progress":
            raise ValueError("complete() needs a final envelope")
        reply = await self._run(
            "complete",
            [
                self.keys.job(job_id),
                self.keys.leases,
                self.keys.turns(job_id),
                self.keys.events(job_id),
            ],
            [
                job_id,
                token,
                status,
                envelope.model_dump_json(),
                dumps([h.model_dump(mode="json") for h in history]),
                dumps([m.model_dump(mode="json") for m in transcript]),
                JobEnded(status=status, result=envelope).model_dump_json(),
                self.options.retention_s,
                self.options.events_maxlen,
            ],
        )
        return bool(int(reply))

    @edge
    async def release(self, job_id: str, token: int) -> bool:
        """Give a running job back (graceful drain): front of the queue, attempt not counted."""
        reply = await self._run(
            "release",
            [
                self.keys.job(job_id),
                self.keys.leases,
                self.keys.queue,
                self.keys.wake,
                self.keys.events(job_id),
            ],
            [job_id, token, self._queued_result, self.options.events_maxlen, WAKE_CAP],
        )
        return bool(int(reply))

    @edge
    async def reap(self, now_ms: int | None = None) -> ReapResult:
        """Requeue (front, attempt counted) or fail (``worker-lost``) jobs whose lease expired.

        ``now_ms`` overrides the server clock for the expiry test only (tests). Each batch is
        one script, so any number of workers may reap at the same time.
        """
        options = self.options
        result = Envelope.failure(
            codes.WORKER_LOST,
            f"the worker running this job was lost {options.max_attempts} times "
            "(its lease expired each time); the job is not tried again",
        )
        requeued: list[str] = []
        failed: list[str] = []
        while True:
            again, dead, scanned = await self._run(
                "reap",
                [self.keys.leases, self.keys.queue, self.keys.wake],
                [
                    "" if now_ms is None else now_ms,
                    options.max_attempts,
                    self.keys.job_prefix,
                    self.keys.turns_prefix,
                    self.keys.events_prefix,
                    result.model_dump_json(),
                    JobEnded(status="failed", result=result).model_dump_json(),
                    options.retention_s,
                    options.events_maxlen,
                    self._queued_result,
                    _REAP_BATCH,
                    WAKE_CAP,
                ],
            )
            requeued.extend(text(i) for i in again)
            failed.extend(text(i) for i in dead)
            if int(scanned) < _REAP_BATCH:
                return ReapResult(requeued=requeued, failed=failed)

    @edge
    async def result_of(self, job_id: str) -> JobView | None:
        """The job as stored, whoever owns it (to tell whether a commit landed)."""
        if not is_job_id(job_id):
            return None
        (view,) = await self._read([job_id])
        return view

    async def cancellations(self) -> AsyncGenerator[str, None]:
        """Ids of running jobs as they are cancelled (pub/sub), for workers; runs forever.

        An async generator: close it (``contextlib.aclosing``) to unsubscribe. Pub/sub is the
        fast path only: an id published while this subscriber reconnects is missed, and the
        worker then learns of the cancel from its next fenced write (which returns False).
        """
        backoff = 0.1
        while True:
            pubsub = self._redis.pubsub(ignore_subscribe_messages=True)
            try:
                await pubsub.subscribe(self.keys.cancel_channel)
                backoff = 0.1
                while True:
                    # A bounded wait lets redis-py run its health check on an idle connection.
                    message = await pubsub.get_message(
                        ignore_subscribe_messages=True, timeout=_PUBSUB_POLL_S
                    )
                    if message is not None and message.get("type") == "message":
                        yield text(message["data"])
            except (RedisConnectionError, RedisTimeoutError, OSError):
                await asyncio.sleep(backoff)
                backoff = min(backoff * 2, 5.0)
            finally:
                with contextlib.suppress(RedisError, OSError):
                    await pubsub.aclose()  # type: ignore[no-untyped-call]  # untyped in redis-py
