"""A job's submit: checked against the tenant's caps, stored, then handed over or queued.

    job, created = await store.submit(tenant="acme", spec=body, idempotency_key=key)

One script (``lua/submit.lua``) does it all, so a crash between two steps cannot lose or
duplicate a job. An idle worker gets the job claimed for it in that script (a hand-off);
otherwise the job is queued and one idle worker woken.
"""

from __future__ import annotations

import functools
import hashlib
import itertools
import json
import time
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from typing import Any, Final

from app.core.wire.spec import CallbackSpec
from app.store.clock import ServerClock
from app.store.connection import (
    HANDOFFS_AT_ONCE,
    WAKE_EMPTY_S,
    WAKE_STALE_MS,
    RedisClient,
    StoreOptions,
    dumps,
)
from app.store.errors import IdempotencyConflict, QueueFull, TenantQuota, edge
from app.store.ids import id_floor, new_job_id
from app.store.protocol import SUBMIT, SubmitArgs, SubmitKeys
from app.store.reading import MADE_KEPT, Reading, settled_now
from app.store.records import JobView, callback_status, iso, lazy_view, text
from app.tracecontext import TraceContext

QUEUED_EVENT: Final = '{"name":"job_queued","data":{"status":"queued"}}'
# A tenant's index expires at the end of the window its last submit fell in, plus as long
# as a job can live: the first submit of a window moves the expiry (lua/submit.lua), the
# others add their id only. The window's mark is a member of the index that sorts below
# every job id (ids of jobs created since 2004 begin "job_01"), and reads skip the marks.
INDEX_WINDOW_MS: Final = 3_600_000
INDEX_MARK: Final = "job_00"


def body_digest(spec: Mapping[str, Any], metadata: Mapping[str, str], model: str | None) -> str:
    """The identity of a request body for Idempotency-Key: SHA-256 of canonical JSON."""
    canonical = json.dumps(
        {"spec": spec, "metadata": metadata, "model": model},
        sort_keys=True,
        separators=(",", ":"),
        ensure_ascii=False,
    )
    return hashlib.sha256(canonical.encode()).hexdigest()


@dataclass(slots=True, kw_only=True)
class _NewJob:
    """A job to submit, as the script takes it (JSON written once)."""

    id: str
    shard: int
    tenant: str
    spec: dict[str, Any]
    spec_json: str
    metadata: dict[str, str]
    model: str | None
    idempotency_key: str | None
    callback: dict[str, Any] | None
    trace_json: str
    created_ms: int


class Submitting(Reading):
    """The submit of ``JobStore``."""

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
        self._floor: tuple[int, str] = (-1, "")  # _index_floor's: (second, its id floor)
        # Read once (on a cluster client, isinstance is an ABC check costing µs per submit).
        self._exact_publish = "1" if self.exact_publish else ""
        # Redis's clock, estimated (app/store/clock.py): a hand-off leases its job on it
        # without a TIME in the script. Hand-offs happen on one Redis only (a cluster's
        # nodes have clocks of their own, and no hand-off).
        self._clock = ServerClock(self._server_time) if self._exact_publish else None

    def server_now_ms(self) -> int | None:
        """Redis's clock as estimated here; None: a script reads ``TIME`` (app.store.quotas)."""
        return None if self._clock is None else self._clock.now_ms()

    async def _server_time(self) -> tuple[int, int]:
        """One ``TIME``, sent as the scripts are.

        A reading cancelled on its way leaves its command to finish (and its connection to
        the pool). In a pipeline its round trip is longer: the best of a reading's samples
        is used.
        """
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

        ``trace``: the client's trace context, kept with the job and handed to the worker.
        With ``wait_ms`` > 0 (``POST /v1/generate``) it then waits as ``wait`` does, with
        one read fewer: the job is watched from before it is queued. Raises ``QueueFull``
        (``max_queued`` waiting on the shard) or ``TenantQuota`` (``max_tenant_bytes``).
        """
        index = self.keys.shard_for(tenant, idempotency_key, next(self._spread))
        job_id = new_job_id(shard=index)
        new = self._new_job(job_id, index, tenant, spec, idempotency_key, metadata, model, trace)
        hub = self.hub
        if hub.live:  # before the script: its job's end cannot be heard before this
            made = self._made
            made[job_id] = (tenant, hub.generation)
            if len(made) > MADE_KEPT:
                made.popitem(last=False)
        queue = functools.partial(self._queue, new)
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
        if settled_now(view):
            return view, created
        left_ms = int((deadline - time.monotonic()) * 1000)
        return (await self.wait(view.id, tenant=tenant, wait_ms=left_ms) or view), created

    @staticmethod
    def _new_job(
        job_id: str,
        index: int,
        tenant: str,
        spec: dict[str, Any],
        idempotency_key: str | None,
        metadata: dict[str, str] | None,
        model: str | None,
        trace: TraceContext | None,
    ) -> _NewJob:
        return _NewJob(
            id=job_id,
            shard=index,
            tenant=tenant,
            spec=spec,
            spec_json=dumps(spec),
            metadata=dict(metadata or {}),
            model=model,
            idempotency_key=idempotency_key,
            callback=_callback(spec.get("callback")),
            trace_json="" if trace is None else trace.dumps(),
            created_ms=int(time.time() * 1000),
        )

    async def _queue(self, new: _NewJob) -> tuple[JobView, bool]:
        """The submit script for ``new``: ``(job, created)``."""
        keys = self._submit_keys(new)
        index = new.shard
        while True:
            server_ms = None if self._clock is None else self._clock.now_ms()
            busy = self._submitting.get(index, 0)
            # '1': no hand-off (found impossible lately, or a burst of submits of this
            # process to the shard is in flight), one worker woken as before.
            look = (
                "1"
                if busy >= HANDOFFS_AT_ONCE or time.monotonic() < self._no_handoff.get(index, 0.0)
                else ""
            )
            self._submitting[index] = busy + 1
            try:
                reply = await self.scripts.run(
                    SUBMIT, keys, self._submit_args(new, look=look, server_ms=server_ms)
                )
            finally:
                self._submitting[index] -= 1
            found = self._existing(reply, new)
            if found is None:
                return self._queued_view(new), True
            existing = await self.get(found, tenant=new.tenant)
            if existing is not None:
                return existing, False
            # Expired in the instant between the script and the read: submit afresh (the id
            # is still unused, and the key's shard the same).

    def _submit_keys(self, new: _NewJob) -> SubmitKeys:
        shard = self.keys.shard(new.shard)
        tenant = new.tenant
        window = new.created_ms // (self.options.retention_s * 1000)
        return SubmitKeys(
            job=shard.job(new.id),
            tenant_queue=shard.tenant_queue(tenant),
            ring=shard.ring,
            tenant_index=shard.tenant_index(tenant),
            tenant_bytes=shard.tenant_bytes(tenant, window),
            idle=shard.idle,
            leases=shard.leases,
            running=shard.running,
            idempotency=(
                None
                if new.idempotency_key is None
                else shard.idempotency(tenant, new.idempotency_key)
            ),
        )

    def _submit_args(self, new: _NewJob, *, look: str, server_ms: int | None) -> SubmitArgs:
        options = self.options
        now_ms = new.created_ms
        index_window = now_ms // INDEX_WINDOW_MS
        lifetime_ms = (options.retention_s + options.max_job_s) * 1000
        return SubmitArgs(
            id=new.id,
            tenant=new.tenant,
            # Only an Idempotency-Key is checked against it (lua/submit.lua).
            digest=(
                ""
                if new.idempotency_key is None
                else body_digest(new.spec, new.metadata, new.model)
            ),
            spec=new.spec_json,
            metadata=dumps(new.metadata) if new.metadata else "{}",
            model=new.model or "",
            idempotency_key=new.idempotency_key or "",
            queued_result=self._queued_result,
            max_queued=options.max_queued,
            idempotency_ttl_s=options.idempotency_ttl_s,
            job_bytes=len(new.spec_json.encode()),
            max_tenant_bytes=options.max_tenant_bytes,
            window_ttl_s=2 * options.retention_s,
            work_channel=self.channels["work"],
            shard=new.shard,
            created_ms=now_ms,
            job_prefix=self.keys.shard(new.shard).job_prefix,
            queued_event=QUEUED_EVENT,
            index_expires_ms=(index_window + 1) * INDEX_WINDOW_MS + lifetime_ms,
            id_floor=self._index_floor(now_ms - lifetime_ms),
            callback="" if new.callback is None else dumps(new.callback),
            trace=new.trace_json,
            index_mark=f"{INDEX_MARK}{index_window:012d}",
            stale_ms=WAKE_STALE_MS,
            exact_publish=self._exact_publish,
            no_handoff=look,
            server_ms="" if server_ms is None else server_ms,
            handoff_head="" if look or not self._exact_publish else _handoff_head(new),
        )

    def _existing(self, reply: list[Any], new: _NewJob) -> str | None:
        """The id of the job an Idempotency-Key gave before; None: ``new`` was created.
        Raises when the script refused the job."""
        outcome, found = text(reply[0]), text(reply[1])
        if len(reply) == 3:  # no hand-off to try: for a while
            self._no_handoff[new.shard] = time.monotonic() + WAKE_EMPTY_S
        if outcome == "full":
            raise QueueFull(int(found))
        if outcome == "quota":
            raise TenantQuota(int(found), self.options.max_tenant_bytes)
        if outcome == "conflict":
            raise IdempotencyConflict()
        return found if outcome == "existing" else None

    def _queued_view(self, new: _NewJob) -> JobView:
        """The job as queued, as a read right after the script would find it."""
        return lazy_view(
            id=new.id,
            tenant=new.tenant,
            status="queued",
            created_at=iso(new.created_ms),
            started_at=None,
            finished_at=None,
            attempts=0,
            result=None,  # parsed from result_json when read
            turns=(),
            history=(),
            transcript=(),
            metadata=new.metadata,
            model=new.model,
            idempotency_key=new.idempotency_key,
            required_action=None,
            pauses=0,
            callback=callback_status(new.callback),
            result_json=self._queued_result,  # as the script stored it
            turns_json="[]",
            history_json=None,
            transcript_json=None,
        )

    def _index_floor(self, ms: int) -> str:
        """``id_floor`` of the second of ``ms``: written once a second, not once a job."""
        second = ms // 1000
        floor = self._floor
        if floor[0] != second:
            floor = self._floor = (second, id_floor(second * 1000))
        return floor[1]


def _handoff_head(new: _NewJob) -> str:
    """What a hand-off's message carries: a claim's values but the spec, attempt 1.

    As a claim returns them (``claim_reply``, lua/common.lua; ``app.store.claiming``).
    """
    return dumps(
        [new.id, 1, new.tenant, str(new.created_ms), new.model or "", "", "", "", new.trace_json]
    )


def _callback(given: Any) -> dict[str, Any] | None:
    """The job's callback as its ends read it (``lua/outbox.lua``): ``{url, events}``.

    The API validated it already; a store client that did not is told.
    """
    if not given:
        return None
    return CallbackSpec.model_validate(given).model_dump(mode="json")
