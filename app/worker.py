"""The worker: claims jobs from Redis, runs the turn loop on each, commits the result.

    worker = Worker(store, router, settings)
    stop = asyncio.Event()
    task = asyncio.create_task(worker.run(stop))
    ...
    stop.set()        # stop claiming; running jobs get settings.drain_timeout_s to finish,
    await task        # the rest are cancelled and released to the front of the queue

Up to ``settings.worker_concurrency`` jobs run at once. Each claim carries a fencing
token and a lease that a heartbeat renews; every write the worker makes is fenced by that
token, so a worker that lost its lease (killed, paused, partitioned) can never overwrite
the job's new owner. A heartbeat that finds the lease gone, or a cancellation of the job,
stops the job's task at once (aborting the model call in flight) and nothing more is
written for it. The same worker reaps expired leases of every worker.

``reprompt worker`` runs one in a process of its own (``app.assembly.run_worker``).
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
import os
import secrets
import socket
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any, Final, Literal

from pydantic import ValidationError

from app import logs, metrics
from app.core.answer.finding import Finding as Verdict
from app.core.turn.checkpoint import Checkpoint, RequiredAction, Resume
from app.core.turn.clock import iso
from app.core.turn.conversation import STORED_INPUT_CHARS, TranscriptEntry, stored_transcript
from app.core.turn.loop import Runtime, WebhookCheck, run_job
from app.core.turn.model import ModelClient, ToolCall, ToolSpec
from app.core.turn.prompting import show_input, show_input_plain
from app.core.turn.tools import Tool, ToolAnswer
from app.core.wire import codes
from app.core.wire.base import Wire
from app.core.wire.envelope import Envelope, Progress
from app.core.wire.events import LoopEvent, ToolsAnswered, TurnEnded, TurnStarted
from app.core.wire.record import Rejection, Spend, TurnRecord
from app.core.wire.spec import JobSpec, ToolDef, ValidatorSpec, stored_spec
from app.delivery import CallbackSender
from app.gcsettle import settle_gc
from app.outbound.kit import Outbound
from app.settings import Settings
from app.store import MAX_CLAIM, Claim, Leases, StoreUnavailable, Written
from app.tracing import JobSpan, Tracing

# Not __name__: run as ``python -m app.worker`` this module is ``__main__``.
log = logging.getLogger("app.worker")

# How long an idle worker blocks in ``wait_for_work`` before looking at the queue again:
# a wake-up lost (in a Redis blip, or taken by a worker that died while idle on a cluster,
# where the submit cannot tell: lua/submit.lua) costs at most this much latency.
IDLE_WAIT_S: Final = 1.0
# Progress writes that fail for a transport reason are tried this many times in all.
WRITE_TRIES: Final = 3
# A job's progress (turn started, turn done, its record, tool outputs) is written once the
# job has stayed this long in one phase (a model call, a tool call, the work between two
# events) with something unwritten; until then it waits for the next write or the commit.
# So a watcher (GET /v1/jobs/{id}, the event stream) sees a call in flight within this
# much of its start (plus the event loop's lag and one round trip), and a job whose every
# phase is shorter (a fast single-turn job, even on a loaded worker) costs no progress
# write at all: its turn and events go with the commit.
FLUSH_AFTER_S: Final = 1.0
# Progress writes in flight at once, for all jobs together: a burst (hundreds of jobs
# claimed together, their calls all outlasting FLUSH_AFTER_S) must not take the pool's
# connections from the heartbeats and commits; the rest wait their turn, or go with the
# commit if it comes first.
FLUSHES_AT_ONCE: Final = 16
# The most jobs one claim asks for (at most the store's MAX_CLAIM): a claim's jobs are all
# started in one turn of the event loop, and a worker with thousands of free slots should
# not keep its heartbeats and running jobs waiting for that long.
CLAIM_BATCH: Final = min(100, MAX_CLAIM)
# How long a cancelled job may take to unwind and release its claim on shutdown.
UNWIND_TIMEOUT_S: Final = 10.0
# How often a stopped job's task is cancelled again until the cancellation lands.
RECANCEL_S: Final = 0.1

# What a job runs in when traces are off: one shared no-op, nothing allocated per job.
_UNTRACED: Final = contextlib.nullcontext()

StopReason = Literal["cancelled", "lease-lost", "drain"]
Ended = tuple[Envelope, tuple[Rejection, ...], tuple[TranscriptEntry, ...]]


class _LeaseLost(Exception):
    """A fenced write was refused: the job is no longer ours (lease lost or cancelled)."""


@dataclass(eq=False, slots=True)
class _Job:
    """A claimed job this worker is running."""

    claim: Claim
    started: float = field(default_factory=time.monotonic)
    last_beat: float = field(default_factory=time.monotonic)
    task: asyncio.Task[None] | None = None
    stopped: StopReason | None = None  # why the worker stopped it, if it did
    unwinding: bool = False  # the stop reached the task
    committing: bool = False
    # What is not written yet: events, the last turn's record, the latest progress.
    events: list[tuple[str, Wire]] = field(default_factory=list)
    turn: TurnRecord | None = None
    # The event the in-progress envelope's progress comes from: made into a Progress only
    # when written, since most jobs' progress goes with the commit and is never shown.
    progress: TurnStarted | TurnEnded | None = None
    flush: asyncio.TimerHandle | None = None
    flush_at: float = 0.0  # loop time: written then unless another event comes first
    flushing: asyncio.Task[None] | None = None
    writing: bool = False  # the background flush has its turn and is writing
    span: JobSpan | None = None  # with traces on: this claim's span

    @property
    def id(self) -> str:
        return self.claim.job_id

    @property
    def pending(self) -> bool:
        return bool(self.events) or self.turn is not None


class Worker:
    """Runs jobs from ``store`` on ``client`` until ``run``'s stop event is set.

    Process concerns (signals, the metrics port, building the pool and the client) live
    in ``app.assembly``, so ``reprompt serve`` can run the same class in-process.
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
        self.tracing = tracing  # None: traces off
        self.client = client
        self.settings = settings
        self.outbound = outbound  # HTTP tools; None: jobs with url tools fail invalid-input
        self.worker_id = worker_id or default_worker_id()
        self._jobs: dict[str, _Job] = {}
        self._capacity = settings.worker_concurrency
        self._slots = asyncio.Semaphore(self._capacity)
        self._hurry = asyncio.Event()
        # Set while no claim is in flight: a job handed over meanwhile waits for it, so
        # the slots the claim asked for are still free when its jobs come back.
        self._claim_done = asyncio.Event()
        self._claim_done.set()
        self._leaving: asyncio.Task[None] | None = None  # ``_leave_when_full``'s, in flight
        self._stopping: asyncio.Event | None = None  # run's stop, while it runs
        self._stop_waiter: asyncio.Future[Any] | None = None
        self._flushes = asyncio.Semaphore(FLUSHES_AT_ONCE)
        # Bookkeeping owed, every job's in order (``_owe``): (job id, work).
        self._owed: list[tuple[str, Callable[[], None]]] = []
        # Completion callbacks (#13): this worker sends its share of every shard's outbox.
        self.sender = (
            CallbackSender(store, outbound, settings)
            if outbound is not None and settings.callback_concurrency > 0
            else None
        )

    @property
    def running(self) -> int:
        """How many jobs this worker holds now."""
        return len(self._jobs)

    def hurry(self) -> None:
        """Cut the drain short: cancel what is still running and release it to the queue."""
        self._hurry.set()

    async def run(self, stop: asyncio.Event) -> None:
        """Claim and run jobs until ``stop`` is set, then drain and return."""
        settle_gc()
        log.info(
            "worker %s started (concurrency %d)", self.worker_id, self.settings.worker_concurrency
        )
        self._stopping = stop
        # One standing wait for ``stop``, shared by the claim loop's waits (``_before_stop``).
        self._stop_waiter = asyncio.ensure_future(stop.wait())
        if isinstance(self.store, Leases):
            self.store.on_handed = self._handed_now
        background = [
            asyncio.create_task(self._heartbeats(), name="heartbeats"),
            asyncio.create_task(self._cancellations(), name="cancellations"),
            asyncio.create_task(self._reaper(stop), name="reaper"),
            asyncio.create_task(self._receive(stop), name="hand-offs"),
        ]
        if self.sender is not None:
            background.append(asyncio.create_task(self.sender.run(stop), name="callbacks"))
        try:
            await self._claim_loop(stop)
            await self._drain()
        except BaseException:
            # Cancelled from outside (an embedding app's shutdown) or a bug: no drain, but
            # no job may sit on a lease until it expires (that would count an attempt).
            await self._release_all()
            raise
        finally:
            self._stop_waiter.cancel()
            self._stop_waiter = None
            if isinstance(self.store, Leases):
                self.store.on_handed = None
            for task in background:
                task.cancel()
            if self._leaving is not None:  # its LREM: taken off the lists all the same
                background.append(self._leaving)
            await asyncio.gather(*background, return_exceptions=True)
            log.info("worker %s stopped", self.worker_id)

    # -- claiming -----------------------------------------------------------------------

    async def _claim_loop(self, stop: asyncio.Event) -> None:
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
                self._slots.release()
                failures += 1
                log.warning("claim failed (%d in a row)", failures, exc_info=failures == 1)
                await _wait(stop, min(0.1 * 2**failures, 5.0))
                continue
            self._claim_done.set()
            failures, hint = 0, None
            if not claims:
                self._slots.release()
                hint = await self._idle(stop)
                continue
            self._start(claims[0])
            for claim in claims[1:]:
                await self._slots.acquire()  # free by construction: returns at once
                self._start(claim)
            if len(claims) < free:
                # Fewer than asked: the queues are empty now; wait for a wake-up rather than
                # ask again at once.
                hint = await self._idle(stop)

    def _free_slots(self) -> int:
        """Slots free beyond the one just taken (taken later, one per extra claim)."""
        return max(0, self._capacity - len(self._jobs) - 1)

    async def _take_slot(self, stop: asyncio.Event) -> bool:
        """Wait for a free slot; False (and no slot held) if ``stop`` came first."""
        if stop.is_set():
            return False
        if not self._slots.locked():  # the commonest: a slot is free, taken without a wait
            await self._slots.acquire()
            return True
        acquire = asyncio.ensure_future(self._slots.acquire())
        if not await _before_stop(acquire, stop, self._stop_waiter):
            return False
        if stop.is_set():
            self._slots.release()
            return False
        return True

    async def _idle(self, stop: asyncio.Event) -> int | None:
        """Block until work may be there (a submit or requeue) or ``stop``; never spin.
        The shard the work was queued on, when the wake-up said.

        The short claim before put this worker on the idle list of each shard it found
        empty, so a submit there hands this worker the job, claimed for it, or wakes it
        alone (``Leases.claim``); it looks at the queues every ``IDLE_WAIT_S`` besides,
        which also bounds how long a job waits when its wake-up went to a worker that died
        while idle. A hand-off ends a wait too (counted as such), but needs no claim: the
        job is started by ``_receive``, and the wait goes on to its deadline."""
        deadline = time.monotonic() + IDLE_WAIT_S
        while True:
            left = max(0.0, deadline - time.monotonic())
            waiting = asyncio.ensure_future(self.store.wait_for_work(left))
            if not await _before_stop(waiting, stop, self._stop_waiter):
                return None
            if waiting.exception() is not None:
                log.warning("waiting for work failed: %r", waiting.exception())
                await _wait(stop, IDLE_WAIT_S)
                return None
            handed = self.store.woken and self.store.handed_only
            ended = "handoff" if handed else "woken" if self.store.woken else "timeout"
            metrics.idle_wait(ended)
            if not handed or time.monotonic() >= deadline:
                return waiting.result()

    async def _receive(self, stop: asyncio.Event) -> None:
        """Start the jobs submits hand to this worker (``Leases.handed``: each claimed for
        it already, as a claim would). A job that finds no free slot (a worker listed on
        several shards can be handed one on each), or a worker that stops, releases it to
        the front of its queue, its attempt not counted: never more than
        ``worker_concurrency`` jobs at once, and none left to wait for its lease."""
        while True:
            try:
                claims = await self.store.handed()
            except Exception as exc:
                log.warning("receiving handed-over jobs failed: %r", exc)
                await asyncio.sleep(1.0)
                continue
            for claim in claims:
                await self._claim_done.wait()  # the slots a claim in flight asked for are its
                if stop.is_set() or self._slots.locked():
                    await self._give_back(claim)
                else:
                    await self._slots.acquire()  # free (not locked): returns at once
                    self._start(claim)

    def _handed_now(self) -> None:
        """Jobs handed over (``Leases.on_handed``, as their message is read): started in
        this pass of the loop when nothing stands in the way (no claim in flight, the
        worker not stopping, a free slot for each), rather than passes later by
        ``_receive``, which still takes whatever is left here."""
        stop = self._stopping
        if stop is None or stop.is_set() or not self._claim_done.is_set():
            return
        store = self.store
        assert isinstance(store, Leases)  # the only store that calls it
        while store.pending_handed and _take_free(self._slots):
            claims = store.take_handed(1)
            if not claims:  # unreadable: logged, its lease runs out
                self._slots.release()
                continue
            self._start(claims[0])

    async def _give_back(self, claim: Claim) -> None:
        """Release a handed-over job this worker does not start (best effort: else its
        lease runs out and the reaper requeues it, counting an attempt)."""
        try:
            released = await self.store.release(claim)
        except Exception as exc:
            log.warning("job %s: release of a handed-over job failed: %r", claim.job_id, exc)
            return
        if released:
            log.info("job %s: handed over, not started here, released to the queue", claim.job_id)

    def _start(self, claim: Claim) -> None:
        job = _Job(claim)
        self._jobs[job.id] = job
        job.task = asyncio.create_task(self._process(job), name=f"job {job.id}")
        job.task.add_done_callback(lambda _: self._finished(job))
        if self._slots.locked() and self.store.listed and self._leaving is None:
            self._leaving = asyncio.create_task(self._leave_when_full(), name="leave lists")

    async def _leave_when_full(self) -> None:
        """No free slot left: every copy of its entry off the idle lists (some can be left:
        its commits put copies back, claimed jobs took slots too), so that submits stop
        handing this worker jobs it could only release. The claim that takes the next free
        slot lists it again if it comes back short."""
        try:
            await self.store.leave()
        except Exception as exc:  # its entries stay: a job handed over is released
            log.warning("leaving the idle lists failed: %r", exc)
        finally:
            self._leaving = None

    def _finished(self, job: _Job) -> None:
        self._catch_up(job)  # done by the task's end, unless it never ran
        if self._jobs.get(job.id) is job:
            del self._jobs[job.id]
        self._slots.release()
        task = job.task
        if task is not None and not task.cancelled() and task.exception() is not None:
            log.error("job %s: the worker failed", job.id, exc_info=task.exception())

    # -- one job ------------------------------------------------------------------------

    async def _process(self, job: _Job) -> None:
        now = time.time()
        # Counted and logged once the job waits for its model call (``_owe``), the line
        # stamped with now: a worker killed mid-job still leaves it to say it held the job.
        self._owe(job, functools.partial(_started, job.claim, now))  # no cycle with job
        with self._span(job):
            await self._run(job)

    def _owe(self, job: _Job, work: Callable[[], None]) -> None:
        """Do ``work`` (bookkeeping: a metric, a log line) once the job's task waits (for the
        model's answer, for Redis's reply) rather than on its way to the model call or the
        commit, after everything owed before it; ``_catch_up`` does it sooner where order
        shows. One payment scheduled for every job's bookkeeping of a pass of the loop."""
        owed = self._owed
        owed.append((job.id, work))
        if len(owed) == 1:
            asyncio.get_running_loop().call_soon(self._catch_up)

    def _catch_up(self, job: _Job | None = None) -> None:
        """Do everything owed (``_owe``), in order, now: before anything else the worker
        logs or counts for ``job``. A failure is logged, and the rest done."""
        owed = self._owed
        if not owed:
            return
        self._owed = []
        for job_id, work in owed:
            try:
                work()
            except Exception:
                log.exception("job %s: its bookkeeping failed", job_id)

    def _span(self, job: _Job) -> contextlib.AbstractContextManager[object]:
        """The claim's trace span (a child of the client's, when it sent a traceparent)."""
        if self.tracing is None:
            return _UNTRACED
        claim = job.claim
        job.span = self.tracing.job(
            job_id=claim.job_id,
            attempt=claim.attempt,
            tenant=claim.tenant,
            resumed=claim.checkpoint is not None,
            parent=claim.trace,
        )
        return job.span

    async def _run(self, job: _Job) -> None:
        try:
            outcome = await self._execute(job)
            if isinstance(outcome, Paused) and job.stopped is None:
                await self._pause(job, outcome)
            elif outcome is not None and not isinstance(outcome, Paused) and job.stopped is None:
                await self._commit(job, *outcome)
        except asyncio.CancelledError:
            await self._stopped(job)
            raise
        else:
            if job.stopped is not None:  # ended between turns, or by a refused write
                await self._stopped(job)
        finally:
            self._catch_up(job)
            metrics.job_left()

    async def _stopped(self, job: _Job) -> None:
        job.unwinding = True
        self._catch_up(job)
        if job.span is not None:
            job.span.stopped(job.stopped or "shutdown")
        log.info("job %s stopped: %s", job.id, job.stopped or "the worker is shutting down")
        if job.stopped == "drain":
            await self._release(job)

    async def _execute(self, job: _Job) -> Ended | Paused | None:
        """The envelope, history and transcript to commit, or the pause for client tools;
        None when the job is not ours."""
        try:
            spec = stored_spec(job.claim.spec)
        except ValidationError as exc:
            detail = f"the stored job is not a valid job: {_fields(exc)}"
            return Envelope.failure(codes.INVALID_INPUT, detail), (), ()

        runtime = Runtime(
            client=self.client,
            # Done at once, or the coroutine to await (``_trace``): no coroutine around it.
            tracer=functools.partial(self._trace, job),
            cancelled=lambda: job.stopped is not None,
            tools=self._http_tools(spec, job.claim),
            webhook=self._webhook_check(spec, job.claim),
        )
        claim = job.claim
        resume = None
        if claim.checkpoint is not None:
            outputs = claim.outputs
            resume = Resume(
                claim.checkpoint,
                None if outputs is None else outputs.by_call,
                None if outputs is None else outputs.received_ms,
            )
            waited_ms = (
                outputs.received_ms if outputs is not None else int(time.time() * 1000)
            ) - claim.checkpoint.paused_ms
            metrics.TOOL_WAIT.observe(max(0, waited_ms) / 1000)
        try:
            result = await run_job(spec, runtime, resume=resume)
        except _LeaseLost:
            return None
        except Exception:  # a bug in the loop ends this job, never the worker
            self._catch_up(job)
            log.exception("job %s: the turn loop failed", job.id)
            detail = "the worker failed while running the job"
            return Envelope.failure(codes.INTERNAL_ERROR, detail), (), ()
        if result.paused is not None:
            return Paused(spec, result.paused)
        messages = result.transcript
        # The input is written out to be found in a message only when one is long enough
        # to hold a long input (most jobs: none is).
        if any(len(message.content) > STORED_INPUT_CHARS for message in messages):
            shown = (show_input(spec.input), show_input_plain(spec.input))
        else:
            shown = ("", "")
        return result.envelope, result.history, stored_transcript(messages, *shown)

    def _http_tools(self, spec: JobSpec, claim: Claim) -> list[Tool]:
        """The job's HTTP tools, each call POSTed through the outbound guard, signed."""
        outbound = self.outbound
        if outbound is None:
            return []
        tools = []
        for tool in spec.tools:
            url = tool.url
            if url is None:
                continue

            async def call(
                request: ToolCall, arguments: dict[str, Any], tool: ToolDef = tool, url: str = url
            ) -> ToolAnswer:
                outcome = await outbound.call_tool(
                    tenant=claim.tenant,
                    job_id=claim.job_id,
                    call_id=request.id,
                    name=tool.name,
                    url=url,
                    headers=tool.headers,
                    arguments=arguments,
                    timeout_ms=tool.timeout_ms,
                )
                return ToolAnswer(outcome.text, ok=outcome.ok, outcome=outcome.outcome)

            spec_ = ToolSpec(tool.name, tool.description, tool.parameters)
            tools.append(Tool(spec_, mode="http", call_handler=call))
        return tools

    def _webhook_check(self, spec: JobSpec, claim: Claim) -> WebhookCheck | None:
        """Webhook validators of this job, POSTed through the outbound guard, signed."""
        outbound = self.outbound
        if outbound is None:
            return None

        async def check(validator: ValidatorSpec, value: Any, attempt: int) -> Verdict:
            return await outbound.check(
                validator, value, attempt, tenant=claim.tenant, job_id=claim.job_id, spec=spec
            )

        return check

    def _trace(self, job: _Job, event: LoopEvent) -> Awaitable[None] | None:
        """Mirror the loop's events into the job's outbox, the metrics and the trace; the
        outbox is written once a phase lasts ``FLUSH_AFTER_S``, with the next write, or with
        the commit. Done here (``None``), but for a turn's end while the turn before waits
        to be written: then the coroutine that writes it first, for the loop to await."""
        if job.span is not None:
            job.span.on_event(event)
        if isinstance(event, TurnEnded):
            # The call was made and paid for, whoever owns the job now: counted once the
            # job waits (the commit's reply, the next model call's answer).
            self._owe(job, functools.partial(_count_turn, event))
            if job.turn is not None:  # one record per write: flush the one before
                return self._flushed_then(job, event)
        self._note(job, event)
        return None

    async def _flushed_then(self, job: _Job, event: TurnEnded) -> None:
        await self._flush(job)
        self._note(job, event)

    def _note(self, job: _Job, event: LoopEvent) -> None:
        """Put ``event`` in the job's outbox (``_trace``)."""
        if isinstance(event, ToolsAnswered):
            self._owe(job, functools.partial(metrics.record_tool_calls, event.calls))
            job.events.append((event.name, event))
        elif isinstance(event, TurnEnded):
            job.turn = event.record.model_copy(update={"job_attempt": job.claim.attempt})
            job.events.append((event.name, event.summary()))
            job.progress = event
        else:
            job.events.append((event.name, event))
            job.progress = event
        # Every event starts a new phase: the outbox is due once this one has lasted
        # FLUSH_AFTER_S. One timer per job, moved on lazily when it fires early.
        loop = asyncio.get_running_loop()
        job.flush_at = loop.time() + FLUSH_AFTER_S
        if job.flush is None:
            job.flush = loop.call_at(job.flush_at, self._flush_soon, job)
        if job.stopped is not None:
            raise _LeaseLost(job.id)

    def _flush_soon(self, job: _Job) -> None:
        loop = asyncio.get_running_loop()
        if loop.time() < job.flush_at:  # an event came since: its phase has not lasted
            job.flush = loop.call_at(job.flush_at, self._flush_soon, job)
            return
        job.flush = None
        if job.pending and not job.committing and job.flushing is None:
            job.flushing = asyncio.create_task(self._flush_in_background(job))

    async def _flush_in_background(self, job: _Job) -> None:
        try:
            async with self._flushes:
                job.writing = True
                await self._flush(job)
        finally:
            job.flushing = None
            job.writing = False

    async def _flush(self, job: _Job) -> None:
        """Write the outbox: the pending turn record, events and progress, in one script."""
        if job.flush is not None:
            job.flush.cancel()
            job.flush = None
        if not job.pending or job.progress is None:
            return
        turn, events, progress = job.turn, job.events, _progress(job.progress)
        job.turn, job.events = None, []
        claim = job.claim
        written, _ = await self._retrying(
            job,
            "progress",
            lambda: self.store.write(claim, progress=progress, turn=turn, events=events),
        )
        self._catch_up(job)
        if written is None or written is Written.OURS:
            return  # given up on a transport error: progress is best effort
        if job.stopped is None:  # else we already know why, and stop anyway
            metrics.STALE_COMMITS.inc()
            log.warning(
                "job %s: stale write refused (lease lost or job cancelled); dropping the job",
                job.id,
            )
            self._stop(job, "lease-lost")

    async def _retrying(
        self, job: _Job, what: str, call: Callable[[], Awaitable[Written]]
    ) -> tuple[Written | None, int]:
        """The one retry loop for the worker's progress writes: ``(reply, tries)``, the
        reply being None when every try failed for a transport reason."""
        for attempt in range(1, WRITE_TRIES + 1):
            try:
                return await call(), attempt
            except Exception as exc:
                self._catch_up(job)
                if attempt == WRITE_TRIES:
                    log.warning("job %s: %s failed %d times: %r", job.id, what, attempt, exc)
                    return None, attempt
                await asyncio.sleep(0.2 * attempt)
        raise AssertionError("unreachable")  # pragma: no cover

    async def _commit(
        self,
        job: _Job,
        envelope: Envelope,
        history: tuple[Rejection, ...],
        transcript: tuple[TranscriptEntry, ...],
    ) -> None:
        """Commit the end, with whatever the outbox still holds, in one fenced script."""
        claim = job.claim
        turn, events = await self._last_outbox(job)
        envelope = envelope.with_earlier(_earlier(claim))

        def complete() -> Awaitable[Written]:  # the store's coroutine, with no other around it
            return self.store.complete(
                claim,
                envelope=envelope,
                history=history,
                transcript=transcript,
                turn=turn,
                events=events,
                room=self._capacity - len(self._jobs) + 1,  # this job's slot too
            )

        written, tries = await self._settle(job, "commit", complete)
        self._catch_up(job)
        if written is None:
            if job.span is not None:
                job.span.stopped("commit-failed")
            return
        committed = written is Written.OURS
        if not committed and tries > 1:
            # An earlier try may have committed and lost only its reply.
            committed = await self._committed(job, envelope)
        duration_s = time.monotonic() - job.started
        if job.span is not None:
            job.span.ended(envelope, committed=committed)
        if not committed:
            metrics.STALE_COMMITS.inc()
            log.warning(
                "job %s: stale commit refused (lease lost or job cancelled; attempt %d, %.3fs)",
                job.id,
                claim.attempt,
                duration_s,
            )
            return
        metrics.record_job(envelope, duration_s=duration_s)
        if log.isEnabledFor(logging.INFO):  # else nothing of the line is worked out
            logs.info(log, _ended_line(job, envelope, duration_s))

    async def _pause(self, job: _Job, paused: Paused) -> None:
        """Hand the job to its client: ``requires_action`` with the checkpoint, fenced.

        The job leaves this worker (lease, slot and all); whichever worker claims it after
        the client's outputs resumes it from the checkpoint.
        """
        claim, spec = job.claim, paused.spec
        turn, events = await self._last_outbox(job)
        state = paused.checkpoint.model_copy(update={"earlier": _earlier(claim)})
        timeout_ms = spec.tool_timeout_ms or self.settings.tool_timeout_ms
        expires_ms = state.paused_ms + timeout_ms
        if spec.budget.deadline_ms is not None:  # the wait counts toward the deadline
            expires_ms = min(expires_ms, state.started_ms + spec.budget.deadline_ms)
        expires = datetime.fromtimestamp(expires_ms / 1000, tz=UTC)
        action = RequiredAction.of(state, iso(expires))
        last = state.turns[-1] if state.turns else None
        progress = Progress(
            phase="requires_action",
            turn=None if last is None else last.index,
            type=None if last is None else last.type,
            calls_left=state.work_remaining + state.retry_remaining,
        )

        async def pause() -> Written:
            return await self.store.pause(
                claim,
                state=state,
                action=action,
                expires_ms=expires_ms,
                progress=progress,
                turn=turn,
                events=events,
            )

        written, _ = await self._settle(job, "pause", pause)
        self._catch_up(job)
        if job.span is not None:
            if written is Written.OURS:
                job.span.paused(len(action.tool_calls))
            else:
                job.span.stopped("pause-failed" if written is None else "stale")
        if written is Written.OURS:
            metrics.JOBS_PAUSED.inc()
            log.info(
                "job %s requires_action: %d tool call(s) for the client, until %s",
                job.id,
                len(action.tool_calls),
                action.expires_at,
            )
        elif written is not None:
            metrics.STALE_COMMITS.inc()
            log.warning("job %s: stale pause refused (lease lost or job cancelled)", job.id)

    async def _last_outbox(self, job: _Job) -> tuple[TurnRecord | None, list[tuple[str, Wire]]]:
        """Stop flushing the outbox and take what it holds: it goes with the last write."""
        job.committing = True
        if job.flush is not None:
            job.flush.cancel()
            job.flush = None
        if job.flushing is not None:
            if not job.writing:  # still waiting for its turn: the last write carries it
                job.flushing.cancel()
            await asyncio.gather(job.flushing, return_exceptions=True)
        turn, events = job.turn, job.events
        job.turn, job.events = None, []
        return turn, events

    async def _settle(
        self, job: _Job, what: str, write: Callable[[], Awaitable[Written]]
    ) -> tuple[Written | None, int]:
        """The job's last write (commit or pause), tried through a Redis blip.

        A blip does not discard a paid answer: the write is retried with backoff while
        heartbeats go on, until Redis answers or the lease is long gone (then the reaper
        runs the job again, and a late write still records the paid turn). ``(None, tries)``
        when it gave up.
        """
        give_up = time.monotonic() + 2 * self.settings.lease_ms / 1000
        wait_s = 0.1
        tries = 0
        while True:
            tries += 1
            try:
                return await write(), tries
            except (StoreUnavailable, OSError) as exc:
                self._catch_up(job)
                if time.monotonic() + wait_s > give_up:
                    # The lease runs out and the reaper requeues the job: it is not lost.
                    log.error("job %s: %s failed, the job will be run again: %r", job.id, what, exc)
                    return None, tries
                log.warning("job %s: %s failed (%r), retrying in %.1fs", job.id, what, exc, wait_s)
                await asyncio.sleep(wait_s)
                wait_s = min(wait_s * 2, 2.0)

    async def _committed(self, job: _Job, envelope: Envelope) -> bool:
        """Whether the job already holds exactly this result (best effort)."""
        try:
            view = await self.store.result_of(job.id)
        except Exception:
            return False
        return view is not None and view.terminal and view.result == envelope

    async def _release(self, job: _Job) -> None:
        try:
            released = await self.store.release(job.claim)
        except Exception as exc:
            # The lease runs out and the reaper requeues it (counting an attempt).
            log.warning("job %s: release failed: %r", job.id, exc)
            return
        if released:
            log.info("job %s released to the queue", job.id)

    def _stop(self, job: _Job, why: StopReason) -> bool:
        """Cancel the job's task (aborting its model call); False if it was already stopping
        or is committing (the fenced commit settles it: a heartbeat that raced a successful
        commit must not turn it into a "lost" job)."""
        if job.stopped is not None or job.committing or job.task is None or job.task.done():
            return False
        job.stopped = why
        self._cancel(job)
        return True

    def _cancel(self, job: _Job) -> None:
        # Again and again until the task unwinds: on Python 3.11, asyncio.wait_for (which
        # redis-py uses) drops a cancellation that arrives as its inner call completes.
        if job.task is None or job.task.done() or job.unwinding:
            return
        job.task.cancel()
        asyncio.get_running_loop().call_later(RECANCEL_S, self._cancel, job)

    # -- shutdown -----------------------------------------------------------------------

    async def _drain(self) -> None:
        await self._unlist()
        tasks = {job.task for job in self._jobs.values() if job.task is not None}
        if tasks:
            timeout = self.settings.drain_timeout_s
            log.info("draining %d running jobs (up to %.1fs)", len(tasks), timeout)
            everything = asyncio.ensure_future(asyncio.wait(tasks))
            hurry = asyncio.ensure_future(self._hurry.wait())
            try:
                await asyncio.wait(
                    {everything, hurry}, timeout=timeout, return_when=asyncio.FIRST_COMPLETED
                )
            finally:
                everything.cancel()  # only the waiting: the jobs themselves go on
                hurry.cancel()
        await self._release_all()

    async def _unlist(self) -> None:
        """Off every idle list, so no submit hands this worker a job any more; the jobs
        handed over just before are released (``_receive`` releases any later one)."""
        try:
            await self.store.unlist()
        except Exception as exc:  # its entries go stale: submits drop them
            log.warning("leaving the idle lists failed: %r", exc)
        for claim in self.store.take_handed():
            await self._give_back(claim)

    async def _release_all(self) -> None:
        """Cancel every running job that is not committing; each releases its claim, and
        so is every job handed over and not started."""
        for claim in self.store.take_handed():
            await self._give_back(claim)
        jobs = [job for job in self._jobs.values() if job.task is not None]
        for job in jobs:
            if not job.committing:
                self._stop(job, "drain")
        tasks = {job.task for job in jobs if job.task is not None and not job.task.done()}
        if tasks:
            log.info("releasing %d jobs", len(tasks))
            await asyncio.wait(tasks, timeout=UNWIND_TIMEOUT_S)

    # -- background loops ---------------------------------------------------------------

    async def _heartbeats(self) -> None:
        period = self.settings.heartbeat_ms / 1000
        while True:
            await asyncio.sleep(period)
            metrics.HEARTBEAT_AT.set(time.time())
            jobs = [job for job in self._jobs.values() if job.stopped is None]
            if jobs:
                await self._beat(jobs, period)

    async def _beat(self, jobs: list[_Job], timeout_s: float) -> None:
        """Renew every lease in ``jobs`` at once (a script per shard and batch, not a round
        trip per job: 10,000 held jobs cost a few scripts per period)."""
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
            if job.id in lost and self._stop(job, "lease-lost"):
                log.warning("job %s: lease lost, stopping it; nothing is committed", job.id)

    async def _cancellations(self) -> None:
        while True:
            try:
                async for job_id in self.store.cancellations():
                    job = self._jobs.get(job_id)
                    if job is not None and self._stop(job, "cancelled"):
                        log.info("job %s cancelled, aborting it", job_id)
            except Exception as exc:
                log.warning("the cancellation feed failed, resubscribing: %r", exc)
            await asyncio.sleep(1.0)

    async def _reaper(self, stop: asyncio.Event) -> None:
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
            await _wait(stop, period)


@dataclass(frozen=True, slots=True)
class Paused:
    """A run that stopped for client tools: the job's spec and the loop's checkpoint."""

    spec: JobSpec
    checkpoint: Checkpoint


def _progress(event: TurnStarted | TurnEnded) -> Progress:
    """What the in-progress envelope shows after ``event``."""
    if isinstance(event, TurnEnded):
        record = event.record
        return Progress(
            phase="turn-done",
            turn=record.index,
            type=record.type,
            attempt=record.attempt,
            remaining=event.remaining,
            calls_left=event.calls_left,
            last_outcome=record.outcome,
            last_error=record.error_code,
        )
    return Progress(
        phase="model-call",
        turn=event.turn,
        type=event.type,
        attempt=event.attempt,
        remaining=event.remaining,
        model=event.model,
    )


def _started(claim: Claim, now: float) -> None:
    """Count a job started at ``now`` (``time.time()``), and log its INFO line, stamped
    then: ``job j_… started: attempt 1, tenant acme, queued 0.002s``. Logged as it starts,
    not with the end: a worker killed mid-job leaves this line to say it held the job (and
    which claim). Made whole here: no arguments to format."""
    waited_s = max(0.0, now - claim.created_at_ms / 1000)
    metrics.job_started(waited_s)
    if log.isEnabledFor(logging.INFO):
        logs.info(
            log,
            f"job {claim.job_id} started: attempt {claim.attempt}, tenant {claim.tenant}, "
            f"queued {waited_s:.3f}s",
            now,
        )


def _count_turn(event: TurnEnded) -> None:
    """Count a model call from its turn's end, and the tool calls it made whose outcome
    is known (a client's call is counted when it is answered)."""
    record = event.record
    metrics.record_turn(record, calls_left=event.calls_left)
    metrics.record_tool_calls(c for c in record.tool_call_details if c.outcome != "requires_action")


def _ended_line(job: _Job, envelope: Envelope, duration_s: float) -> str:
    """A job's INFO line as it ends: ``job j_… succeeded: 1 calls, 152 tokens, $0.00012,
    0.031s`` (``failed (budget-exhausted): …``; ``$?`` when a price is unknown). Made
    whole here: the record carries no arguments to format."""
    execution = envelope.execution
    error = f" ({envelope.error})" if envelope.error else ""
    if execution is None:
        spent = "0 calls"
    else:
        cost = "?" if execution.cost is None else f"{execution.cost:.6g}"
        spent = f"{execution.llm_calls} calls, {execution.tokens_used} tokens, ${cost}"
    return f"job {job.id} {envelope.job_status}{error}: {spent}, {duration_s:.3f}s"


def _earlier(claim: Claim) -> Spend | None:
    """What calls outside the loop's own records spent: lost attempts before a pause (the
    checkpoint carries them) and since it (the store's running total)."""
    carried = None if claim.checkpoint is None else claim.checkpoint.earlier
    if carried is None:
        return claim.earlier
    return carried.plus(claim.earlier)


def _fields(exc: ValidationError) -> str:
    """Where and what, never the offending values (they may be prompt text)."""
    return "; ".join(
        f"{'.'.join(str(p) for p in error['loc']) or '(job)'}: {error['msg']}"
        for error in exc.errors(include_input=False, include_url=False)
    )


def _take_free(slots: asyncio.Semaphore) -> bool:
    """Take a slot of ``slots`` now if one is free: ``acquire`` returns without a wait
    then, so its coroutine ends at its first step."""
    if slots.locked():
        return False
    acquire = slots.acquire()
    try:
        acquire.send(None)
    except StopIteration:
        return True
    acquire.close()  # pragma: no cover - a free slot is taken at once
    raise AssertionError("a free slot was not taken at once")  # pragma: no cover


async def _before_stop(
    future: asyncio.Future[Any], stop: asyncio.Event, stopped: asyncio.Future[Any] | None = None
) -> bool:
    """Wait for ``future`` or ``stop``; True if ``future`` finished, else it is cancelled.
    ``stopped``: a standing wait for ``stop`` to share (else one is made for this wait)."""
    own = stopped is None
    if stopped is None:
        stopped = asyncio.ensure_future(stop.wait())
    try:
        await asyncio.wait({future, stopped}, return_when=asyncio.FIRST_COMPLETED)
    finally:
        if own:
            stopped.cancel()
        if not future.done():
            future.cancel()
    if future.done():
        return True
    await asyncio.wait({future})  # let it unwind; an outer cancel still gets through
    if not future.cancelled():
        future.exception()  # retrieved, so it is not reported as lost
    return False


async def _wait(event: asyncio.Event, timeout_s: float) -> None:
    """Sleep ``timeout_s`` or until ``event`` is set."""
    with contextlib.suppress(TimeoutError):
        await asyncio.wait_for(event.wait(), timeout_s)


def default_worker_id() -> str:
    return f"{socket.gethostname()}:{os.getpid()}:{secrets.token_hex(3)}"
