"""The worker's side of the store: claim, heartbeat, fenced writes, commit, release, reap.

    leases = Leases(redis, options)
    claims = await leases.claim("worker-1", n=8, register=True)  # [] when queues are empty
    if len(claims) < 8:                               # registered idle: a submit wakes it
        await leases.wait_for_work(timeout_s=5)       # or hands it a job, claimed for it:
    handed = await leases.handed()                    # (in a task of its own) those jobs
    lost = await leases.heartbeats([(c.job_id, c.token) for c in held])  # every lease at once
    ok = await leases.write(claim, turn=record, events=[...], progress=progress)
    ok = await leases.complete(claim, envelope=..., history=..., transcript=...)
    # ok is False when the claim is not ours any more (reaped, cancelled): nothing written

Every write checks, in the same script, that the job is ``in_progress`` under the claim's
token (its attempt number): a paused worker that wakes after its lease was reaped (or the
job cancelled) changes nothing. One exception, on purpose: a turn record is a paid call,
so it is kept whoever writes it, as long as the job has not ended.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import json
import logging
import secrets
import time
from collections import deque
from collections.abc import AsyncGenerator, Callable, Sequence
from enum import Enum
from typing import Any, ClassVar, Final

from pydantic import TypeAdapter
from redis.exceptions import RedisClusterException, RedisError

from app.core.turn.checkpoint import Checkpoint, RequiredAction
from app.core.turn.conversation import TranscriptEntry
from app.core.wire import codes
from app.core.wire.base import Wire
from app.core.wire.envelope import Envelope, Progress
from app.core.wire.events import JobEnded, QueueEvent
from app.core.wire.record import Rejection, Spend, TurnRecord
from app.store.connection import (
    DONE_VIEW_MAX_BYTES,
    HANDOFF_SLOTS,
    WAKE_RENEW_S,
    WAKE_STALE_MS,
    RedisClient,
    Role,
    StoreOptions,
    dumps,
)
from app.store.errors import StoreUnavailable, edge
from app.store.hub import ANY, Watch
from app.store.ids import is_job_id, shard_of
from app.store.records import Claim, JobView, ReapResult, checkpoint, outputs, spend, text
from app.store.scripts import Scripts
from app.tracecontext import TraceContext

log = logging.getLogger(__name__)

_REAP_BATCH: Final = 100
# The most jobs one claim leases (a larger ``n`` is cut to it): the claim script keeps
# Redis busy, and its reply (every spec) keeps the worker busy, in proportion; and the
# script cannot lease more than about 4000 jobs in one ZADD.
MAX_CLAIM: Final = 500
# How long closing waits to take this worker off the idle lists (best effort).
_UNLIST_S: Final = 2.0
# What ``unlist`` sends itself on its own channel, after the hand-offs before its LREMs.
_UNLISTED: Final = "u"
# The most leases one heartbeat script renews: about a millisecond of Redis per script.
HEARTBEAT_BATCH: Final = 1000
# A commit's history and transcript as JSON in one call each (the same text as
# ``dumps`` of each item's ``model_dump``, in a third of the time).
_HISTORY: Final = TypeAdapter(list[Rejection])
_TRANSCRIPT: Final = TypeAdapter(list[TranscriptEntry])


class Written(Enum):
    """What a fenced write did."""

    OURS = 1  # written
    STALE = 0  # not ours any more (lease lost, or cancelled): only a turn record was kept
    ENDED = -1  # the job had already ended: nothing was written

    def __bool__(self) -> bool:
        return self is Written.OURS


class Leases(Role):
    """Jobs as workers see them: leased, written under a fencing token, committed once."""

    # ``wait_for_work``, ``cancellations``, deliveries
    HEARS: ClassVar[tuple[str, ...]] = ("work", "cancel", "outbox")

    _turn = itertools.count()

    def __init__(
        self,
        redis: RedisClient,
        options: StoreOptions | None = None,
        *,
        lane: RedisClient | None = None,
        **fields: Any,
    ) -> None:
        """``lane``: a client of its own (owned and closed by the caller) for claims,
        heartbeats and reaps, so they never queue behind job writes and commits, which a
        worker holding thousands of jobs sends in bursts larger than its pool."""
        # This object's own wake-up channel (``Keys.wake_channel``): a submit that finds it
        # on a shard's idle list wakes it alone.
        self._token = secrets.token_hex(6)
        super().__init__(redis, options, **fields)
        # The lane's scripts, auto-pipelined on the lane's client; the role's without one.
        self._lane = redis if lane is None else lane
        self._own_lane = None if lane is None else Scripts(lane)
        self._lane_scripts = self.scripts if self._own_lane is None else self._own_lane
        self._work: Watch | None = None
        self._listening = False
        # Shard → (its entry on the shard's idle list, when it was written: monotonic s,
        # the subscription's generation then: a submit drops the entry of a worker it
        # cannot reach, so after a reconnect the entry is written again), and how many
        # copies of it are listed (one per slot it offers; each hand-off takes one).
        self._idle: dict[int, tuple[str, float, int]] = {}
        self._copies: dict[int, int] = {}
        # What this object is listed as ("<token>/<lease ms>/<cap>/<worker id>"), set by
        # the first claim that lists it; whether it is to be listed (``unlist`` ends it).
        self._head = ""
        self._listing = False
        self._unlisted = False  # ``unlist`` was called: never listed again
        # Jobs handed to this object by a submit (lua/submit.lua), as their messages came
        # (shard, payload).
        self._handed: deque[tuple[int, str]] = deque()
        self._handed_signal = asyncio.Event()  # jobs in ``_handed``
        self._unlisted_heard = asyncio.Event()  # ``unlist``'s own message came back
        self.handed_total = 0  # hand-offs heard so far
        # Called as a hand-off's message is read (in that pass of the loop), before
        # ``handed`` hears of it: a worker may ``take_handed`` there and start the jobs now.
        self.on_handed: Callable[[], None] | None = None
        self.woken = False  # whether the last ``wait_for_work`` ended by a message
        self.handed_only = False  # ... and only by hand-offs (``handed`` has the jobs)

    @property
    def wake_token(self) -> str:
        """What this object is listed as on the idle lists (``"<token> <ms>"`` entries)."""
        return self._token

    @property
    def wake_channel(self) -> str:
        return self.keys.wake_channel(self._token)

    def _own_channels(self) -> list[str]:
        return [self.wake_channel]

    def _work_watch(self) -> Watch:
        """The role's standing watch of the ``work`` channel and its own (made on first
        use)."""
        if self._work is None:
            self._work = self.hub.standing(self.channels["work"])
            self.hub.listen(self.wake_channel, self._heard_own)
        return self._work

    def _heard_own(self, key: str, payload: bytes | None) -> None:
        """A message on this object's own channel: a wake-up (the shard), or a hand-off.
        Both end a ``wait_for_work``; a hand-off's only in the next pass of the loop, after
        the job it brings has started (``handed`` wakes first): the idle worker's wait
        then goes on, and it is not on the job's way to its model call."""
        watch = self._work
        if watch is None:  # pragma: no cover - listening starts with the watch
            return
        if key == _UNLISTED:
            self._unlisted_heard.set()
            return
        if not key.startswith("h") or not key[1:].isdigit() or payload is None:
            watch.notify(key)
            return
        self._heard_handoff(int(key[1:]), payload)
        asyncio.get_running_loop().call_soon(watch.notify, key)

    def _heard_handoff(self, index: int, payload: bytes) -> None:
        """A hand-off on shard ``index``: the copy of its entry the submit took off the
        list, the claimed job's values but the spec (JSON), and the spec, a line each
        (lua/submit.lua)."""
        try:
            text = payload.decode()
        except UnicodeDecodeError:  # not ours to read: its lease runs out, the reaper requeues
            log.error("a job handed to this worker on shard %d is not UTF-8", index)
            return
        entry, _, job = text.partition("\n")
        held = self._idle.get(index)
        if held is not None and held[0] == entry:  # a copy of the entry it holds (not older)
            self._took(index, 1)
        self._handed.append((index, job))
        self.handed_total += 1
        if self.on_handed is not None:
            try:
                self.on_handed()
            except Exception:  # the subscription reads on; ``handed`` has what is left
                log.exception("starting a job handed to this worker failed")
        if self._handed:  # not all taken by ``on_handed``: ``handed`` has them
            self._handed_signal.set()

    @property
    def pending_handed(self) -> int:
        """How many jobs handed over wait in ``take_handed``."""
        return len(self._handed)

    def take_handed(self, limit: int | None = None) -> list[Claim]:
        """The jobs handed to this object since the last call (each already claimed for
        it: start it, or ``release`` it), at once; at most ``limit`` of them (the first)."""
        claims = []
        taken = 0
        while self._handed and (limit is None or taken < limit):
            taken += 1
            index, job = self._handed.popleft()
            head, _, spec = job.partition("\n")
            try:
                values = json.loads(head)
                values.insert(2, spec)
                claims.append(_claim(values))
            except (ValueError, TypeError, IndexError) as exc:  # not ours to read: its lease
                log.error("a job handed to this worker on shard %d is unreadable: %r", index, exc)
        if not self._handed:
            self._handed_signal.clear()
        return claims

    async def handed(self) -> list[Claim]:
        """Wait for jobs handed to this object (``take_handed``); at least one."""
        self._work_watch()
        while True:
            claims = self.take_handed()
            if claims:
                return claims
            await self._handed_signal.wait()

    async def _listen(self) -> None:
        """Subscribe once: a wake-up published before would reach nobody."""
        if not self._listening:
            watch = self._work_watch()
            await self.hub.start()
            self._listening = True
            if not any(watch.messages):  # only the wake-up of the first subscription
                watch.reset()

    async def _control(
        self, name: str, keys: Sequence[str], args: Sequence[str | int | float]
    ) -> Any:
        """Run script ``name`` on the lane (``scripts`` is on the shared pool)."""
        return await self._lane_scripts.run(name, keys, args)

    @edge
    async def claim(
        self, worker_id: str, n: int = 1, *, first: int | None = None, register: bool = False
    ) -> list[Claim]:
        """Lease up to ``n`` queued jobs (at most ``MAX_CLAIM``), taking shards and, within
        one, tenants in turn.

        ``first`` is the shard to look at first (a wake-up names where work was queued).
        With ``register``, a shard whose queues run dry before ``n`` jobs puts this object
        on its idle list (a claim that gets all ``n`` takes it off): a submit there wakes
        it alone, on its own channel, where the shared ``work`` channel wakes every worker
        (lua/submit.lua). For a worker that waits with ``wait_for_work`` after a short
        claim.
        """
        n = min(n, MAX_CLAIM)
        if register:
            await self._listen()
            self._listing = not self._unlisted
            self._head = (
                f"{self._token}/{self.options.lease_ms}/{self.options.max_in_flight}/{worker_id}"
            )
        listed = register and self._listing
        generation = self.hub.generation
        # Wake-ups from here on may be for jobs this claim does not find: the next
        # ``wait_for_work`` returns at once for them, however soon they arrive.
        self._work_watch().reset()
        shards = self.keys.shards
        start = next(self._turn) if first is None else first
        claims: list[Claim] = []
        for step in range(shards):
            index = (start + step) % shards
            shard = self.keys.shard(index)
            held = self._idle.get(index)
            renew = held is not None and (
                time.monotonic() - held[1] >= WAKE_RENEW_S or held[2] != generation
            )
            reply = await self._control(
                "claim",
                [shard.ring, shard.leases, shard.running, shard.idle],
                [
                    shard.job_prefix,
                    shard.queue_prefix,
                    worker_id,
                    self.options.lease_ms,
                    n - len(claims),
                    self.options.max_in_flight,
                    self._head if listed else "",
                    "" if held is None else held[0],
                    "1" if renew else "",
                    self.channels["work"],
                    index,
                    WAKE_STALE_MS,
                    "1" if self.exact_publish else "",
                    # A cluster hands nothing over (lua/submit.lua): one copy, for wake-ups.
                    HANDOFF_SLOTS if self.exact_publish else 1,
                ],
            )
            extra = len(reply) % 10
            if extra:  # the registration changed: its new entry and copies, or ''
                entry = text(reply[-extra])
                if entry:
                    self._idle[index] = (entry, time.monotonic(), generation)
                    self._copies[index] = int(reply[-1])
                else:
                    self._idle.pop(index, None)
                    self._copies.pop(index, None)
                reply = reply[:-extra]
            got = len(reply) // 10
            if got and not extra and index in self._idle and self.exact_publish:
                self._took(index, got)  # their slots: as many copies off (lua/claim.lua)
            for i in range(0, len(reply), 10):
                claims.append(_claim(reply[i : i + 10]))
            if len(claims) >= n:
                break
        return claims

    async def wait_for_work(self, timeout_s: float) -> int | None:
        """Wait until a job is queued or requeued (a message on the ``work`` channel), or
        ``timeout_s`` passes; the shard the work is on, when known.

        Returns at once when such a message came since the last ``claim`` began: a submit
        publishes only when its tenant's queue was empty (lua/submit.lua), so a wake-up
        that arrives between a claim that found nothing and this wait must not be lost.
        A job handed to this object ends the wait too (``woken`` and ``handed_only``: no
        claim is needed for it; ``handed`` has it).
        """
        watch = self._work_watch()
        await self._listen()
        self.woken = await watch.wait(timeout_s)
        self.handed_only = False
        if self.woken:
            keys = watch.drain()  # a hand-off's message notifies this watch once
            self.handed_only = bool(keys) and all(key.startswith("h") for key in keys)
            shards = [key for key in keys if key.isdigit()]
            return int(shards[-1]) if shards else None
        return None

    def _took(self, index: int, n: int) -> None:
        """``n`` copies of its entry on shard ``index``'s list taken (by hand-offs or its
        claim); with none left it is off that list: a commit or its next short claim lists
        it anew."""
        self._copies[index] = left = max(0, self._copies.get(index, n) - n)
        if not left:
            del self._idle[index]

    @property
    def listed(self) -> bool:
        """Whether this object is on some shard's idle list (as far as it knows)."""
        return bool(self._idle)

    async def leave(self) -> None:
        """Leave every idle list for now, every copy (a worker with no free slot: submits
        would hand it jobs it could only release). Its next claim that comes back short
        lists it again. A job handed over before a shard's ``LREM`` still comes
        (``take_handed``)."""
        held, self._idle = self._idle, {}
        self._copies.clear()
        for index, (entry, _, _) in held.items():
            await self._lane.lrem(self.keys.shard(index).idle, 0, entry)

    async def unlist(self, wait_s: float = 1.0) -> None:
        """Leave every idle list for good (a worker that stops): no submit hands this
        object a job from here on. A job a submit handed over before that is waited for,
        up to ``wait_s``: it is in ``take_handed`` then, to be released. (After the
        ``LREM``s a message of its own goes to its channel: the hand-offs published before
        come before it, on the one subscription. Not on a cluster, which hands nothing
        over.)"""
        self._listing, self._unlisted = False, True
        await self.leave()
        if not self.exact_publish:
            return
        self._unlisted_heard.clear()
        await self._lane.publish(self.wake_channel, _UNLISTED)
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(wait_s):
                await self._unlisted_heard.wait()

    async def aclose(self) -> None:
        """Leave every idle list (best effort: a submit drops a dead worker's entry anyway)
        and stop the subscription."""
        self._listing = False
        with contextlib.suppress(
            TimeoutError, StoreUnavailable, RedisError, RedisClusterException, OSError
        ):
            async with asyncio.timeout(_UNLIST_S):
                await self.leave()
        await super().aclose()
        if self._own_lane is not None:
            await self._own_lane.aclose()

    @edge
    async def heartbeat(self, job_id: str, token: int) -> bool:
        """Extend the lease by ``lease_ms``; ``False``: the lease is lost, stop working."""
        shard = self.shard_of(job_id)
        reply = await self.scripts.run(
            "heartbeat",
            [shard.job(job_id), shard.leases],
            [job_id, token, self.options.lease_ms],
        )
        return bool(int(reply))

    @edge
    async def heartbeats(
        self, held: Sequence[tuple[str, int]], *, batch: int = HEARTBEAT_BATCH
    ) -> set[str]:
        """Extend the lease of every ``(job_id, token)`` in ``held`` by ``lease_ms``, each
        fenced by its token, in one script per shard and ``batch`` jobs, sent together; the
        ids whose lease is lost (stop working on them). Their leases are left alone.

            lost = await leases.heartbeats([(claim.job_id, claim.token), ...])

        If any script fails this raises, though the others may have renewed their leases.
        """
        by_shard: dict[int, list[tuple[str, int]]] = {}
        for job_id, token in held:
            by_shard.setdefault(shard_of(job_id), []).append((job_id, token))
        calls = []
        for index, jobs in by_shard.items():
            shard = self.keys.shard(index)
            for start in range(0, len(jobs), batch):
                args: list[str | int] = [shard.job_prefix, self.options.lease_ms]
                for job_id, token in jobs[start : start + batch]:
                    args += (job_id, token)
                calls.append(self._control("heartbeats", [shard.leases], args))
        lost: set[str] = set()
        for reply in await asyncio.gather(*calls, return_exceptions=True):
            if isinstance(reply, BaseException):
                raise reply
            lost.update(text(job_id) for job_id in reply)
        return lost

    @edge
    async def write(
        self,
        claim: Claim,
        *,
        progress: Progress,
        turn: TurnRecord | None = None,
        events: Sequence[tuple[str, Wire]] = (),
    ) -> Written:
        """Record a turn (paid: kept even if the claim is stale), append events and show
        ``progress`` in the in-progress envelope (fenced), in one script."""
        shard = self.shard_of(claim.job_id)
        reply = await self.scripts.run(
            "write",
            [shard.job(claim.job_id)],
            [
                claim.token,
                "" if turn is None else turn.model_dump_json(),
                "" if turn is None else Spend.of(turn).model_dump_json(),
                ",".join(_event(name, data.model_dump_json()) for name, data in events),
                Envelope.in_progress(progress).model_dump_json(),
                self.channels["events"],
                claim.job_id,
            ],
        )
        return Written(int(reply))

    @edge
    async def complete(
        self,
        claim: Claim,
        *,
        envelope: Envelope,
        history: Sequence[Rejection],
        transcript: Sequence[TranscriptEntry],
        turn: TurnRecord | None = None,
        events: Sequence[tuple[str, Wire]] = (),
        room: int = 0,
    ) -> Written:
        """Commit the final envelope (with the last turn and events not yet written), fenced.

        The job's state follows from the envelope (``Envelope.job_status``). Appends
        ``job_end``, frees the lease, starts the retention clock and tells the waiters.
        ``room``: the free slots the worker has once this job's frees. Listed on the job's
        shard with fewer copies of its entry than that (up to ``HANDOFF_SLOTS``: the
        hand-offs took them), it lists one more in the same script.
        """
        status = envelope.job_status
        if status == "in_progress":
            raise ValueError("complete() needs a final envelope")
        shard = self.shard_of(claim.job_id)
        # The job_end event ({"status", "result"}: ``JobEnded``) is made by the script from
        # the result it stores: the envelope is serialised and sent once.
        appended = [_event(name, data.model_dump_json()) for name, data in events]
        finished_ms = int(time.time() * 1000)
        keys = [shard.job(claim.job_id), shard.leases, shard.running]
        relist: list[str] = []
        copies = self._copies.get(shard.index)  # None: not listed there
        if self._listing and copies is not None and copies < min(room, HANDOFF_SLOTS):
            held = self._idle.get(shard.index)
            if held is None:  # the hand-offs took its last copy: listed anew
                held = (f"{self._head} {finished_ms}", time.monotonic(), self.hub.generation)
                self._idle[shard.index] = held
            keys.append(shard.idle)
            relist.append(held[0])
            self._copies[shard.index] = copies + 1
        reply = await self.scripts.run(
            "complete",
            keys,
            [
                claim.job_id,
                claim.token,
                status,
                envelope.model_dump_json(),
                _HISTORY.dump_json(list(history)).decode() if history else "[]",
                _TRANSCRIPT.dump_json(list(transcript)).decode(),
                "" if turn is None else turn.model_dump_json(),
                "" if turn is None else Spend.of(turn).model_dump_json(),
                ",".join(appended),
                self.options.retention_s,
                self.channels["done"],
                finished_ms,
                DONE_VIEW_MAX_BYTES,
                *relist,
            ],
        )
        return Written(int(reply))

    @edge
    async def pause(
        self,
        claim: Claim,
        *,
        state: Checkpoint,
        action: RequiredAction,
        expires_ms: int,
        progress: Progress,
        turn: TurnRecord | None = None,
        events: Sequence[tuple[str, Wire]] = (),
    ) -> Written:
        """Put a running job in ``requires_action`` (fenced): the checkpoint and the calls
        kept with it, the lease freed, the waiters told. ``expires_ms`` (epoch) is when the
        reaper takes it back without outputs."""
        shard = self.shard_of(claim.job_id)
        appended = [_event(name, data.model_dump_json()) for name, data in events]
        appended.append(_event("requires_action", action.model_dump_json()))
        reply = await self.scripts.run(
            "pause",
            [shard.job(claim.job_id), shard.leases, shard.running, shard.actions],
            [
                claim.job_id,
                claim.token,
                state.model_dump_json(),
                action.model_dump_json(),
                Envelope.in_progress(progress).model_dump_json(),
                "" if turn is None else turn.model_dump_json(),
                "" if turn is None else Spend.of(turn).model_dump_json(),
                ",".join(appended),
                expires_ms,
                self.channels["done"],
                self.channels["events"],
            ],
        )
        return Written(int(reply))

    @edge
    async def release(self, claim: Claim) -> bool:
        """Give a running job back (graceful drain): front of its tenant's queue, the
        attempt not counted."""
        shard = self.shard_of(claim.job_id)
        reply = await self.scripts.run(
            "release",
            [
                shard.job(claim.job_id),
                shard.leases,
                shard.tenant_queue(claim.tenant),
                shard.ring,
                shard.running,
            ],
            [claim.job_id, claim.token, self._queued_result, self.channels["work"], shard.index],
        )
        return bool(int(reply))

    @edge
    async def reap(self, now_ms: int | None = None) -> ReapResult:
        """Requeue (front, attempt counted) or fail (``worker-lost``) jobs whose lease expired,
        and requeue (no outputs) jobs whose ``requires_action`` expired, on every shard.

        ``now_ms`` overrides the server clock for the expiry test only (tests). Each batch is
        one script, so any number of workers may reap at the same time.
        """
        options = self.options
        result = Envelope.failure(
            codes.WORKER_LOST,
            f"the worker running this job was lost {options.max_attempts} times "
            "(its lease expired each time); the job is not tried again",
        )
        failed_event = _event("job_end", JobEnded(status="failed", result=result).model_dump_json())
        requeued: list[str] = []
        failed: list[str] = []
        expired: list[str] = []
        timeout_event = _event(
            "job_requeued", QueueEvent(status="queued", reason="tool-timeout").model_dump_json()
        )
        for shard in self.keys.all_shards():
            while True:
                ids, scanned = await self._control(
                    "expire",
                    [shard.actions, shard.ring],
                    [
                        shard.job_prefix,
                        shard.queue_prefix,
                        _REAP_BATCH,
                        timeout_event,
                        self._queued_result,
                        self.channels["work"],
                        shard.index,
                        self.channels["events"],
                    ],
                )
                expired.extend(text(i) for i in ids)
                if int(scanned) < _REAP_BATCH:
                    break
            while True:
                again, dead, scanned = await self._control(
                    "reap",
                    [shard.leases, shard.ring, shard.running],
                    [
                        "" if now_ms is None else now_ms,
                        options.max_attempts,
                        shard.job_prefix,
                        shard.queue_prefix,
                        result.model_dump_json(),
                        failed_event,
                        options.retention_s,
                        self._queued_result,
                        _REAP_BATCH,
                        self.channels["done"],
                        self.channels["work"],
                        shard.index,
                    ],
                )
                requeued.extend(text(i) for i in again)
                failed.extend(text(i) for i in dead)
                if int(scanned) < _REAP_BATCH:
                    break
        return ReapResult(requeued=requeued, failed=failed, expired=expired)

    @edge
    async def result_of(self, job_id: str) -> JobView | None:
        """The job as stored, whoever owns it (to tell whether a commit landed)."""
        if not is_job_id(job_id):
            return None
        (view,) = await self._read([job_id])
        return view

    async def cancellations(self) -> AsyncGenerator[str, None]:
        """Ids of running jobs as they are cancelled (pub/sub), for workers; runs forever.

        Pub/sub is the fast path only: an id published while the subscription reconnects is
        missed, and the worker then learns of the cancel from its next fenced write.
        """
        async with self.hub.watch(self.channels["cancel"], ANY) as watch:
            while True:
                await watch.wait(3600)
                for job_id in watch.drain():
                    if job_id:
                        yield job_id


def _claim(values: Sequence[Any]) -> Claim:
    """A claimed job from the 10 values a claim gives for it (``claim_reply``,
    lua/common.lua)."""
    job_id, attempt, spec, tenant, created, model, earlier, state, answer, trace = values
    return Claim(
        job_id=text(job_id),
        token=int(attempt),
        attempt=int(attempt),
        spec=json.loads(spec),
        tenant=text(tenant),
        created_at_ms=int(created),
        model=text(model) or None,
        earlier=spend(earlier),
        checkpoint=checkpoint(state),
        outputs=outputs(answer),
        trace=TraceContext.loads(trace),
    )


def _event(name: str, data: str) -> str:
    return '{"name":' + dumps(name) + ',"data":' + data + "}"
