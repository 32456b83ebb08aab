"""The turn loop: one job in, an envelope and one record per model call out.

    result = await run_job(spec, Runtime(client=router))
    result.envelope.model_dump()     # {"status": "success", "data": {...}, "execution": {...}}
    [t.type for t in result.turns]   # ["must_return", "retry"]

Spec 000's state machine drives it (``app.core.turn.budget.TurnBudget``): work turns with
tools, must-return on the last work turn (tools stripped), correction turns after that; an
explicit fail ends the job at once; the worst case is ``maxTurns + returnRetries`` calls.

A turn: ``request.prepare`` builds the call within the budgets, ``calling.call_model`` makes
it, ``reading.Reader`` turns the answer into a verdict, and this module acts on it (a
rejection through ``rejection.reject``). A client tool pauses the job with a checkpoint
(``pause``); ``run_job(..., resume=Resume(checkpoint, outputs))`` goes on from there.
"""

from __future__ import annotations

import asyncio
from collections.abc import Coroutine
from dataclasses import dataclass, replace
from typing import Any, Final

from app.core.answer.confidence import confidence
from app.core.answer.verdict import Accepted, GaveUp, Refused, Rejected, Verdict, Work
from app.core.text.unicode import scrub, surrogate_at
from app.core.turn.budget import Limits
from app.core.turn.calling import call_model
from app.core.turn.checkpoint import Checkpoint, Resume
from app.core.turn.conversation import RECORDED_ANSWER_CHARS, Conversation
from app.core.turn.cut import Flight, record_cut
from app.core.turn.hooks import ValidatorHooks
from app.core.turn.model import LLMResponse, Message, ToolCall
from app.core.turn.pause import checkpoint_of, finish_paused_turn, restore
from app.core.turn.reading import Reader
from app.core.turn.recorder import Answered, Best, Recorder
from app.core.turn.rejection import reject
from app.core.turn.request import prepare
from app.core.turn.runtime import Runtime, WebhookCheck
from app.core.turn.setup import Setup
from app.core.turn.state import RunState
from app.core.turn.stop import Ended, Paused
from app.core.turn.streaming import CallStream, whole_partial
from app.core.turn.tools import Handled, Tool, handle_calls, work_messages
from app.core.wire import codes
from app.core.wire.envelope import CANCELLED_BY_CLIENT, Envelope, Progress
from app.core.wire.errors import InvalidInput, ValidatorUnavailable
from app.core.wire.record import Outcome, Rejection, TurnRecord
from app.core.wire.spec import JobSpec

__all__ = ["JobResult", "Resume", "Runtime", "Tool", "WebhookCheck", "run_job"]

# Errors after which configured fallback data is returned instead.
_FALLBACK_ON: Final = (codes.LLM_ERRORS | codes.EVENT_ERRORS | codes.LOOP_ERRORS) - {
    codes.CANCELLED,
    codes.INTERNAL_ERROR,
    codes.LLM_CONFIG,
    codes.WORKER_LOST,
}


@dataclass(frozen=True, slots=True)
class JobResult:
    envelope: Envelope
    turns: tuple[TurnRecord, ...]
    transcript: tuple[Message, ...]
    history: tuple[Rejection, ...]  # spec 000 "error evolution": one entry per rejection
    # Set when the job stopped for a client tool: resume from it with the outputs.
    paused: Checkpoint | None = None


def run_job(
    spec: JobSpec, runtime: Runtime, *, resume: Resume | None = None
) -> Coroutine[Any, Any, JobResult]:
    """Run one job to its end, or to a pause for client tools (``JobResult.paused``).

    Never raises for model or input trouble: that is in the envelope. Returns the run's
    own coroutine, to await (no coroutine around it).
    """
    return _Run(spec, runtime).run(resume)


class _Run:
    """One job's run: its parts, built once, and the loop over its turns."""

    def __init__(self, spec: JobSpec, runtime: Runtime) -> None:
        self.spec = spec
        self.runtime = runtime
        self.state = RunState.start(spec, runtime.clock)
        self.limits = Limits.of(spec.budget)
        self.hooks = ValidatorHooks(spec, runtime, self.limits, self.state)
        self.record = Recorder(self.state, runtime.tracer)
        self.flight: Flight | None = None  # the call being made

    async def run(self, resume: Resume | None = None) -> JobResult:
        try:
            setup = Setup.build(self.spec, self.runtime, self.limits, self.hooks)
            if resume is None:
                conversation = setup.prompts.conversation(self.spec.model)
            else:
                conversation = restore(self.state, resume.checkpoint)
        except InvalidInput as exc:  # includes a model that cannot give structuredOutput
            return self._finish(_invalid(exc), None)
        try:
            if resume is not None:
                tracer = self.runtime.tracer
                await finish_paused_turn(self.spec, self.state, tracer, conversation, resume)
            return await self._turns(setup, conversation)
        except Ended as end:
            fallback = self.spec.fallback if end.code in _FALLBACK_ON else None
            ledger = self.state.ledger
            envelope = ledger.failure(end.code, end.detail, cause=end.cause, fallback=fallback)
            return self._finish(envelope, conversation)
        except InvalidInput as exc:  # e.g. the escalation model cannot give structuredOutput
            return self._finish(_invalid(exc), conversation)
        except Paused as pause:
            return self._pause(conversation, pause.handled)
        except asyncio.CancelledError:
            self._stopped()
            raise

    def _stopped(self) -> None:
        """The run's task was cancelled: the call in flight recorded with what it used, and
        the run's spend handed to ``Runtime.stopped`` (no await: the task is unwinding)."""
        stopped = self.runtime.stopped
        if stopped is None:
            return
        if self.flight is not None:
            record_cut(self.flight, self.state, self.record, self.runtime.client)
        ledger = self.state.ledger
        envelope = ledger.failure(codes.CANCELLED, CANCELLED_BY_CLIENT, cause=None, fallback=None)
        stopped(envelope, tuple(ledger.turns))

    async def _turns(self, setup: Setup, conversation: Conversation) -> JobResult:
        """Turns until an answer is accepted; ``Ended`` when the budget runs out first."""
        state, reader = self.state, Reader(setup, self.state)
        while state.budget.phase != "exhausted":
            accepted = await self._turn(setup, reader, conversation)
            if accepted is not None:
                envelope = state.ledger.success(
                    accepted.value, accepted.warnings, accepted.grounding, accepted.confidence
                )
                return self._finish(envelope, conversation)
        last = state.last_failure
        raise Ended(
            codes.BUDGET_EXHAUSTED,
            "no valid answer within the budget"
            + ("" if last is None else f"; last problem: {last.diagnosis}"),
            cause=None if last is None else last.code,
        )

    async def _turn(
        self, setup: Setup, reader: Reader, conversation: Conversation
    ) -> Accepted | None:
        """One model call and what follows from it; the accepted answer ends the job."""
        call = await prepare(setup, self.state, conversation)
        stream = CallStream.of(setup.contract, self.runtime, call)
        if stream is not None:
            call = replace(call, request=replace(call.request, stream=stream))
        flight = self.flight = Flight(call, stream)
        try:
            response = await call_model(self.runtime.client, self.state, self.record, call)
        except Ended as end:
            if stream is not None:
                stream.discard(f"the model call failed: {end.code}")
            raise
        self.state.ledger.account(response, call.request.messages)
        flight.response = response
        if stream is not None and (note := stream.finish(response)) is not None:
            self.state.ledger.warn(note)
        # Best-of-N: the first valid answer is kept (``choices`` carries the usage and cost
        # of them all); with none valid, the first answer's verdict stands.
        choices = response.choices
        try:
            verdict, merged, chosen = await reader.pick(call, choices)
        except ValidatorUnavailable as exc:
            if stream is not None:
                stream.discard("a validator could not check the answer")
            # Not the model's fault: no re-ask; the answer it could not check is recorded.
            content = _scrubbed(response).content or ""
            await self.record(
                call,
                _scrubbed(response),
                "unchecked",
                codes.VALIDATOR_UNAVAILABLE,
                exc.detail,
                answer=content,
            )
            raise Ended(codes.VALIDATOR_UNAVAILABLE, exc.detail) from None
        # From here on the answer is recorded as text that can be stored (the verdict
        # rejected an answer that was not valid Unicode, and says why).
        kept = choices[chosen]
        answer = _scrubbed(replace(kept, alternatives=()) if kept.alternatives else kept)
        best = Best(len(choices), chosen) if call.request.n > 1 else None
        if not isinstance(verdict, Rejected | Work):
            self.state.patch = None
        if stream is not None and not isinstance(verdict, Accepted):
            stream.discard(_discarded(verdict))
        elif stream is None and isinstance(verdict, Accepted):
            whole_partial(self.runtime, call, verdict.value)
        turn = Answered(call, answer, answer.content or "", merged, best)
        return await self._act(setup, conversation, turn, verdict)

    async def _act(
        self, setup: Setup, conversation: Conversation, turn: Answered, verdict: Verdict
    ) -> Accepted | None:
        """What the verdict calls for: the job ends, goes on with tool work, or re-asks."""
        call, response, content, best = turn.call, turn.response, turn.content, turn.best
        match verdict:
            case Accepted():
                warnings = verdict.warnings
                await self.record(
                    call, response, "success", answer=content, warnings=warnings, best=best
                )
                conversation.add_final((turn.merged or content)[:RECORDED_ANSWER_CHARS])
                # Only a whole answer's own tokens say how sure the model was of it.
                logprobs = response.logprobs if turn.merged is None else None
                if logprobs:
                    verdict = replace(verdict, confidence=confidence(content, logprobs))
                return verdict
            case Rejected():
                await reject(setup, self.state, self.record, conversation, turn, verdict)
            case Work(calls=calls):
                await self._work(setup, conversation, turn, calls)
            case Refused(reason=reason):
                await self._end(turn, "refusal", codes.LLM_REFUSAL, reason)
            case GaveUp(reason=reason):
                await self._end(turn, "explicit_fail", codes.EXPLICIT_FAIL, reason)
        return None

    async def _end(self, turn: Answered, outcome: Outcome, code: str, reason: str) -> None:
        """The model refused or gave up: recorded, and the job ends."""
        await self.record(
            turn.call, turn.response, outcome, code, reason, answer=turn.content, best=turn.best
        )
        raise Ended(code, reason)

    async def _work(
        self, setup: Setup, conversation: Conversation, turn: Answered, calls: tuple[ToolCall, ...]
    ) -> None:
        """A work turn: the tools run (or wait for the client), and the work joins the prompt."""
        self.state.patch = None
        handled = await handle_calls(setup.tools, calls)
        self.state.budget.consume()
        names = tuple(c.name for c in calls)
        details = tuple(h.record for h in handled)
        await self.record(
            turn.call, turn.response, "tool_calls", calls=names, details=details, best=turn.best
        )
        if any(h.waiting for h in handled):
            raise Paused(handled)
        conversation.add_work(*work_messages(handled))

    def _pause(self, conversation: Conversation, handled: list[Handled]) -> JobResult:
        ledger = self.state.ledger
        return JobResult(
            envelope=Envelope.in_progress(Progress(phase="requires_action")),
            turns=tuple(ledger.turns),
            transcript=tuple(conversation.transcript),
            history=tuple(ledger.history),
            paused=checkpoint_of(self.state, conversation, handled),
        )

    def _finish(self, envelope: Envelope, conversation: Conversation | None) -> JobResult:
        ledger = self.state.ledger
        turns = ledger.turns
        if conversation is None:
            transcript: list[Message] = []
        elif (
            self.spec.purify
            and envelope.status == codes.RESULT_SUCCESS
            and turns
            and turns[-1].outcome == "success"
        ):
            transcript = conversation.purified()
        else:
            transcript = conversation.transcript
        return JobResult(
            envelope=envelope,
            turns=tuple(turns),
            transcript=tuple(transcript),
            history=tuple(ledger.history),
        )


def _discarded(verdict: Verdict) -> str:
    """Why a streamed answer's partials do not stand."""
    match verdict:
        case Rejected(failure=failure):
            return f"the answer was rejected ({failure.code}): {failure.diagnosis}"[:2000]
        case Work():
            return "the model called tools instead of answering"
        case Refused(reason=reason):
            return f"the model refused: {reason}"[:2000]
        case GaveUp(reason=reason):
            return f"the model gave up: {reason}"[:2000]
    return "the answer does not stand"


def _invalid(error: InvalidInput) -> Envelope:
    """A job this run cannot take: every field's problem in the envelope's detail."""
    return Envelope.failure(codes.INVALID_INPUT, "; ".join(e.detail for e in error.errors))


def _scrubbed(response: LLMResponse) -> LLMResponse:
    """``response`` with every text that gets recorded free of unpaired surrogates."""
    texts = (response.content or "", response.refusal or "", response.model, response.provider)
    if all(text.isascii() or surrogate_at(text) is None for text in texts):
        return response  # nothing to scrub (most answers)
    return replace(
        response,
        content=None if response.content is None else scrub(response.content),
        refusal=None if response.refusal is None else scrub(response.refusal),
        model=scrub(response.model),
        provider=scrub(response.provider),
    )
