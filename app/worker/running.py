"""One job run from its claim to its end: the turn loop in its trace span, then the end.

    runner = Runner(client, outbound, tracing, parts...)   # built by Worker
    await runner.process(Job(claim))   # commits, pauses, or (stopped) releases it

The loop gets the job's HTTP tools and webhook validators, each call POSTed through the
outbound guard and signed for its tenant.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
import time
from typing import Any, Final

from pydantic import ValidationError

from app import metrics
from app.core.answer.finding import Finding
from app.core.turn.conversation import STORED_INPUT_CHARS, TranscriptEntry, stored_transcript
from app.core.turn.loop import Runtime, WebhookCheck, run_job
from app.core.turn.model import ModelClient, ToolCall, ToolSpec
from app.core.turn.prompting import show_input, show_input_plain
from app.core.turn.tools import Tool, ToolAnswer
from app.core.wire import codes
from app.core.wire.envelope import Envelope
from app.core.wire.record import Rejection, TurnRecord
from app.core.wire.spec import JobSpec, ToolDef, ValidatorSpec, stored_spec
from app.outbound.kit import Outbound
from app.store import Claim
from app.tracing import Tracing
from app.worker.bookkeeping import Bookkeeping, started
from app.worker.commit import Committer, earlier
from app.worker.job import Job, LeaseLost
from app.worker.partials import Partials
from app.worker.pause import Paused, Pauser, resume_of
from app.worker.progress import ProgressWriter

log = logging.getLogger("app.worker")

# What a job runs in when traces are off: one shared no-op, nothing allocated per job.
_UNTRACED: Final = contextlib.nullcontext()

Ended = tuple[Envelope, tuple[Rejection, ...], tuple[TranscriptEntry, ...]]


class Runner:
    """Runs claimed jobs on ``client``. ``outbound``: HTTP tools and webhook validators
    (None: a job with url tools fails invalid-input); ``tracing``: None, traces off."""

    def __init__(
        self,
        client: ModelClient,
        outbound: Outbound | None,
        tracing: Tracing | None,
        *,
        books: Bookkeeping,
        progress: ProgressWriter,
        committer: Committer,
        pauser: Pauser,
        partial_interval_s: float = 0.05,
    ) -> None:
        self.client = client
        self.outbound = outbound
        self.tracing = tracing
        self.books = books
        self.progress = progress
        self.committer = committer
        self.pauser = pauser
        self.partials = Partials(progress)  # streaming jobs' partials (#31)
        self.partial_interval_s = partial_interval_s

    async def process(self, job: Job) -> None:
        """Run ``job`` to its end: committed, paused, or stopped."""
        # Counted and logged once the job waits for its model call, the line stamped with
        # now: a worker killed mid-job still leaves it to say it held the job.
        self.books.owe(job.id, functools.partial(started, job.claim, time.time()))
        with self._span(job):
            await self._run(job)

    def _span(self, job: Job) -> contextlib.AbstractContextManager[object]:
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

    async def _run(self, job: Job) -> None:
        try:
            outcome = await self.execute(job)
            if isinstance(outcome, Paused) and job.stopped is None:
                await self.pauser.pause(job, outcome)
            elif outcome is not None and not isinstance(outcome, Paused) and job.stopped is None:
                await self.committer.commit(job, *outcome)
        except asyncio.CancelledError:
            await self._stopped(job)
            raise
        else:
            if job.stopped is not None:  # ended between turns, or by a refused write
                await self._stopped(job)
        finally:
            self.partials.forget(job)
            self.books.catch_up()
            metrics.job_left()

    async def _stopped(self, job: Job) -> None:
        job.unwinding = True
        self.books.catch_up()
        if job.span is not None:
            job.span.stopped(job.stopped or "shutdown")
        log.info("job %s stopped: %s", job.id, job.stopped or "the worker is shutting down")
        if job.stopped == "drain":
            await self.committer.release(job)
        elif job.stopped == "cancelled" and job.cut is not None:
            envelope, turns = job.cut
            await self.committer.spend(job, envelope.with_earlier(earlier(job.claim)), turns)

    async def execute(self, job: Job) -> Ended | Paused | None:
        """What to commit (envelope, history, transcript), or the pause for client tools;
        None when the job is not ours."""
        try:
            spec = stored_spec(job.claim.spec)
        except ValidationError as exc:
            detail = f"the stored job is not a valid job: {_fields(exc)}"
            return Envelope.failure(codes.INVALID_INPUT, detail), (), ()
        runtime = Runtime(
            client=self.client,
            # Done at once, or the coroutine to await: no coroutine around it.
            tracer=functools.partial(self.progress.trace, job),
            cancelled=lambda: job.stopped is not None,
            tools=http_tools(self.outbound, spec, job.claim),
            webhook=webhook_check(self.outbound, spec, job.claim),
            partials=self.partials.sink(job) if spec.stream else None,
            partial_interval_s=self.partial_interval_s,
            stopped=functools.partial(_cut, job),
        )
        resume = resume_of(job.claim)
        try:
            result = await run_job(spec, runtime, resume=resume)
        except LeaseLost:
            return None
        except Exception:  # a bug in the loop ends this job, never the worker
            self.books.catch_up()
            log.exception("job %s: the turn loop failed", job.id)
            detail = "the worker failed while running the job"
            return Envelope.failure(codes.INTERNAL_ERROR, detail), (), ()
        if result.paused is not None:
            return Paused(spec, result.paused)
        job.turns = result.turns
        messages = result.transcript
        # The input is written out to be found in a message only when one is long enough
        # to hold a long input (most jobs: none is).
        if any(len(message.content) > STORED_INPUT_CHARS for message in messages):
            shown = (show_input(spec.input), show_input_plain(spec.input))
        else:
            shown = ("", "")
        return result.envelope, result.history, stored_transcript(messages, *shown)


def _cut(job: Job, envelope: Envelope, turns: tuple[TurnRecord, ...]) -> None:
    """``Runtime.stopped``: keep what the run spent for the cancel's bill; a call cut short
    (not announced, so not counted yet) is counted now: the provider billed it."""
    job.cut = envelope, turns
    for turn in turns:
        if turn.outcome == "cancelled":
            metrics.record_turn(turn, calls_left=0)


def http_tools(outbound: Outbound | None, spec: JobSpec, claim: Claim) -> list[Tool]:
    """The job's HTTP tools, each call POSTed through the outbound guard, signed."""
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


def webhook_check(outbound: Outbound | None, spec: JobSpec, claim: Claim) -> WebhookCheck | None:
    """The job's webhook validators, POSTed through the outbound guard, signed."""
    if outbound is None:
        return None

    async def check(validator: ValidatorSpec, value: Any, attempt: int) -> Finding:
        return await outbound.check(
            validator, value, attempt, tenant=claim.tenant, job_id=claim.job_id, spec=spec
        )

    return check


def _fields(exc: ValidationError) -> str:
    """Where and what, never the offending values (they may be prompt text)."""
    return "; ".join(
        f"{'.'.join(str(p) for p in error['loc']) or '(job)'}: {error['msg']}"
        for error in exc.errors(include_input=False, include_url=False)
    )
