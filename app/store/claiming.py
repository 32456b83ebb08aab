"""A worker's claim: queued jobs leased to it, shards and tenants taken in turn.

    claims = await leases.claim("worker-1", n=8, register=True)  # [] when queues are empty

A short claim (the queues ran dry first) with ``register`` lists the worker as idle on
that shard (``idle.py``), so a submit there hands it the next job or wakes it alone.
"""

from __future__ import annotations

import itertools
import time
from typing import Any, Final

from app.store.connection import HANDOFF_SLOTS, WAKE_RENEW_S, WAKE_STALE_MS
from app.store.errors import edge
from app.store.idle import IdleLists
from app.store.protocol import CLAIM, ClaimArgs, ClaimKeys
from app.store.records import Claim, claim_of, text

# The most jobs one claim leases (a larger ``n`` is cut to it): the claim script keeps
# Redis busy, and its reply (every spec) keeps the worker busy, in proportion; and the
# script cannot lease more than about 4000 jobs in one ZADD.
MAX_CLAIM: Final = 500
# The values a claim gives per job (``claim_reply``, lua/common.lua).
_PER_JOB: Final = 10


class Claiming(IdleLists):
    """The claim of ``Leases``."""

    _turn = itertools.count()

    @edge
    async def claim(
        self, worker_id: str, n: int = 1, *, first: int | None = None, register: bool = False
    ) -> list[Claim]:
        """Lease up to ``n`` queued jobs (at most ``MAX_CLAIM``), shards and tenants in turn.

        ``first``: the shard to look at first (a wake-up names where work was queued).
        ``register``: a shard whose queues run dry before ``n`` jobs lists this object as
        idle (a claim that gets all ``n`` takes it off), for a worker that then waits with
        ``wait_for_work``.
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
            wanted = n - len(claims)
            claims += await self._claim_on(index, worker_id, wanted, listed, generation)
            if len(claims) >= n:
                break
        return claims

    async def _claim_on(
        self, index: int, worker_id: str, n: int, listed: bool, generation: int
    ) -> list[Claim]:
        """Up to ``n`` jobs of shard ``index``; this object's entry there kept up to date
        (``generation``: the subscription's when the claim began)."""
        shard = self.keys.shard(index)
        held = self._idle.get(index)
        renew = held is not None and (
            time.monotonic() - held[1] >= WAKE_RENEW_S or held[2] != generation
        )
        reply = await self._lane_scripts.run(
            CLAIM,
            ClaimKeys(ring=shard.ring, leases=shard.leases, running=shard.running, idle=shard.idle),
            ClaimArgs(
                job_prefix=shard.job_prefix,
                queue_prefix=shard.queue_prefix,
                worker_id=worker_id,
                lease_ms=self.options.lease_ms,
                wanted=n,
                max_in_flight=self.options.max_in_flight,
                listed_as=self._head if listed else "",
                held_entry="" if held is None else held[0],
                renew="1" if renew else "",
                work_channel=self.channels["work"],
                shard=index,
                stale_ms=WAKE_STALE_MS,
                exact_publish="1" if self.exact_publish else "",
                # A cluster hands nothing over (lua/submit.lua): one copy, for wake-ups.
                max_copies=HANDOFF_SLOTS if self.exact_publish else 1,
            ),
        )
        extra = len(reply) % _PER_JOB
        if extra:  # the registration changed: its new entry and copies, or ''
            self._registered(index, reply[-extra:], generation)
            reply = reply[:-extra]
        got = len(reply) // _PER_JOB
        if got and not extra and index in self._idle and self.exact_publish:
            self._took(index, got)  # their slots: as many copies off (lua/claim.lua)
        return [claim_of(reply[i : i + _PER_JOB]) for i in range(0, len(reply), _PER_JOB)]

    def _registered(self, index: int, registration: list[Any], generation: int) -> None:
        """The claim changed this object's entry on shard ``index``: its new entry and
        copies, or '' alone (none)."""
        entry = text(registration[0])
        if entry:
            self._idle[index] = (entry, time.monotonic(), generation)
            self._copies[index] = int(registration[-1])
        else:
            self._idle.pop(index, None)
            self._copies.pop(index, None)
