"""The callback outbox: the deliveries of jobs' completion callbacks, per shard (#13).

    outbox = leases.outbox                       # each store role has one
    leased, next_due_s = await outbox.lease(8, lease_ms=15_000)
    await outbox.record(leased[0], "delivered", status=200)
    await outbox.record(leased[1], "retry", status=503, error="…", wait_ms=20_000)
    await jobs.outbox.redeliver(job_id, tenant="acme")   # an operator: send it again

A delivery is written by the script that changes its job's state (``lua/outbox.lua``:
complete, cancel, the reaper's worker-lost failure, a pause), so a job never reaches an
event without its delivery. ``lease`` hands due deliveries to one sender each (a lost
sender's lease ends and another takes it); ``record`` settles an attempt, fenced by the
lease. Time is the Redis server's clock; the retry window is ``StoreOptions.callback_window_s``.
"""

from __future__ import annotations

import itertools
import json
import secrets
from collections.abc import AsyncIterator, Mapping
from contextlib import asynccontextmanager
from dataclasses import dataclass
from typing import Final, Literal, cast

from app.core.wire.callback import message_id
from app.core.wire.spec import CallbackEvent
from app.store.errors import NoDelivery, edge
from app.store.hub import ANY, Hub, Watch
from app.store.ids import is_job_id, shard_of
from app.store.keys import Keys
from app.store.protocol import (
    DELIVERY_LEASE,
    DELIVERY_RECORD,
    DELIVERY_REDELIVER,
    DeliveryLeaseArgs,
    DeliveryRecordArgs,
    OutboxKeys,
    RedeliverArgs,
    RedeliverKeys,
)
from app.store.records import text
from app.store.scripts import Scripts

# Due deliveries one lease looks at (per shard) to find other tenants' behind one tenant's.
MAX_LEASE_SCAN: Final = 256
# A tenant at its share of a sender's slots: its other due deliveries wait this long (ms).
HOLD_MS: Final = 1_000
# No ``slots``: no tenant is held back (the store's own tests lease freely).
UNLIMITED_SLOTS: Final = 1 << 30

Outcome = Literal["delivered", "retry", "failed", "superseded", "released"]
Settled = Literal["pending", "delivered", "failed", "superseded", "stale", "gone"]


@dataclass(frozen=True, slots=True)
class Leased:
    """A delivery this sender holds until it records an outcome or its lease ends."""

    job_id: str
    event: CallbackEvent
    tenant: str
    url: str
    attempts: int  # recorded before this one
    pause: int  # the pause a requires_action delivery is about (0 otherwise)
    token: str

    @property
    def webhook_id(self) -> str:
        return message_id(self.job_id, self.event, self.pause)

    @property
    def member(self) -> str:
        return f"{self.job_id} {self.event}"


class Outbox:
    """The outbox of every shard, over a store role's scripts, keys and hub (``channel``:
    the outbox's wake-up channel; ``window_s``: how long a delivery is retried)."""

    _turn = itertools.count()

    def __init__(
        self, scripts: Scripts, keys: Keys, hub: Hub, *, channel: str, window_s: int
    ) -> None:
        self._scripts = scripts
        self._keys = keys
        self._hub = hub
        self._channel = channel
        self._window_ms = window_s * 1000

    @edge
    async def lease(
        self,
        n: int,
        *,
        lease_ms: int,
        slots: int | None = None,
        inflight: Mapping[str, int] | None = None,
    ) -> tuple[list[Leased], float | None]:
        """Up to ``n`` due deliveries, taking shards in turn, each leased for ``lease_ms``;
        and the seconds until the next one is due (``None``: the outbox is empty).

        With ``slots`` (the sender's), tenants are taken in turn and each gets at most its
        share of them, counting what it holds (``inflight``, tenant -> n): fewer than ``n``
        with the next one due now (0) means some were held back for fairness; a tenant
        at its share has its other due deliveries pushed back ``HOLD_MS`` (no attempt).
        """
        shards = self._keys.shards
        start = next(self._turn)
        token = secrets.token_hex(8)
        leased: list[Leased] = []
        next_due: float | None = None
        held = dict(inflight or {})
        for step in range(shards):
            if len(leased) >= n:
                break
            shard = self._keys.shard((start + step) % shards)
            flat, due_ms = await self._scripts.run(
                DELIVERY_LEASE,
                OutboxKeys(outbox=shard.outbox),
                DeliveryLeaseArgs(
                    job_prefix=shard.job_prefix,
                    wanted=n - len(leased),
                    lease_ms=lease_ms,
                    token=token,
                    slots=UNLIMITED_SLOTS if slots is None else slots,
                    scan=MAX_LEASE_SCAN,
                    inflight=json.dumps(held),
                    hold_ms=HOLD_MS,
                ),
            )
            for i in range(0, len(flat), 6):
                job_id, event, tenant, callback, attempts, pause = flat[i : i + 6]
                held[text(tenant)] = held.get(text(tenant), 0) + 1
                leased.append(
                    Leased(
                        job_id=text(job_id),
                        event=cast(CallbackEvent, text(event)),
                        tenant=text(tenant),
                        url=json.loads(callback)["url"],
                        attempts=int(attempts),
                        pause=int(pause),
                        token=token,
                    )
                )
            if int(due_ms) >= 0:
                due_s = int(due_ms) / 1000
                next_due = due_s if next_due is None else min(next_due, due_s)
        return leased, next_due

    @edge
    async def record(
        self,
        leased: Leased,
        outcome: Outcome,
        *,
        status: int | None = None,
        error: str = "",
        wait_ms: int = 0,
    ) -> Settled:
        """Settle one attempt: the delivery's state after it, ``stale`` when the lease was
        taken over (nothing written), ``gone`` when the job expired. ``retry`` waits
        ``wait_ms``, within the window (its last try at the window's end); past the
        window it is ``failed``. ``released`` gives it back unsent: due after ``wait_ms``
        (0: now), no attempt counted."""
        # A batch's delivery (#30) lives on shard 0 (keys.BatchKeys.callback_shard).
        shard = self._keys.shard(shard_of(leased.job_id) if is_job_id(leased.job_id) else 0)
        reply = await self._scripts.run(
            DELIVERY_RECORD,
            OutboxKeys(outbox=shard.outbox),
            DeliveryRecordArgs(
                job=shard.job(leased.job_id),
                member=leased.member,
                callback_event=leased.event,
                token=leased.token,
                outcome=outcome,
                status="" if status is None else status,
                error_text=error,
                wait_ms=max(0, wait_ms),
                window_ms=self._window_ms,
            ),
        )
        return cast(Settled, text(reply))

    @edge
    async def redeliver(self, job_id: str, *, tenant: str) -> CallbackEvent | None:
        """Queue the job's latest delivery again, whatever its state; the event it is for.
        ``None``: no such job for ``tenant``; ``NoDelivery``: nothing to send again."""
        if not is_job_id(job_id):
            return None
        shard = self._keys.shard(shard_of(job_id))
        reply = await self._scripts.run(
            DELIVERY_REDELIVER,
            RedeliverKeys(job=shard.job(job_id), outbox=shard.outbox),
            RedeliverArgs(id=job_id, tenant=tenant, notify_channel=self._channel),
        )
        outcome = text(reply[0])
        if outcome == "missing":
            return None
        if outcome == "none":
            raise NoDelivery(has_callback=text(reply[1]) == "1")
        return cast(CallbackEvent, text(reply[1]))

    @edge
    async def depth(self) -> int:
        """Deliveries not settled yet (due, waiting to retry, or being sent), every shard."""
        total = 0
        for shard in self._keys.all_shards():
            total += int(await self._scripts.redis.zcard(shard.outbox))
        return total

    @asynccontextmanager
    async def wakeups(self) -> AsyncIterator[Watch]:
        """Set when a delivery is added or redelivered (by any process)."""
        async with self._hub.watch(self._channel, ANY) as watch:
            yield watch
