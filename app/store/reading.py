"""A job as the API reads it: now (``get``), once it settles (``wait``), its events.

    job = await store.get(job_id, tenant="acme")
    job = await store.wait(job_id, tenant="acme", wait_ms=30_000)   # long-poll, no polling
    events = await store.events(job_id, after=None, block_ms=15_000)

Waits hold no Redis connection: they watch the process's one subscription (``hub.py``).
"""

from __future__ import annotations

import asyncio
import json
import re
import time
from collections import OrderedDict
from typing import Any, Final

from app.core.wire.errors import InvalidInput
from app.store.connection import RedisClient, Role, StoreOptions
from app.store.errors import edge
from app.store.hub import Watch
from app.store.ids import is_job_id
from app.store.records import Event, JobView, events_of, job_view, text_view

_EVENT_ID: Final = re.compile(r"^\d{1,9}$")
_EVENTS_POLL_S: Final = 1.0
# What a process keeps of the jobs it made (``_made``, ``_ended``): beyond these, a
# long-poll reads the job as for any other. An ended view is trusted this long.
MADE_KEPT: Final = 10_000
_ENDED_KEPT: Final = 1_000
_ENDED_TTL_S: Final = 60.0


class Reading(Role):
    """The reads of ``JobStore``. A job of another tenant does not exist for the caller."""

    def __init__(
        self, redis: RedisClient, options: StoreOptions | None = None, **fields: Any
    ) -> None:
        super().__init__(redis, options, **fields)
        # What this process knows of the jobs it made without reading them (``_unmoved``,
        # ``_heard_end``): a job made here while the subscription was live, with no
        # ``done`` message heard since (id → tenant, the hub's generation then), and the
        # view the ``done`` message of such a job carried (id → tenant, view JSON, when).
        self._made: OrderedDict[str, tuple[str, int]] = OrderedDict()
        self._ended: OrderedDict[str, tuple[str, str, float]] = OrderedDict()
        self.hub.listen(self.channels["done"], self._heard)

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
        """The job once it ends or waits for tool outputs, or as it is after ``wait_ms``.

        The watch is registered before the read, so an end in between is not missed. A job
        made here and not heard of since needs no read before the wait; one whose end was
        heard (the message carries the view) none at all.
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
        """``view`` once settled, read again after each ``done`` message, or at ``deadline``.

        A message that carries the finished job (``lua/complete.lua``) is the read.
        ``unread``: the id of a job not read yet (``view`` is None) known not to have moved.
        """
        job_id = unread if view is None else view.id
        while unread is not None or (view is not None and not settled_now(view)):
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

        Every API process hears every job's: the payload of another's is not decoded.
        """
        made = self._made.pop(job_id, None)
        if made is not None and payload is not None:
            self._ended[job_id] = (made[0], payload.decode(), time.monotonic())
            if len(self._ended) > _ENDED_KEPT:
                self._ended.popitem(last=False)

    def _heard_end(self, job_id: str, tenant: str) -> tuple[bool, JobView | None]:
        """``(True, view)`` when a job made here was heard ending lately, with its view
        (``None`` for another tenant's job); ``(False, None)`` otherwise."""
        ended = self._ended.get(job_id)
        if ended is None or time.monotonic() - ended[2] > _ENDED_TTL_S:
            return False, None
        owner, payload, _ = ended
        if owner != tenant:
            return True, None
        view = carried_view(payload)
        return (True, view) if view is not None else (False, None)  # unreadable: read it

    def _unmoved(self, job_id: str, tenant: str) -> bool:
        """Made here by ``tenant`` and not heard of since, with nothing missed: unsettled."""
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


def carried_view(payload: str) -> JobView | None:
    """The job a ``done`` message carries (lua/complete.lua); ``None``: read the job.

    Each field's name and value a line each, as stored (a JSON object: the message of an
    earlier commit script).
    """
    try:
        if payload[:1] == "{":
            return job_view(json.loads(payload))
        lines = iter(payload.split("\n"))
        return text_view(dict(zip(lines, lines, strict=False)))
    except (ValueError, KeyError, TypeError):
        return None


def settled_now(view: JobView) -> bool:
    """Whether a waiter has its answer: the job ended or waits for tool outputs."""
    return view.terminal or view.status == "requires_action"
