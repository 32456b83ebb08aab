"""Stopping: running jobs get the drain timeout to finish, the rest go back to the queue.

Every job released on the way out goes to the front of its queue, its attempt not
counted; none is left to sit on a lease until it expires (that would count an attempt).
"""

from __future__ import annotations

import asyncio
import logging
from typing import Final

from app.store import Leases
from app.worker.claims import Claims

log = logging.getLogger("app.worker")

# How long a cancelled job may take to unwind and release its claim on shutdown.
UNWIND_TIMEOUT_S: Final = 10.0


async def drain(claims: Claims, store: Leases, timeout_s: float, hurry: asyncio.Event) -> None:
    """Let the running jobs finish, for up to ``timeout_s`` or until ``hurry``; release the
    rest."""
    await _unlist(claims, store)
    tasks = {job.task for job in claims.jobs.values() if job.task is not None}
    if tasks:
        log.info("draining %d running jobs (up to %.1fs)", len(tasks), timeout_s)
        everything = asyncio.ensure_future(asyncio.wait(tasks))
        hurried = asyncio.ensure_future(hurry.wait())
        try:
            await asyncio.wait(
                {everything, hurried}, timeout=timeout_s, return_when=asyncio.FIRST_COMPLETED
            )
        finally:
            everything.cancel()  # only the waiting: the jobs themselves go on
            hurried.cancel()
    await release_all(claims, store)


async def _unlist(claims: Claims, store: Leases) -> None:
    """Off every idle list, so no submit hands this worker a job any more; the jobs
    handed over just before are released (``Claims.receive`` releases any later one)."""
    try:
        await store.unlist()
    except Exception as exc:  # its entries go stale: submits drop them
        log.warning("leaving the idle lists failed: %r", exc)
    for claim in store.take_handed():
        await claims.give_back(claim)


async def release_all(claims: Claims, store: Leases) -> None:
    """Stop every running job that is not committing (each releases its claim), and release
    every job handed over and not started."""
    for claim in store.take_handed():
        await claims.give_back(claim)
    jobs = [job for job in claims.jobs.values() if job.task is not None]
    for job in jobs:
        if not job.committing:
            job.stop("drain")
    tasks = {job.task for job in jobs if job.task is not None and not job.task.done()}
    if tasks:
        log.info("releasing %d jobs", len(tasks))
        await asyncio.wait(tasks, timeout=UNWIND_TIMEOUT_S)
