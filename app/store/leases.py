"""The workers' side of the store: ``Leases``, its parts joined.

leases = Leases(redis, options)
claims = await leases.claim("worker-1", n=8, register=True)     # claiming.py
await leases.wait_for_work(timeout_s=1)                         # idle.py
lost = await leases.heartbeats([(c.job_id, c.token) for c in claims])  # expiry.py
ok = await leases.complete(claim, envelope=..., history=..., transcript=...)  # writes.py
"""

from __future__ import annotations

from collections.abc import AsyncGenerator
from typing import ClassVar

from app.store.claiming import MAX_CLAIM, Claiming
from app.store.errors import edge
from app.store.expiry import Expiry
from app.store.hub import ANY
from app.store.ids import is_job_id
from app.store.records import JobView
from app.store.writes import Writes, Written

__all__ = ["MAX_CLAIM", "Leases", "Written"]


class Leases(Claiming, Writes, Expiry):
    """Jobs as workers see them: leased, written under a fencing token, committed once.

    ``lane``: a client of its own (owned and closed by the caller) for claims,
    heartbeats and reaps (``lane.py``).
    """

    # ``wait_for_work``, ``cancellations``, deliveries
    HEARS: ClassVar[tuple[str, ...]] = ("work", "cancel", "outbox")

    @edge
    async def result_of(self, job_id: str) -> JobView | None:
        """The job as stored, whoever owns it (to tell whether a commit landed)."""
        if not is_job_id(job_id):
            return None
        (view,) = await self._read([job_id])
        return view

    async def cancellations(self) -> AsyncGenerator[str, None]:
        """Ids of running jobs as they are cancelled (pub/sub), for workers; runs forever.

        Pub/sub is the fast path only: an id published while the subscription reconnects
        is missed, and the worker learns of the cancel from its next fenced write.
        """
        async with self.hub.watch(self.channels["cancel"], ANY) as watch:
            while True:
                await watch.wait(3600)
                for job_id in watch.drain():
                    if job_id:
                        yield job_id
