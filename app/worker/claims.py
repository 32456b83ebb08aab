"""The claim loop: free slots filled with claimed jobs, idle waits, and hand-offs started.

Up to ``capacity`` jobs run at once, one slot each. A busy worker claims every free slot
in one round trip; an idle one waits for a wake-up (``IDLE_WAIT_S`` at most), and jobs a
submit hands it (claimed for it already) start as their message is read.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable, Coroutine
from typing import Any, Final

from app import metrics
from app.store import MAX_CLAIM, Claim, Leases
from app.worker.bookkeeping import Bookkeeping
from app.worker.job import Job
from app.worker.waits import before_stop, take_free, wait

log = logging.getLogger("app.worker")

# How long an idle worker blocks in ``wait_for_work`` before looking at the queue again:
# a wake-up lost (in a Redis blip, or taken by a worker that died while idle on a cluster,
# where the submit cannot tell: lua/submit.lua) costs at most this much latency.
IDLE_WAIT_S: Final = 1.0
# The most jobs one claim asks for (at most the store's MAX_CLAIM): a claim's jobs are all
# started in one turn of the event loop, and a worker with thousands of free slots should
# not keep its heartbeats and running jobs waiting for that long.
CLAIM_BATCH: Final = min(100, MAX_CLAIM)


class Claims:
    """The jobs this worker holds, and the loop that claims them. ``run``: runs one job."""

    def __init__(
        self,
        store: Leases,
        worker_id: str,
        capacity: int,
        run: Callable[[Job], Coroutine[Any, Any, None]],
        books: Bookkeeping,
    ) -> None:
        self.store = store
        self.worker_id = worker_id
        self.capacity = capacity
        self.run = run
        self.books = books
        self.jobs: dict[str, Job] = {}
        self.slots = asyncio.Semaphore(capacity)
        # Set while no claim is in flight: a job handed over meanwhile waits for it, so
        # the slots the claim asked for are still free when its jobs come back.
        self._claim_done = asyncio.Event()
        self._claim_done.set()
        self.leaving: asyncio.Task[None] | None = None  # ``_leave_when_full``'s, in flight
        self._stopping: asyncio.Event | None = None  # the worker's stop, while it runs
        self._stop_waiter: asyncio.Future[Any] | None = None

    @property
    def room(self) -> int:
        """Slots not held by a job."""
        return self.capacity - len(self.jobs)

    def begin(self, stop: asyncio.Event) -> None:
        """The worker runs until ``stop``: hand-offs start at once from here on."""
        self._stopping = stop
        # One standing wait for ``stop``, shared by the loop's waits (``before_stop``).
        self._stop_waiter = asyncio.ensure_future(stop.wait())
        if isinstance(self.store, Leases):  # not a stand-in (tests, bench)
            self.store.on_handed = self._handed_now

    def end(self) -> None:
        if self._stop_waiter is not None:
            self._stop_waiter.cancel()
            self._stop_waiter = None
        if isinstance(self.store, Leases):
            self.store.on_handed = None

    async def loop(self, stop: asyncio.Event) -> None:
        """Claim jobs into free slots until ``stop``."""
        failures = 0
        hint: int | None = None
        while not stop.is_set():
            if not await self._take_slot(stop):
                return
            # Every free slot, in one round trip: a busy worker claims in batches.
            free = 1 + min(self._free_slots(), CLAIM_BATCH - 1)
            self._claim_done.clear()
            try:
                claims = await self.store.claim(self.worker_id, free, first=hint, register=True)
            except Exception:
                self._claim_done.set()
                self.slots.release()
                failures += 1
                log.warning("claim failed (%d in a row)", failures, exc_info=failures == 1)
                await wait(stop, min(0.1 * 2**failures, 5.0))
                continue
            self._claim_done.set()
            failures, hint = 0, None
            if not claims:
                self.slots.release()
                hint = await self._idle(stop)
                continue
            self.start(claims[0])
            for claim in claims[1:]:
                await self.slots.acquire()  # free by construction: returns at once
                self.start(claim)
            if len(claims) < free:
                # Fewer than asked: the queues are empty now; wait for a wake-up rather than
                # ask again at once.
                hint = await self._idle(stop)

    def _free_slots(self) -> int:
        """Slots free beyond the one just taken (taken later, one per extra claim)."""
        return max(0, self.capacity - len(self.jobs) - 1)

    async def _take_slot(self, stop: asyncio.Event) -> bool:
        """Wait for a free slot; False (and no slot held) if ``stop`` came first."""
        if stop.is_set():
            return False
        if not self.slots.locked():  # the commonest: a slot is free, taken without a wait
            await self.slots.acquire()
            return True
        acquire = asyncio.ensure_future(self.slots.acquire())
        if not await before_stop(acquire, stop, self._stop_waiter):
            return False
        if stop.is_set():
            self.slots.release()
            return False
        return True

    async def _idle(self, stop: asyncio.Event) -> int | None:
        """Block until work may be there (a submit or requeue) or ``stop``; never spin.

        Returns the shard the work was queued on, when the wake-up said. A hand-off ends a
        wait too (counted as such) but needs no claim (``receive`` starts the job): the
        wait goes on to its deadline.
        """
        deadline = time.monotonic() + IDLE_WAIT_S
        while True:
            left = max(0.0, deadline - time.monotonic())
            waiting = asyncio.ensure_future(self.store.wait_for_work(left))
            if not await before_stop(waiting, stop, self._stop_waiter):
                return None
            if waiting.exception() is not None:
                log.warning("waiting for work failed: %r", waiting.exception())
                await wait(stop, IDLE_WAIT_S)
                return None
            handed = self.store.woken and self.store.handed_only
            ended = "handoff" if handed else "woken" if self.store.woken else "timeout"
            metrics.idle_wait(ended)
            if not handed or time.monotonic() >= deadline:
                return waiting.result()

    async def receive(self, stop: asyncio.Event) -> None:
        """Start the jobs submits hand to this worker, each claimed for it already.

        A job that finds no free slot (a worker listed on several shards can be handed
        one on each), or a worker that stops, releases it to the front of its queue, its
        attempt not counted.
        """
        while True:
            try:
                claims = await self.store.handed()
            except Exception as exc:
                log.warning("receiving handed-over jobs failed: %r", exc)
                await asyncio.sleep(1.0)
                continue
            for claim in claims:
                await self._claim_done.wait()  # the slots a claim in flight asked for are its
                if stop.is_set() or self.slots.locked():
                    await self.give_back(claim)
                else:
                    await self.slots.acquire()  # free (not locked): returns at once
                    self.start(claim)

    def _handed_now(self) -> None:
        """Jobs handed over (``Leases.on_handed``), started in this pass of the loop.

        When nothing stands in the way (no claim in flight, not stopping, a free slot for
        each); ``receive`` takes whatever is left.
        """
        stop = self._stopping
        if stop is None or stop.is_set() or not self._claim_done.is_set():
            return
        store = self.store
        while store.pending_handed and take_free(self.slots):
            claims = store.take_handed(1)
            if not claims:  # unreadable: logged, its lease runs out
                self.slots.release()
                continue
            self.start(claims[0])

    async def give_back(self, claim: Claim) -> None:
        """Release a handed-over job this worker does not start (best effort: else its
        lease runs out and the reaper requeues it, counting an attempt)."""
        try:
            released = await self.store.release(claim)
        except Exception as exc:
            log.warning("job %s: release of a handed-over job failed: %r", claim.job_id, exc)
            return
        if released:
            log.info("job %s: handed over, not started here, released to the queue", claim.job_id)

    def start(self, claim: Claim) -> None:
        """Run ``claim`` in a task of its own, in the slot taken for it."""
        job = Job(claim)
        self.jobs[job.id] = job
        job.task = asyncio.create_task(self.run(job), name=f"job {job.id}")
        job.task.add_done_callback(lambda _: self._finished(job))
        if self.slots.locked() and self.store.listed and self.leaving is None:
            self.leaving = asyncio.create_task(self._leave_when_full(), name="leave lists")

    async def _leave_when_full(self) -> None:
        """No free slot left: off the idle lists, so submits stop handing it jobs.

        The claim that takes the next free slot lists it again if it comes back short.
        """
        try:
            await self.store.leave()
        except Exception as exc:  # its entries stay: a job handed over is released
            log.warning("leaving the idle lists failed: %r", exc)
        finally:
            self.leaving = None

    def _finished(self, job: Job) -> None:
        self.books.catch_up()  # done by the task's end, unless it never ran
        if self.jobs.get(job.id) is job:
            del self.jobs[job.id]
        self.slots.release()
        task = job.task
        if task is not None and not task.cancelled() and task.exception() is not None:
            log.error("job %s: the worker failed", job.id, exc_info=task.exception())
