"""The API's side of the store: submit, read, long-poll, stream events, cancel, list.

store = JobStore(redis, options)
job, created = await store.submit(tenant="acme", spec=body, idempotency_key=key)
job = await store.wait(job.id, tenant="acme", wait_ms=30_000)   # long-poll, no polling
events = await store.events(job.id, after=None, block_ms=15_000)
"""

from __future__ import annotations

import asyncio
import base64
import binascii
import functools
import hashlib
import itertools
import json
import re
import time
from collections import OrderedDict
from collections.abc import Awaitable, Callable, Mapping, Sequence
from typing import Any, ClassVar, Final

from redis.asyncio.cluster import RedisCluster
from redis.exceptions import RedisClusterException, RedisError

from app.core.turn.checkpoint import RequiredAction, ToolOutput
from app.core.wire import codes
from app.core.wire.envelope import Envelope
from app.core.wire.errors import InvalidInput
from app.core.wire.events import JobEnded, ToolOutputsEvent
from app.core.wire.spec import CallbackSpec
from app.store.clock import ServerClock
from app.store.connection import (
    HANDOFFS_AT_ONCE,
    WAKE_EMPTY_S,
    WAKE_STALE_MS,
    RedisClient,
    Role,
    StoreOptions,
    dumps,
)
from app.store.errors import IdempotencyConflict, NotWaiting, QueueFull, TenantQuota, edge
from app.store.hub import Watch
from app.store.ids import id_floor, is_job_id, new_job_id
from app.store.records import (
    Event,
    JobView,
    StoredOutputs,
    callback_status,
    events_of,
    iso,
    job_view,
    lazy_view,
    text,
    text_view,
)
from app.tracecontext import TraceContext

STATUSES: Final[frozenset[str]] = frozenset(
    {"queued", "in_progress", "requires_action", "succeeded", "failed", "cancelled"}
)
_EVENT_ID: Final = re.compile(r"^\d{1,9}$")
# With a status filter, ids looked at per call before a (possibly short) page is returned.
_LIST_SCAN_CAP: Final = 1000
_MAX_LIST_LIMIT: Final = 1000
_STATS_TENANTS: Final = 1000
_EVENTS_POLL_S: Final = 1.0
_QUEUED_EVENT: Final = '{"name":"job_queued","data":{"status":"queued"}}'
# A tenant's index expires at the end of the window its last submit fell in, plus as long
# as a job can live: the first submit of a window moves the expiry (lua/submit.lua), the
# others add their id only. The window's mark is a member of the index that sorts below
# every job id (ids of jobs created since 2004 begin "job_01"), and reads skip the marks.
_INDEX_WINDOW_MS: Final = 3_600_000
_INDEX_MARK: Final = "job_00"
_INDEX_IDS: Final = "(" + _INDEX_MARK + "~"  # above every mark ("~" sorts after [0-9a-z])
# What a process keeps of the jobs it made (``JobStore._made``, ``_ended``): beyond these,
# a long-poll reads the job as for any other. An ended view is trusted this long.
_MADE_KEPT: Final = 10_000
_ENDED_KEPT: Final = 1_000
_ENDED_TTL_S: Final = 60.0


def body_digest(spec: Mapping[str, Any], metadata: Mapping[str, str], model: str | None) -> str:
    """The identity of a request body for Idempotency-Key: SHA-256 of canonical JSON."""
    canonical = json.dumps(
        {"spec": spec, "metadata": metadata, "model": model},
        sort_keys=True,
        separators=(",", ":"),
        ensure_ascii=False,
    )
    return hashlib.sha256(canonical.encode()).hexdigest()


class JobStore(Role):
    """Jobs as the API sees them. A job of another tenant does not exist for the caller."""

    # long-polls (``wait``, ``submit(wait_ms=)``), ``events``
    HEARS: ClassVar[tuple[str, ...]] = ("done", "events")
    _spread = itertools.count()

    def __init__(
        self, redis: RedisClient, options: StoreOptions | None = None, **fields: Any
    ) -> None:
        super().__init__(redis, options, **fields)
        # Shard → until when (monotonic s) a submit tries no hand-off: one found jobs queued
        # there or nobody listed (a look would most likely find that again for a moment:
        # ``WAKE_EMPTY_S``); it still wakes one listed worker.
        self._no_handoff: dict[int, float] = {}
        # Shard → submits of this process in flight there: beyond ``HANDOFFS_AT_ONCE``
        # the others (a burst) try no hand-off (lua/submit.lua).
        self._submitting: dict[int, int] = {}
        # What this process knows of the jobs it made without reading them (``_unmoved``,
        # ``_heard_end``): a job made here while the subscription was live, with no
        # ``done`` message heard since (id → tenant, the hub's generation then), and the
        # view the ``done`` message of such a job carried (id → tenant, view JSON, when).
        self._made: OrderedDict[str, tuple[str, int]] = OrderedDict()
        self._ended: OrderedDict[str, tuple[str, str, float]] = OrderedDict()
        self._floor: tuple[int, str] = (-1, "")  # _index_floor's: (second, its id floor)
        self.hub.listen(self.channels["done"], self._heard)
        # Read once (on a cluster client, isinstance is an ABC check costing µs per submit).
        self._exact_publish = "1" if self.exact_publish else ""
        # Redis's clock, estimated (app/store/clock.py): a hand-off leases its job on it
        # without a TIME in the script. Hand-offs happen on one Redis only (a cluster's
        # nodes have clocks of their own, and no hand-off).
        self._clock = ServerClock(self._server_time) if self._exact_publish else None

    async def _server_time(self) -> tuple[int, int]:
        """One ``TIME``, sent as the scripts are: a reading cancelled on its way leaves
        its command to finish (and its connection to the pool). (In a pipeline its round
        trip is longer: the best of a reading's samples is used, one too slow not at all.)"""
        seconds, micros = await self.scripts.call("TIME")
        return int(seconds), int(micros)

    async def aclose(self) -> None:
        if self._clock is not None:
            await self._clock.aclose()
        await super().aclose()

    @edge
    async def submit(
        self,
        *,
        tenant: str,
        spec: dict[str, Any],
        idempotency_key: str | None = None,
        metadata: dict[str, str] | None = None,
        model: str | None = None,
        trace: TraceContext | None = None,
        wait_ms: int = 0,
    ) -> tuple[JobView, bool]:
        """Queue a job; ``(job, created)``. A replayed Idempotency-Key gives the first job.

        ``trace`` is the client's trace context: kept with the job (not part of its
        identity for Idempotency-Key), handed to the worker with each claim.

        With ``wait_ms`` > 0 (``POST /v1/generate``) it then waits up to that long for the
        job to end or need tool outputs, as ``wait`` does. A job it creates is watched from
        before it is queued, so there is nothing to read until the job ends: one read for
        the answer, where a ``wait`` after the submit needs two.

        Raises ``QueueFull`` when the tenant has ``max_queued`` jobs waiting on the shard,
        ``TenantQuota`` when it has submitted ``max_tenant_bytes`` within the window.
        """
        index = self.keys.shard_for(tenant, idempotency_key, next(self._spread))
        job_id = new_job_id(shard=index)
        hub = self.hub
        if hub.live:  # before the script: its job's end cannot be heard before this
            made = self._made
            made[job_id] = (tenant, hub.generation)
            if len(made) > _MADE_KEPT:
                made.popitem(last=False)
        queue = functools.partial(
            self._queue,
            job_id,
            index,
            tenant=tenant,
            spec=spec,
            idempotency_key=idempotency_key,
            metadata=metadata,
            model=model,
            trace=trace,
        )
        created = False
        try:
            if wait_ms <= 0:
                view, created = await queue()
            else:
                view, created = await self._submit_and_wait(queue, job_id, tenant, wait_ms)
        finally:
            if not created:  # a replay, or refused: no job ``job_id``
                self._made.pop(job_id, None)
        return view, created

    async def _submit_and_wait(
        self,
        queue: Callable[[], Awaitable[tuple[JobView, bool]]],
        job_id: str,
        tenant: str,
        wait_ms: int,
    ) -> tuple[JobView, bool]:
        deadline = time.monotonic() + wait_ms / 1000
        async with self.hub.watch(self.channels["done"], job_id) as watch:
            view, created = await queue()
            if created:  # queued just now: nothing to read before a message says it moved
                # (gone, expired while it was waited for: as it was)
                return (await self._settled(watch, view, tenant, deadline) or view), created
        # An Idempotency-Key replay: the first job, which may have ended long ago.
        if _settled_now(view):
            return view, created
        left_ms = int((deadline - time.monotonic()) * 1000)
        return (await self.wait(view.id, tenant=tenant, wait_ms=left_ms) or view), created

    async def _queue(
        self,
        job_id: str,
        index: int,
        *,
        tenant: str,
        spec: dict[str, Any],
        idempotency_key: str | None,
        metadata: dict[str, str] | None,
        model: str | None,
        trace: TraceContext | None,
    ) -> tuple[JobView, bool]:
        """The submit script for a new job ``job_id`` on shard ``index``."""
        metadata = dict(metadata or {})
        options = self.options
        shard = self.keys.shard(index)
        spec_json = dumps(spec)
        callback = _callback(spec.get("callback"))
        now_ms = int(time.time() * 1000)
        window = now_ms // (options.retention_s * 1000)
        index_window = now_ms // _INDEX_WINDOW_MS
        lifetime_ms = (options.retention_s + options.max_job_s) * 1000
        keys = [
            shard.job(job_id),
            shard.tenant_queue(tenant),
            shard.ring,
            shard.tenant_index(tenant),
            shard.tenant_bytes(tenant, window),
            shard.idle,
            shard.leases,  # a job handed to an idle worker is leased in the script
            shard.running,
        ]
        if idempotency_key is not None:
            keys.append(shard.idempotency(tenant, idempotency_key))
        clock = self._clock
        trace_json = "" if trace is None else trace.dumps()
        while True:
            server_ms = None if clock is None else clock.now_ms()
            # '1': no hand-off (found impossible lately, or a burst of submits of this
            # process to the shard is in flight), one worker woken as before.
            busy = self._submitting.get(index, 0)
            look = (
                "1"
                if busy >= HANDOFFS_AT_ONCE or time.monotonic() < self._no_handoff.get(index, 0.0)
                else ""
            )
            self._submitting[index] = busy + 1
            # What a hand-off's message carries: the claim's values but the spec (attempt
            # 1), as a claim returns them (``claim_reply``, lua/common.lua).
            head = (
                ""
                if look or not self._exact_publish
                else dumps([job_id, 1, tenant, str(now_ms), model or "", "", "", "", trace_json])
            )
            try:
                reply = await self.scripts.run(
                    "submit",
                    keys,
                    [
                        job_id,
                        tenant,
                        # Only an Idempotency-Key is checked against it (lua/submit.lua).
                        "" if idempotency_key is None else body_digest(spec, metadata, model),
                        spec_json,
                        dumps(metadata) if metadata else "{}",
                        model or "",
                        idempotency_key or "",
                        self._queued_result,
                        options.max_queued,
                        options.idempotency_ttl_s,
                        len(spec_json.encode()),
                        options.max_tenant_bytes,
                        2 * options.retention_s,
                        self.channels["work"],
                        index,
                        now_ms,
                        shard.job_prefix,
                        _QUEUED_EVENT,
                        (index_window + 1) * _INDEX_WINDOW_MS + lifetime_ms,
                        self._index_floor(now_ms - lifetime_ms),
                        "" if callback is None else dumps(callback),
                        trace_json,
                        f"{_INDEX_MARK}{index_window:012d}",
                        WAKE_STALE_MS,
                        self._exact_publish,
                        look,
                        "" if server_ms is None else server_ms,
                        head,
                    ],
                )
            finally:
                self._submitting[index] -= 1
            outcome, found = text(reply[0]), text(reply[1])
            if len(reply) == 3:  # no hand-off to try: for a while
                self._no_handoff[index] = time.monotonic() + WAKE_EMPTY_S
            if outcome == "full":
                raise QueueFull(int(found))
            if outcome == "quota":
                raise TenantQuota(int(found), options.max_tenant_bytes)
            if outcome == "conflict":
                raise IdempotencyConflict()
            if outcome == "existing":
                existing = await self.get(found, tenant=tenant)
                if existing is not None:
                    return existing, False
                # Expired in the instant between the script and the read: submit afresh (the id
                # is still unused, and the key's shard the same).
                continue
            break
        # LazyView(id=..., ...) in its fields' order (``lazy_view``): a queued job.
        return (
            lazy_view(
                (
                    job_id,
                    tenant,
                    "queued",
                    iso(now_ms),
                    None,  # started_at
                    None,  # finished_at
                    0,  # attempts
                    None,  # result: parsed from result_json when read
                    (),  # turns
                    (),  # history
                    (),  # transcript
                    metadata,
                    model,
                    idempotency_key,
                    None,  # required_action
                    0,  # pauses
                    callback_status(callback),
                    self._queued_result,  # result_json: as the script stored it
                    "[]",  # turns_json
                    None,  # history_json
                    None,  # transcript_json
                )
            ),
            True,
        )

    def _index_floor(self, ms: int) -> str:
        """``id_floor`` of the second of ``ms`` (ids below it left a tenant's index: lower
        by up to a second than ``ms``'s own, so one is written per second, not per job)."""
        second = ms // 1000
        floor = self._floor
        if floor[0] != second:
            floor = self._floor = (second, id_floor(second * 1000))
        return floor[1]

    @edge
    async def get(self, job_id: str, *, tenant: str) -> JobView | None:
        """The job, or ``None`` when it does not exist or belongs to another tenant."""
        if not is_job_id(job_id):
            return None
        (view,) = await self._read([job_id])
        if view is None or view.tenant != tenant:
            return None
        return view

    @edge
    async def wait(self, job_id: str, *, tenant: str, wait_ms: int) -> JobView | None:
        """The job once it is terminal or waits for tool outputs (``requires_action``), or
        as it is when ``wait_ms`` has passed.

        Watches the process's one subscription to job ends (registered before the read, so
        an end in between is not missed); holds no Redis connection while it waits. A job
        this process made and has heard nothing of since needs no read before the wait,
        and a job whose end it heard (the message carries the view) none at all.
        """
        if not is_job_id(job_id):
            return None
        heard, view = self._heard_end(job_id, tenant)
        if heard:  # nothing to watch for (most long-polls of a job made here)
            return view
        deadline = time.monotonic() + max(wait_ms, 0) / 1000
        async with self.hub.watch(self.channels["done"], job_id) as watch:
            # Heard while the watch was set up (it may wait for the subscription)?
            heard, view = self._heard_end(job_id, tenant)
            if heard:
                return view
            if self._unmoved(job_id, tenant):
                return await self._settled(watch, None, tenant, deadline, unread=job_id)
            return await self._settled(
                watch, await self.get(job_id, tenant=tenant), tenant, deadline
            )

    async def _settled(
        self,
        watch: Watch,
        view: JobView | None,
        tenant: str,
        deadline: float,
        *,
        unread: str | None = None,
    ) -> JobView | None:
        """``view`` once it is terminal or waits for tool outputs, read again after each
        message on ``watch`` (the job's ``done``), or as it is at ``deadline``. A message
        that carries the finished job (``lua/complete.lua``) is the read. ``unread``: the
        id of a job not read yet (``view`` is ``None``) that is known not to have moved."""
        job_id = unread if view is None else view.id
        while unread is not None or (view is not None and not _settled_now(view)):
            left = deadline - time.monotonic()
            if left <= 0:
                break
            await watch.wait(left)
            unread = None
            payload, watch.payload = watch.payload, None
            carried = carried_view(payload) if payload else None
            if carried is not None and carried.id == job_id:
                view = carried if carried.tenant == tenant else None
            elif job_id is not None:
                view = await self.get(job_id, tenant=tenant)
        if unread is not None:  # no time left to wait: the job as it is
            view = await self.get(unread, tenant=tenant)
        return view

    # -- what this process knows of the jobs it made -----------------------------------

    def _heard(self, job_id: str, payload: bytes | None) -> None:
        """A ``done`` message: a job made here has moved (ended, paused or cancelled).
        (Every API process hears every job's: the payload of another's is not decoded.)"""
        made = self._made.pop(job_id, None)
        if made is not None and payload is not None:
            self._ended[job_id] = (made[0], payload.decode(), time.monotonic())
            if len(self._ended) > _ENDED_KEPT:
                self._ended.popitem(last=False)

    def _heard_end(self, job_id: str, tenant: str) -> tuple[bool, JobView | None]:
        """``(True, view)`` when the ``done`` message of a job made here carried its view
        lately (``None`` for another tenant's job); ``(False, None)`` otherwise."""
        ended = self._ended.get(job_id)
        if ended is None or time.monotonic() - ended[2] > _ENDED_TTL_S:
            return False, None
        owner, payload, _ = ended
        if owner != tenant:
            return True, None
        view = carried_view(payload)
        return (True, view) if view is not None else (False, None)  # unreadable: read it

    def _unmoved(self, job_id: str, tenant: str) -> bool:
        """Made here by ``tenant``, and no ``done`` message of it since, with none missed
        (the subscription live throughout): still queued or running."""
        made = self._made.get(job_id)
        return (
            made is not None
            and made[0] == tenant
            and self.hub.live
            and made[1] == self.hub.generation
        )

    @edge
    async def events(
        self, job_id: str, *, after: str | None, block_ms: int, count: int = 100
    ) -> list[Event]:
        """Events after number ``after`` (``None``: from the start), oldest first.

        Waits up to ``block_ms`` when there is nothing new (``0``: never waits). The caller
        checks the tenant with ``get`` first. A malformed ``after`` is an ``InvalidInput``
        naming ``Last-Event-ID``.
        """
        if after is not None and not _EVENT_ID.match(after):
            raise InvalidInput("not an event id of this job (like 7)", field="Last-Event-ID")
        if not is_job_id(job_id):
            return []
        start = int(after or 0)
        key = self.shard_of(job_id).job(job_id)
        deadline = time.monotonic() + max(block_ms, 0) / 1000
        async with (
            self.hub.watch(self.channels["events"], job_id) as news,
            self.hub.watch(self.channels["done"], job_id) as ended,
        ):
            while True:
                found = events_of(await self._redis.hget(key, "events"), after=start)[:count]
                left = deadline - time.monotonic()
                if found or left <= 0:
                    return found
                # Writes that matter publish; the queue's own events (a claim, a requeue)
                # do not, to keep claims cheap: a stream sees those within a second.
                slice_s = min(left, _EVENTS_POLL_S)
                waits = [asyncio.ensure_future(w.wait(slice_s)) for w in (news, ended)]
                _, pending = await asyncio.wait(waits, return_when=asyncio.FIRST_COMPLETED)
                for waiting in pending:
                    waiting.cancel()
                await asyncio.gather(*pending, return_exceptions=True)

    @edge
    async def cancel(self, job_id: str, *, tenant: str) -> JobView | None:
        """Cancel a queued or running job (terminal at once); a finished job stays as it is.

        A running job's claim is revoked (its worker's later writes are refused) and its id
        is published to the workers so the turn loop stops.
        """
        if not is_job_id(job_id):
            return None
        shard = self.shard_of(job_id)
        result = Envelope.failure(codes.CANCELLED, "the job was cancelled by the client")
        ended = JobEnded(status="cancelled", result=result)
        outcome = await self.scripts.run(
            "cancel",
            [
                shard.job(job_id),
                shard.tenant_queue(tenant),
                shard.ring,
                shard.leases,
                shard.running,
                shard.actions,
            ],
            [
                job_id,
                tenant,
                result.model_dump_json(),
                _event("job_end", ended.model_dump_json()),
                self.options.retention_s,
                self.channels["done"],
                self.channels["cancel"],
                int(time.time() * 1000),
            ],
        )
        if text(outcome) == "missing":
            return None
        return await self.get(job_id, tenant=tenant)

    @edge
    async def submit_outputs(
        self, job_id: str, *, tenant: str, outputs: Sequence[ToolOutput]
    ) -> tuple[JobView | None, bool]:
        """Answer a job's ``requires_action``: ``(job, replayed)``; ``(None, False)`` when
        there is no such job for ``tenant``.

        Every call of the pause must be answered once (``InvalidInput`` naming ``outputs``
        otherwise); the same outputs again answer as the first time did (replayed);
        different outputs for an answered pause, or a job not waiting, raise
        ``NotWaiting``.
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
            "outputs",
            [shard.job(job_id), shard.tenant_queue(tenant), shard.ring, shard.actions],
            [
                job_id,
                tenant,
                stored.model_dump_json(),
                digest,
                view.pauses,
                _event("tool_outputs_received", event.model_dump_json()),
                self._queued_result,
                self.channels["work"],
                shard.index,
                self.channels["events"],
            ],
        )
        outcome = text(reply[0])
        if outcome == "missing":
            return None, False
        if outcome == "state":
            raise NotWaiting(text(reply[1]))
        return await self.get(job_id, tenant=tenant), outcome == "existing"

    @edge
    async def queue_stats(self) -> tuple[int, float]:
        """``(depth, age in seconds of the oldest queued job)`` over every shard."""
        depth, oldest_ms = 0, 0
        for shard in self.keys.all_shards():
            queued, age_ms, _ = await self.scripts.run(
                "stats", [shard.ring], [shard.queue_prefix, shard.job_prefix, _STATS_TENANTS]
            )
            depth += int(queued)
            oldest_ms = max(oldest_ms, int(age_ms))
        return depth, oldest_ms / 1000

    async def ping(self) -> bool:
        """Whether Redis answers; on a cluster, whether every master does (each holds
        shards: PING alone asks one node)."""
        try:
            if isinstance(self._redis, RedisCluster):
                return bool(await self._redis.ping(target_nodes=RedisCluster.PRIMARIES))
            return bool(await self._redis.ping())
        except (RedisError, RedisClusterException, OSError):
            return False

    async def _newest(self, tenant: str, below: str | None, count: int) -> list[str]:
        """Up to ``count`` of the tenant's ids older than ``below``, newest first, all shards.

        Ids sort by creation time, and each shard's index holds them with one score, so a
        lexicographic range is exactly "older than the cursor".
        """
        top = "+" if below is None else "(" + below
        found: list[str] = []
        for shard in self.keys.all_shards():
            raw = await self._redis.zrevrangebylex(
                shard.tenant_index(tenant), top, _INDEX_IDS, 0, count
            )
            found.extend(text(job_id) for job_id in raw)
        return sorted(found, reverse=True)[:count]

    async def _keep(self, ids: list[str], tenant: str, status: str | None) -> set[str]:
        """The ids still stored (expired ones leave the index) and in ``status``."""
        async with self._redis.pipeline(transaction=False) as pipe:
            for job_id in ids:
                pipe.hmget(self.shard_of(job_id).job(job_id), ["status", "tenant"])
            replies = await pipe.execute()
        gone = [job_id for job_id, (found, _) in zip(ids, replies, strict=True) if found is None]
        for job_id in gone:
            await self._redis.zrem(self.shard_of(job_id).tenant_index(tenant), job_id)
        return {
            job_id
            for job_id, (found, owner) in zip(ids, replies, strict=True)
            if found is not None
            and text(owner) == tenant
            and (status is None or text(found) == status)
        }

    async def _views(self, ids: list[str], tenant: str) -> list[JobView]:
        return [v for v in await self._read(ids) if v is not None and v.tenant == tenant]

    # The last method: inside the class body below it, ``list`` would name this method.
    @edge
    async def list(
        self,
        *,
        tenant: str,
        status: str | None = None,
        cursor: str | None = None,
        limit: int = 50,
    ) -> tuple[list[JobView], str | None]:
        """A page of the tenant's jobs, newest first, and the cursor of the next page.

        ``None`` as the cursor means there is no more. With a status filter a page may hold
        fewer than ``limit`` jobs and still have a cursor: the filter reads each job's
        status only, and whole records only for the page. Ids of expired jobs are dropped
        from the index on the way.
        """
        if status is not None and status not in STATUSES:
            raise InvalidInput(f"status must be one of {sorted(STATUSES)}", field="status")
        if not 1 <= limit <= _MAX_LIST_LIMIT:
            raise InvalidInput(f"limit must be 1..{_MAX_LIST_LIMIT}", field="limit")
        below = None if cursor is None else _decode_cursor(cursor)
        batch = limit + 1 if status is None else max(2 * limit, 50)
        page: list[str] = []
        scanned = 0
        while True:
            ids = await self._newest(tenant, below, batch)
            if not ids:
                return await self._views(page, tenant), None
            kept = await self._keep(ids, tenant, status)
            for position, job_id in enumerate(ids):
                if job_id not in kept:
                    continue
                page.append(job_id)
                if len(page) == limit:
                    more = position < len(ids) - 1 or bool(await self._newest(tenant, job_id, 1))
                    return await self._views(page, tenant), (
                        _encode_cursor(job_id) if more else None
                    )
            scanned += len(ids)
            if len(ids) < batch:
                return await self._views(page, tenant), None
            if scanned >= _LIST_SCAN_CAP:
                return await self._views(page, tenant), _encode_cursor(ids[-1])
            below = ids[-1]


def _event(name: str, data: str) -> str:
    return '{"name":' + dumps(name) + ',"data":' + data + "}"


def outputs_digest(outputs: Sequence[ToolOutput]) -> str:
    """The identity of an outputs body: SHA-256 of its canonical JSON."""
    canonical = json.dumps(
        [o.model_dump(mode="json") for o in outputs],
        sort_keys=True,
        separators=(",", ":"),
        ensure_ascii=False,
    )
    return hashlib.sha256(canonical.encode()).hexdigest()


def _callback(given: Any) -> dict[str, Any] | None:
    """The job's callback as its ends read it (``lua/outbox.lua``): ``{url, events}``, the
    events defaulted. The API validated it already; a store client that did not is told."""
    if not given:
        return None
    return CallbackSpec.model_validate(given).model_dump(mode="json")


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


def _encode_cursor(job_id: str) -> str:
    return base64.urlsafe_b64encode(job_id.encode()).decode().rstrip("=")


def _decode_cursor(cursor: str) -> str:
    try:
        job_id = base64.urlsafe_b64decode(cursor + "=" * (-len(cursor) % 4)).decode()
    except (binascii.Error, UnicodeDecodeError, ValueError):
        job_id = ""
    if not is_job_id(job_id):
        raise InvalidInput("not a cursor returned by this API", field="cursor")
    return job_id


def carried_view(payload: str) -> JobView | None:
    """The job a ``done`` message carries (lua/complete.lua): each field's name and value a
    line each, as stored. (A JSON object: the message of a commit script before this one.)
    ``None`` for a message it cannot read: the caller reads the job."""
    try:
        if payload[:1] == "{":
            return job_view(json.loads(payload))
        lines = iter(payload.split("\n"))
        return text_view(dict(zip(lines, lines, strict=False)))
    except (ValueError, KeyError, TypeError):
        return None


def _settled_now(view: JobView) -> bool:
    """Whether a waiter has its answer: the job ended or waits for tool outputs."""
    return view.terminal or view.status == "requires_action"
