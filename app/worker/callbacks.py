"""The callback sender: each worker's loop that POSTs jobs' completion callbacks (#13).

    sender = CallbackSender(leases, outbound, settings)
    task = asyncio.create_task(sender.run(stop))     # until ``stop`` is set

The store writes a delivery in the same script that moves a job to an event its callback
asks for (``app/store/lua/outbox.lua``); this loop leases due deliveries (at most
``callback_concurrency`` at once), POSTs each job as ``GET /v1/jobs/{id}`` shows it,
signed for its tenant (Standard Webhooks, ``webhook-id`` the same for every attempt), and
records how the attempt went. The outbox is the retry layer: each attempt is one request
(no transport retries inside), and a failure that may pass (a timeout, no connection, 408,
429, 5xx) is tried again after ``callback_backoff_ms`` doubled per attempt, with equal
jitter, at most ``callback_max_backoff_s``, or the receiver's ``Retry-After`` if longer,
within ``callback_retry_window_s`` of the event. Any other 4xx, a redirect, a refused
address or a body over the caps is final. A sender that dies holding a delivery lets its
lease run out, and another sender takes it: at least once, never lost.

Fair between tenants (#29): the lease takes tenants in turn and gives each at most its
share of the ``callback_concurrency`` slots (counting what it holds), so one tenant's
hanging receiver cannot hold every slot while another tenant's callbacks wait; and a
receiver host that keeps timing out is backed off (``app.worker.receivers``): one attempt
at a time, its other deliveries deferred unsent (no attempt counted) until the back-off
ends.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import random
import time
from collections import Counter
from dataclasses import dataclass
from typing import Final
from urllib.parse import urlsplit

from app import metrics
from app.outbound import OutboundFailed, OutboundRefused
from app.outbound.kit import Outbound
from app.settings import Settings
from app.store import Leased, Leases, public_job
from app.store.batches import BatchStore, is_batch_id
from app.store.hub import Watch
from app.store.outbox import Outcome
from app.worker.receivers import ReceiverHosts

# The name the sender has always logged under (it was app/delivery.py).
log = logging.getLogger("app.delivery")

# A lease outlives the longest request by this much (reading the job, recording).
LEASE_MARGIN_MS: Final = 5_000
# The outbox is looked at least this often, for retries that come due.
POLL_S: Final = 1.0
# After ``stop``, requests in flight get this long; the rest are given back unsent.
GRACE_S: Final = 5.0
MAX_ERROR_CHARS: Final = 500


@dataclass(frozen=True, slots=True)
class Backoff:
    """The wait before attempt n+1 after n failed ones: ``base_s`` doubled per attempt,
    at most ``max_s``, half of it random (equal jitter)."""

    base_s: float
    max_s: float
    rng: random.Random

    def wait_s(self, failed: int) -> float:
        full = min(self.base_s * 2.0 ** min(max(failed - 1, 0), 62), self.max_s)
        return full / 2 + self.rng.uniform(0, full / 2)


@dataclass(frozen=True, slots=True)
class Attempt:
    """How one attempt went, as the outbox records it."""

    outcome: Outcome
    status: int | None = None
    error: str = ""
    retry_after_s: float | None = None
    timed_out: bool = False  # no answer in time: a strike against the receiver host


def judge(failure: OutboundRefused | OutboundFailed, timeout_s: float) -> Attempt:
    """A failed request as an attempt: retried when it may pass (a timeout, no connection,
    408, 429, 5xx), else final. The error text is for the job's owner: it names the host
    they gave, never an address it resolved to."""
    if isinstance(failure, OutboundRefused):
        return Attempt("failed", error=f"refused: {failure.detail}")
    status = failure.http_status
    if failure.reason == "redirect":
        return Attempt("failed", status, f"HTTP {status}: a redirect (never followed)")
    if failure.reason == "too_large":
        return Attempt("failed", status, "the job or the answer was larger than allowed")
    if status is not None:
        said = f"HTTP {status}: {failure.excerpt or 'no details'}"
        retry = status in (408, 429) or status >= 500
        return Attempt("retry" if retry else "failed", status, said, failure.retry_after_s)
    if failure.reason == "timeout":
        return Attempt("retry", error=f"no answer within {timeout_s:g}s", timed_out=True)
    return Attempt("retry", error=failure.detail)


def _receiver(leased: Leased, host: str | None) -> str:
    """The receiver a delivery goes to, as the back-off counts it: the tenant's host and
    port. Per tenant, so one tenant's dead endpoint on a shared host (a hosted webhook
    service) never defers another tenant's callbacks there; fairness between tenants is
    the lease's."""
    port = ""
    with contextlib.suppress(ValueError):
        port = str(urlsplit(leased.url).port or "")
    return f"{leased.tenant} {host or '?'}:{port}"


class CallbackSender:
    """Sends the due callbacks of every shard from one worker process."""

    def __init__(
        self,
        leases: Leases,
        outbound: Outbound,
        settings: Settings,
        *,
        rng: random.Random | None = None,
    ) -> None:
        self.leases = leases
        self.outbound = outbound
        self.concurrency = settings.callback_concurrency
        self.timeout_s = outbound.timeout_ms / 1000
        self.lease_ms = outbound.timeout_ms + LEASE_MARGIN_MS
        self.backoff = Backoff(
            settings.callback_backoff_ms / 1000,
            float(settings.callback_max_backoff_s),
            rng or random.Random(),
        )
        self._tasks: dict[asyncio.Task[None], str] = {}  # each send -> its tenant
        self._inflight: Counter[str] = Counter()
        self._freed = asyncio.Event()
        self.hosts = ReceiverHosts(rng=rng)
        # A batch's callback (#30) goes through this outbox too: its body is the batch.
        self.batches = BatchStore(leases.scripts.redis, prefix=leases.keys.prefix)

    async def run(self, stop: asyncio.Event) -> None:
        """Lease and send until ``stop``; then let requests in flight finish (``GRACE_S``)
        and give back the rest."""
        try:
            async with self.leases.outbox.wakeups() as wake:
                failures = 0
                while not stop.is_set():
                    free = self.concurrency - len(self._tasks)
                    wait_s = POLL_S
                    if free > 0:
                        try:
                            leased, due_s = await self.leases.outbox.lease(
                                free,
                                lease_ms=self.lease_ms,
                                slots=self.concurrency,
                                inflight=dict(self._inflight),
                            )
                        except Exception as exc:
                            failures += 1
                            log.warning("leasing callbacks failed (%d in a row): %r", failures, exc)
                            wait_s = min(0.1 * 2**failures, 5.0)
                        else:
                            failures = 0
                            for delivery in leased:
                                self._start(delivery)
                            if len(leased) == free:
                                continue  # more may be due
                            if due_s == 0:
                                # Due now but held back (those tenants hold their share):
                                # lease again when a slot frees or another delivery comes.
                                free = 0
                            elif due_s is not None:
                                wait_s = max(min(wait_s, due_s), 0.01)
                    await self._idle(wake, wait_s, stop, slots=free > 0)
            if self._tasks:
                await asyncio.wait(set(self._tasks), timeout=GRACE_S)
        finally:
            for task in self._tasks:
                task.cancel()
            await asyncio.gather(*self._tasks, return_exceptions=True)

    async def _idle(self, wake: Watch, wait_s: float, stop: asyncio.Event, *, slots: bool) -> None:
        """Until a delivery is added (``wake``), a slot frees, ``stop``, or ``wait_s``."""
        waits: list[asyncio.Future[bool]] = [
            asyncio.ensure_future(wake.wait(wait_s)),
            asyncio.ensure_future(stop.wait()),
        ]
        if not slots:
            waits.append(asyncio.ensure_future(self._freed.wait()))
        try:
            await asyncio.wait(waits, return_when=asyncio.FIRST_COMPLETED)
        finally:
            for waiting in waits:
                waiting.cancel()
            await asyncio.gather(*waits, return_exceptions=True)
            self._freed.clear()

    def _start(self, leased: Leased) -> None:
        task = asyncio.create_task(
            self._send(leased), name=f"callback {leased.job_id} {leased.event}"
        )
        self._tasks[task] = leased.tenant
        self._inflight[leased.tenant] += 1
        task.add_done_callback(self._done)

    def _done(self, task: asyncio.Task[None]) -> None:
        tenant = self._tasks.pop(task, None)
        if tenant is not None:
            self._inflight[tenant] -= 1
            if self._inflight[tenant] <= 0:
                del self._inflight[tenant]
        self._freed.set()
        if not task.cancelled() and task.exception() is not None:
            log.error("%s: the sender failed", task.get_name(), exc_info=task.exception())

    async def _send(self, leased: Leased) -> None:
        """One attempt, recorded; cancelled (shutdown), the delivery is given back."""
        started = time.monotonic()
        host = _receiver(leased, self.outbound.client.guard.host_of(leased.url))
        deferred = self.hosts.defer(host)
        if deferred is not None:
            await self._defer(leased, host, deferred)
            return
        try:
            attempt = await self._attempt(leased)
        except asyncio.CancelledError:
            self.hosts.done(host, timed_out=False)
            with contextlib.suppress(Exception):
                async with asyncio.timeout(2.0):
                    await self.leases.outbox.record(leased, "released")
            raise
        self.hosts.done(host, timed_out=attempt.timed_out)
        wait_s = 0.0
        if attempt.outcome == "retry":
            wait_s = max(self.backoff.wait_s(leased.attempts + 1), attempt.retry_after_s or 0.0)
        try:
            settled = await self.leases.outbox.record(
                leased,
                attempt.outcome,
                status=attempt.status,
                error=attempt.error[:MAX_ERROR_CHARS],
                wait_ms=round(wait_s * 1000),
            )
        except Exception as exc:
            # Not recorded: the lease runs out and the delivery is sent again (at least once).
            log.warning(
                "job %s: recording its %s callback failed: %r", leased.job_id, leased.event, exc
            )
            return
        outcome = {"pending": "retrying"}.get(settled, settled)
        metrics.record_callback(outcome, time.monotonic() - started)
        self._log(leased, settled, attempt, wait_s)

    async def _defer(self, leased: Leased, host: str, wait_s: float) -> None:
        """Give the delivery back unsent, due in ``wait_s``: its host is backed off."""
        try:
            await self.leases.outbox.record(leased, "released", wait_ms=round(wait_s * 1000))
        except Exception as exc:
            # Not recorded: the lease runs out and it comes due again (at least once).
            log.warning("job %s: deferring its callback failed: %r", leased.job_id, exc)
            return
        metrics.record_callback("deferred", 0.0)
        log.info(
            "job %s: %s callback deferred %.1fs: its receiver %s keeps timing out",
            leased.job_id,
            leased.event,
            wait_s,
            host.split(" ", 1)[1],
        )

    async def _attempt(self, leased: Leased) -> Attempt:
        if is_batch_id(leased.job_id):
            batch = await self.batches.view(leased.job_id)
            if batch is None:
                return Attempt("failed", error="the batch expired before its callback was sent")
            return await self._post(leased, batch.model_dump_json().encode())
        view = await self.leases.result_of(leased.job_id)
        if view is None:
            return Attempt("failed", error="the job expired before its callback was sent")
        if leased.event == "requires_action" and (
            view.status != "requires_action" or view.pauses != leased.pause
        ):
            return Attempt("superseded")  # the pause is over: the job moved on
        return await self._post(leased, public_job(view).model_dump_json().encode())

    async def _post(self, leased: Leased, body: bytes) -> Attempt:
        headers = self.outbound.signer.headers(leased.tenant, leased.webhook_id, body)
        try:
            response = await self.outbound.client.post_json(
                leased.url, body, headers, timeout_s=self.timeout_s, retries=0
            )
        except (OutboundRefused, OutboundFailed) as failure:
            return judge(failure, self.timeout_s)
        return Attempt("delivered", response.status)

    @staticmethod
    def _log(leased: Leased, settled: str, attempt: Attempt, wait_s: float) -> None:
        what = f"job {leased.job_id}: {leased.event} callback"
        number = leased.attempts + 1
        if settled == "delivered":
            log.info("%s delivered (attempt %d, HTTP %s)", what, number, attempt.status)
        elif settled == "pending":
            log.info(
                "%s attempt %d failed (%s); again in %.1fs", what, number, attempt.error, wait_s
            )
        elif settled == "failed":
            log.warning("%s failed for good after %d attempt(s): %s", what, number, attempt.error)
        elif settled == "superseded":
            log.info("%s not sent: the job left that pause", what)
        else:  # stale (redelivered or taken over meanwhile) or gone (the job expired)
            log.info("%s: attempt %d not recorded (%s)", what, number, settled)
