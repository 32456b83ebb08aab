"""``Worker``: the worker's parts joined, run until a stop event.

worker = Worker(store, router, settings)
stop = asyncio.Event()
task = asyncio.create_task(worker.run(stop))
...
stop.set()        # stop claiming; running jobs get settings.drain_timeout_s to finish,
await task        # the rest are cancelled and released to the front of the queue
"""

from __future__ import annotations

import asyncio
import logging
import os
import secrets
import socket

from app.core.turn.model import ModelClient
from app.gcsettle import settle_gc
from app.outbound.kit import Outbound
from app.settings import Settings
from app.store import Leases
from app.tracing import Tracing
from app.worker.bookkeeping import Bookkeeping
from app.worker.callbacks import CallbackSender
from app.worker.claims import Claims
from app.worker.commit import Committer
from app.worker.drain import drain, release_all
from app.worker.pause import Pauser
from app.worker.progress import ProgressWriter
from app.worker.running import Runner
from app.worker.upkeep import Upkeep

log = logging.getLogger("app.worker")


class Worker:
    """Runs jobs from ``store`` on ``client`` until ``run``'s stop event is set.

    Process concerns (signals, the metrics port, building the pool and the client) live
    in ``app.assembly``, so ``reprompt serve`` can run the same class in-process.
    ``outbound``: HTTP tools, webhook validators and callbacks (None: none of them).
    """

    def __init__(
        self,
        store: Leases,
        client: ModelClient,
        settings: Settings,
        *,
        worker_id: str | None = None,
        outbound: Outbound | None = None,
        tracing: Tracing | None = None,
    ) -> None:
        self.store = store
        self.settings = settings
        self.worker_id = worker_id or default_worker_id()
        self._hurry = asyncio.Event()
        books = Bookkeeping()
        progress = ProgressWriter(store, books)
        committer = Committer(store, settings, books, progress, room=lambda: self.claims.room)
        pauser = Pauser(store, settings, books, progress, committer)
        self.runner = Runner(
            client,
            outbound,
            tracing,
            books=books,
            progress=progress,
            committer=committer,
            pauser=pauser,
            partial_interval_s=settings.stream_interval_ms / 1000,
        )
        self.claims = Claims(
            store, self.worker_id, settings.worker_concurrency, self.runner.process, books
        )
        self.upkeep = Upkeep(store, settings, self.claims.jobs)
        # Completion callbacks (#13): this worker sends its share of every shard's outbox.
        self.sender = (
            CallbackSender(store, outbound, settings)
            if outbound is not None and settings.callback_concurrency > 0
            else None
        )

    @property
    def running(self) -> int:
        """How many jobs this worker holds now."""
        return len(self.claims.jobs)

    def hurry(self) -> None:
        """Cut the drain short: cancel what is still running and release it to the queue."""
        self._hurry.set()

    async def run(self, stop: asyncio.Event) -> None:
        """Claim and run jobs until ``stop`` is set, then drain and return."""
        settle_gc()
        log.info(
            "worker %s started (concurrency %d)", self.worker_id, self.settings.worker_concurrency
        )
        claims = self.claims
        claims.begin(stop)
        background = [
            asyncio.create_task(self.upkeep.heartbeats(), name="heartbeats"),
            asyncio.create_task(self.upkeep.cancellations(), name="cancellations"),
            asyncio.create_task(self.upkeep.reaper(stop), name="reaper"),
            asyncio.create_task(claims.receive(stop), name="hand-offs"),
        ]
        if self.sender is not None:
            background.append(asyncio.create_task(self.sender.run(stop), name="callbacks"))
        try:
            await claims.loop(stop)
            await drain(claims, self.store, self.settings.drain_timeout_s, self._hurry)
        except BaseException:
            # Cancelled from outside (an embedding app's shutdown) or a bug: no drain, but
            # no job may sit on a lease until it expires (that would count an attempt).
            await release_all(claims, self.store)
            raise
        finally:
            claims.end()
            for task in background:
                task.cancel()
            if claims.leaving is not None:  # its LREM: taken off the lists all the same
                background.append(claims.leaving)
            await asyncio.gather(*background, return_exceptions=True)
            log.info("worker %s stopped", self.worker_id)


def default_worker_id() -> str:
    return f"{socket.gethostname()}:{os.getpid()}:{secrets.token_hex(3)}"
