"""The worker's background loops over its leases: heartbeats, cancellations, the reaper.

A heartbeat that finds a lease gone, or a job's cancellation, stops the job's task at
once (aborting the model call in flight); nothing more is written for it. Every worker
also reaps the expired leases of every worker.
"""

from __future__ import annotations

import asyncio
import logging
import time

from app import metrics
from app.core.wire import codes
from app.settings import Settings
from app.store import Leases
from app.worker.job import Job
from app.worker.waits import wait

log = logging.getLogger("app.worker")


class Upkeep:
    """The loops over ``jobs``: the jobs this worker holds (shared, not copied)."""

    def __init__(self, store: Leases, settings: Settings, jobs: dict[str, Job]) -> None:
        self.store = store
        self.settings = settings
        self.jobs = jobs

    async def heartbeats(self) -> None:
        """Renew every held lease once a heartbeat period, forever."""
        period = self.settings.heartbeat_ms / 1000
        while True:
            # Stamped before the wait too: a worker just started is not one whose loop is
            # stuck (RepromptWorkerStalled read its 0 as 56 years behind).
            metrics.HEARTBEAT_AT.set(time.time())
            await asyncio.sleep(period)
            jobs = [job for job in self.jobs.values() if job.stopped is None]
            if jobs:
                await self._beat(jobs, period)

    async def _beat(self, jobs: list[Job], timeout_s: float) -> None:
        """Renew every lease in ``jobs`` at once: a script per shard and batch, not a round
        trip per job (10,000 held jobs cost a few scripts per period)."""
        try:
            async with asyncio.timeout(timeout_s):
                lost = await self.store.heartbeats([(job.id, job.claim.token) for job in jobs])
        except Exception as exc:
            # Unknown: keep going while a lease may still hold; the commit is fenced anyway.
            now = time.monotonic()
            silent_s = max(now - job.last_beat for job in jobs)
            lease_s = self.settings.lease_ms / 1000
            lost = {job.id for job in jobs if now - job.last_beat >= lease_s}
            metrics.LEASE_RENEWALS.labels("failed").inc(len(jobs))
            log.warning(
                "heartbeat of %d jobs failed (%.1fs since the oldest one's last): %r",
                len(jobs),
                silent_s,
                exc,
            )
        else:
            now = time.monotonic()
            for job in jobs:
                if job.id not in lost:
                    job.last_beat = now
            metrics.LEASE_RENEWALS.labels("renewed").inc(len(jobs) - len(lost))
            metrics.LEASE_RENEWALS.labels("lost").inc(len(lost))
        for job in jobs:
            if job.id in lost and job.stop("lease-lost"):
                log.warning("job %s: lease lost, stopping it; nothing is committed", job.id)

    async def cancellations(self) -> None:
        """Stop each held job as it is cancelled, forever (resubscribing after a failure)."""
        while True:
            try:
                async for job_id in self.store.cancellations():
                    job = self.jobs.get(job_id)
                    if job is not None and job.stop("cancelled"):
                        log.info("job %s cancelled, aborting it", job_id)
            except Exception as exc:
                log.warning("the cancellation feed failed, resubscribing: %r", exc)
            await asyncio.sleep(1.0)

    async def reaper(self, stop: asyncio.Event) -> None:
        """Take back expired leases and tool waits, of every worker, until ``stop``."""
        period = self.settings.reap_interval_ms / 1000
        while not stop.is_set():
            try:
                reaped = await self.store.reap()
            except Exception as exc:
                log.warning("reaping expired leases failed: %r", exc)
            else:
                expired = len(reaped.requeued) + len(reaped.failed)
                if expired:
                    metrics.LEASES_EXPIRED.inc(expired)
                for job_id in reaped.requeued:
                    log.warning("job %s: its worker was lost, requeued", job_id)
                for job_id in reaped.expired:
                    log.info("job %s: no tool outputs in time, requeued without them", job_id)
                for job_id in reaped.failed:
                    metrics.POISON_JOBS.inc()
                    metrics.JOBS_FINISHED.labels(status="failed", error=codes.WORKER_LOST).inc()
                    log.error("job %s failed: its workers were lost too many times", job_id)
            await wait(stop, period)
