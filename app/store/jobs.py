"""The API's side of the store: submit, read, long-poll, stream events, cancel, list.

store = JobStore(redis, options)
job, created = await store.submit(tenant="acme", spec=body, idempotency_key=key)
job = await store.wait(job.id, tenant="acme", wait_ms=30_000)   # long-poll, no polling
events = await store.events(job.id, after=last_event_id, block_ms=15_000)
"""

from __future__ import annotations

import asyncio
import base64
import binascii
import hashlib
import json
import re
from collections.abc import Mapping
from typing import Any, Final

from redis.exceptions import RedisError
from redis.typing import KeyT, StreamIdT

from app.core import codes
from app.core.envelope import TERMINAL, Envelope
from app.core.errors import InvalidInput
from app.core.events import JobEnded
from app.store.connection import WAKE_CAP, Role, dumps
from app.store.errors import IdempotencyConflict, QueueFull, edge
from app.store.ids import is_job_id, new_job_id
from app.store.records import (
    Event,
    JobView,
    event,
    iso,
    stream_entries,
    text,
)

STATUSES: Final[frozenset[str]] = frozenset(
    {"queued", "in_progress", "succeeded", "failed", "cancelled"}
)
_STREAM_ID: Final = re.compile(r"^\d{1,20}(-\d{1,20})?$")
# With a status filter, ids looked at per call before a (possibly short) page is returned.
_LIST_SCAN_CAP: Final = 1000
_MAX_LIST_LIMIT: Final = 1000


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

    @edge
    async def submit(
        self,
        *,
        tenant: str,
        spec: dict[str, Any],
        idempotency_key: str | None = None,
        metadata: dict[str, str] | None = None,
        model: str | None = None,
    ) -> tuple[JobView, bool]:
        """Queue a job; ``(job, created)``. A replayed Idempotency-Key gives the first job."""
        metadata = dict(metadata or {})
        job_id = new_job_id()
        keys = [
            self.keys.job(job_id),
            self.keys.queue,
            self.keys.wake,
            self.keys.tenant(tenant),
            self.keys.events(job_id),
        ]
        if idempotency_key is not None:
            keys.append(self.keys.idempotency(tenant, idempotency_key))
        options = self.options
        reply = await self._run(
            "submit",
            keys,
            [
                job_id,
                tenant,
                body_digest(spec, metadata, model),
                dumps(spec),
                dumps(metadata),
                model or "",
                idempotency_key or "",
                self._queued_result,
                options.max_queued,
                options.idempotency_ttl_s,
                options.events_maxlen,
                WAKE_CAP,
                self.keys.job_prefix,
            ],
        )
        outcome, found = text(reply[0]), text(reply[1])
        if outcome == "full":
            raise QueueFull(int(found))
        if outcome == "conflict":
            raise IdempotencyConflict()
        if outcome == "existing":
            existing = await self.get(found, tenant=tenant)
            if existing is not None:
                return existing, False
            # Expired in the instant between the script and the read: submit afresh.
            return await self.submit(
                tenant=tenant,
                spec=spec,
                idempotency_key=idempotency_key,
                metadata=metadata,
                model=model,
            )
        created_ms = int(reply[2])
        return (
            JobView(
                id=job_id,
                tenant=tenant,
                status="queued",
                created_at=iso(created_ms),
                started_at=None,
                finished_at=None,
                attempts=0,
                result=Envelope.in_progress(),
                turns=(),
                history=(),
                transcript=(),
                metadata=metadata,
                model=model,
                idempotency_key=idempotency_key,
                last_event_id=text(reply[3]),
            ),
            True,
        )

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
        """The job once it is terminal, or as it is when ``wait_ms`` has passed.

        Blocks on the job's event stream (``XREAD BLOCK``) from the id read together with
        the status, so an end that happens in between is never missed and nothing polls.
        """
        loop = asyncio.get_running_loop()
        deadline = loop.time() + max(wait_ms, 0) / 1000
        peek = await self._peek(job_id)
        if peek is None or peek[1] != tenant:
            return None
        status, _, last_id = peek
        stream = self.keys.events(job_id)
        # Every terminal transition writes job_end as the stream's last event, so the
        # events read while waiting say when to stop: no re-read of the job per event.
        while status not in TERMINAL:
            remaining_ms = int((deadline - loop.time()) * 1000)
            if remaining_ms <= 0:
                break
            reply = await self._redis.xread(
                {stream: last_id}, count=100, block=self._block_ms(remaining_ms)
            )
            events = [event(entry) for entry in stream_entries(reply)]
            if events:
                last_id = events[-1].id
                if any(e.name == "job_end" for e in events):
                    break
        return await self.get(job_id, tenant=tenant)

    @edge
    async def events(
        self, job_id: str, *, after: str | None, block_ms: int, count: int = 100
    ) -> list[Event]:
        """Events after the stream id ``after`` (``None``: from the start), oldest first.

        Blocks up to ``block_ms`` when there is nothing new (``0``: never blocks). The caller
        checks the tenant with ``get`` first. A malformed ``after`` is an ``InvalidInput``
        naming ``Last-Event-ID``.
        """
        if after is not None and not _STREAM_ID.match(after):
            raise InvalidInput("not an event id (like 1732000000000-0)", field="Last-Event-ID")
        if not is_job_id(job_id):
            return []
        streams: dict[KeyT, StreamIdT] = {self.keys.events(job_id): after or "0-0"}
        if block_ms > 0:
            reply = await self._redis.xread(streams, count=count, block=self._block_ms(block_ms))
        else:
            reply = await self._redis.xread(streams, count=count)
        return [event(entry) for entry in stream_entries(reply)]

    @edge
    async def cancel(self, job_id: str, *, tenant: str) -> JobView | None:
        """Cancel a queued or running job (terminal at once); a finished job stays as it is.

        A running job's token is revoked (its worker's later writes are refused) and its id
        is published to the workers (``Leases.cancellations``) so the turn loop stops.
        """
        if not is_job_id(job_id):
            return None
        result = Envelope.failure(codes.CANCELLED, "the job was cancelled by the client")
        outcome = await self._run(
            "cancel",
            [
                self.keys.job(job_id),
                self.keys.queue,
                self.keys.leases,
                self.keys.turns(job_id),
                self.keys.events(job_id),
            ],
            [
                job_id,
                tenant,
                result.model_dump_json(),
                JobEnded(status="cancelled", result=result).model_dump_json(),
                self.options.retention_s,
                self.options.events_maxlen,
                self.keys.cancel_channel,
            ],
        )
        if text(outcome) == "missing":
            return None
        return await self.get(job_id, tenant=tenant)

    @edge
    async def queue_stats(self) -> tuple[int, float]:
        """``(depth, age in seconds of the oldest queued job)``, in one round trip."""
        depth, age_ms = await self._run("queue_stats", [self.keys.queue], [self.keys.job_prefix])
        return int(depth), int(age_ms) / 1000

    async def ping(self) -> bool:
        try:
            return bool(await self._redis.ping())
        except (RedisError, OSError):
            return False

    async def _peek(self, job_id: str) -> tuple[str, str, str] | None:
        """``(status, tenant, newest event id)``, read atomically."""
        if not is_job_id(job_id):
            return None
        async with self._redis.pipeline(transaction=True) as pipe:
            pipe.hmget(self.keys.job(job_id), ["status", "tenant"])
            pipe.xrevrange(self.keys.events(job_id), count=1)
            (status, tenant), newest = await pipe.execute()
        if status is None:
            return None
        return text(status), text(tenant), text(newest[0][0]) if newest else "0-0"

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
        fewer than ``limit`` jobs and still have a cursor. Ids of expired jobs are dropped
        from the index on the way.
        """
        if status is not None and status not in STATUSES:
            raise InvalidInput(f"status must be one of {sorted(STATUSES)}", field="status")
        if not 1 <= limit <= _MAX_LIST_LIMIT:
            raise InvalidInput(f"limit must be 1..{_MAX_LIST_LIMIT}", field="limit")
        index = self.keys.tenant(tenant)
        upper = "+" if cursor is None else "(" + _decode_cursor(cursor)
        page: list[JobView] = []
        scanned = 0
        batch = limit + 1 if status is None else max(2 * limit, 50)
        while True:
            ids = [text(i) for i in await self._redis.zrevrangebylex(index, upper, "-", 0, batch)]
            if not ids:
                return page, None
            views = await self._read(ids)
            gone = [job_id for job_id, view in zip(ids, views, strict=True) if view is None]
            if gone:
                await self._redis.zrem(index, *gone)
            for position, view in enumerate(views):
                if view is None or view.tenant != tenant:
                    continue
                if status is not None and view.status != status:
                    continue
                page.append(view)
                if len(page) == limit:
                    more = position < len(ids) - 1 or bool(
                        await self._redis.zrevrangebylex(index, "(" + ids[position], "-", 0, 1)
                    )
                    return page, _encode_cursor(ids[position]) if more else None
            scanned += len(ids)
            if len(ids) < batch:
                return page, None
            if scanned >= _LIST_SCAN_CAP:
                return page, _encode_cursor(ids[-1])
            upper = "(" + ids[-1]


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
