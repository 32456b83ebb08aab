"""The turn loop: one job in, an envelope and one record per model call out.

    result = await run_job(spec, Runtime(client=router))
    result.envelope.model_dump()     # {"status": "success", "data": {...}, "execution": {...}}
    [t.type for t in result.turns]   # ["must_return", "retry"]

Spec 000's state machine drives it (``app.core.turn.budget.TurnBudget``): work turns with
tools, must-return on the last work turn (tools stripped), correction turns after that;
an explicit fail ends the job at once; the worst case is ``maxTurns + returnRetries``
calls. Resource limits are checked before every call. Transport retries happen inside
``ModelClient.complete`` and never count here.

When the model calls a client tool (one without a handler), the loop stops: the result is
``paused`` with a ``Checkpoint`` and the calls the client must answer; ``run_job`` with
``resume=Resume(checkpoint, outputs)`` goes on from there (``app.core.turn.checkpoint``).

A turn is: prepare the request (``prompting``), call, classify the answer into a typed
verdict (``verdict``), act on it here; what was spent and the envelope are kept by the
``ledger``.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import logging
from collections.abc import Awaitable, Callable, Coroutine, Sequence
from dataclasses import dataclass, field, replace
from typing import Any, Final

from app.core.answer.contract import Contract, build_contract
from app.core.answer.feedback import Failure, quote, render_feedback, render_patch_feedback
from app.core.answer.finding import Finding
from app.core.answer.judge import JUDGE_OUTPUT_TOKENS, JUDGE_SCHEMA, judge_finding, judge_messages
from app.core.answer.patch import Patch, merge, plan
from app.core.answer.runaway import looping
from app.core.answer.validators import Validator, first_failing, read_paths
from app.core.answer.verdict import (
    ANSWER_CHARS_PER_TOKEN,
    MAX_ANSWER_CHARS,
    Accepted,
    GaveUp,
    Refused,
    Rejected,
    Verdict,
    Work,
    classify,
    unfenced,
)
from app.core.schema.steps import TooMuchWork
from app.core.schema.validation import compiled
from app.core.text.unicode import scrub, surrogate_at
from app.core.turn.budget import Allowance, Limits, TurnBudget, estimate_tokens
from app.core.turn.checkpoint import (
    Checkpoint,
    PendingCall,
    Resume,
    StoredEntry,
    StoredFailure,
    StoredMessage,
)
from app.core.turn.clock import Clock, SystemClock, iso
from app.core.turn.conversation import Conversation
from app.core.turn.ledger import Ledger
from app.core.turn.model import LLMRequest, LLMResponse, Message, ModelClient, ToolCall, ToolSpec
from app.core.turn.prompting import Prompting
from app.core.turn.templates import render
from app.core.turn.tools import Handled, Tool, Toolbox, answered, handle_calls, work_messages
from app.core.wire import codes
from app.core.wire.envelope import Envelope, Progress
from app.core.wire.errors import InvalidInput, ProviderError, ValidatorUnavailable
from app.core.wire.events import ToolsAnswered, Tracer, TurnEnded, TurnStarted, emit
from app.core.wire.record import (
    Outcome,
    Rejection,
    TokenUsage,
    ToolCallRecord,
    TurnRecord,
    TurnType,
)
from app.core.wire.spec import JobSpec, RetryMode, ToolChoiceName, ValidatorSpec

__all__ = ["JobResult", "Resume", "Runtime", "Tool", "run_job"]

log = logging.getLogger(__name__)

RECORDED_ANSWER_CHARS: Final = 20_000
# What a tenant reads when the provider refused the service's credentials or configuration.
CONFIG_FAILURE: Final = (
    "the model provider rejected the service's credentials or configuration; "
    "the operator's logs have the details"
)
# After the model repeats a rejected answer, the next calls sample more freely (at least
# this temperature, a new seed); repeated once more at the last one, the job stops early.
REPEAT_TEMPERATURES: Final = (0.7, 1.0)
# Best-of-N: answers asked for together are sampled at least this freely, each with its own
# seed (from 0 when the job gives none): N greedy answers would be one answer N times.
CANDIDATE_TEMPERATURE: Final = 0.7
REPEATED_ANSWER: Final = "repeated-answer"
# Errors after which configured fallback data is returned instead.
_FALLBACK_ON: Final = (codes.LLM_ERRORS | codes.EVENT_ERRORS | codes.LOOP_ERRORS) - {
    codes.CANCELLED,
    codes.INTERNAL_ERROR,
    codes.LLM_CONFIG,
    codes.WORKER_LOST,
}


@dataclass(frozen=True, slots=True)
class Runtime:
    """What the loop needs from outside: a model client, a clock, and optional hooks."""

    client: ModelClient
    clock: Clock = field(default_factory=SystemClock)
    tracer: Tracer | None = None
    tools: Sequence[Tool] = ()
    validators: Sequence[Validator] = ()
    cancelled: Callable[[], bool] | None = None
    # Webhook validators: (spec, candidate, attempt) → (ok, diagnosis), or
    # ValidatorUnavailable. The worker's goes through the outbound guard.
    webhook: WebhookCheck | None = None


WebhookCheck = Callable[[ValidatorSpec, Any, int], Awaitable[Finding]]


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
    """Run one job to its end, or to a pause for client tools (``JobResult.paused``): the
    run's own coroutine, to await (no coroutine around it).

    Never raises for model or input trouble: that is in the envelope.
    """
    return _Run(spec, runtime).run(resume)


class _Pause(Exception):
    """Internal: a work turn called client tools; the job waits for their outputs."""

    def __init__(self, handled: list[Handled]) -> None:
        super().__init__("requires_action")
        self.handled = handled


class _End(Exception):
    """Internal: the job ends with this envelope error."""

    def __init__(self, code: str, detail: str, *, cause: str | None = None) -> None:
        super().__init__(detail)
        self.code, self.detail, self.cause = code, detail, cause


@dataclass(frozen=True, slots=True)
class _Call:
    """One prepared call: what is sent, and what its record will say about it."""

    request: LLMRequest
    index: int
    type: TurnType
    attempt: int
    prompt_tokens: int
    escalated: bool
    simplified: bool
    started_at: str
    began: float
    patch: Patch | None = None  # a field-level re-ask: the parts asked for, merged after


class _Run:
    def __init__(self, spec: JobSpec, runtime: Runtime) -> None:
        self.spec = spec
        self.rt = runtime
        self.clock = runtime.clock
        self.budget = TurnBudget(spec.budget.max_turns, spec.budget.return_retries)
        max_cost = spec.budget.max_cost_usd
        self.limits = Limits(
            max_tokens=spec.budget.max_tokens,
            max_cost_usd=None if max_cost is None else float(max_cost),
        )
        self.tools = Toolbox(())
        self.ledger = Ledger(self.clock)
        self.rejected = 0
        self.max_out = spec.max_output_tokens
        self.last_failure: Failure | None = None
        self.seen: dict[str, int] = {}  # rejected answers: digest → the turn that gave it
        self.repeats = 0
        # The next re-ask asks for only these parts of the last candidate (None: whole).
        self.patch: Patch | None = None
        # The compact profile's re-ask: one fresh user turn sent alone (None: the conversation).
        self.fresh: Message | None = None
        # Once an answer ran away in a loop: the arrays a schema grammar allows (None: any).
        self.max_items: int | None = None
        self.failed_validator: int | None = None  # which validator rejected the last answer
        deadline_ms = spec.budget.deadline_ms
        started = self.ledger.started
        self.deadline = None if deadline_ms is None else started + deadline_ms / 1000
        self.started_ms = _epoch_ms(self.clock)

    # -- the loop -------------------------------------------------------------------------

    async def run(self, resume: Resume | None = None) -> JobResult:
        try:
            self.tools = Toolbox(_job_tools(self.spec, self.rt.tools))
            self.contract: Contract = build_contract(self.spec, self.rt.validators, hooks=self)
            self.prompts = Prompting(
                self.spec, self.contract, self.rt.client, has_tools=bool(self.tools)
            )
            if resume is None:
                conversation = self.prompts.conversation(self.spec.model)
            else:
                conversation = self._restore(resume.checkpoint)
        except InvalidInput as exc:  # includes a model that cannot give structuredOutput
            return self._finish(Envelope.failure(codes.INVALID_INPUT, exc.detail), None)
        try:
            if resume is not None:
                await self._answered(conversation, resume)
            while self.budget.phase != "exhausted":
                accepted = await self._turn(conversation)
                if accepted is not None:
                    envelope = self.ledger.success(
                        accepted.value, accepted.warnings, accepted.grounding
                    )
                    return self._finish(envelope, conversation)
            last = self.last_failure
            raise _End(
                codes.BUDGET_EXHAUSTED,
                "no valid answer within the budget"
                + ("" if last is None else f"; last problem: {last.diagnosis}"),
                cause=None if last is None else last.code,
            )
        except _End as end:
            fallback = self.spec.fallback if end.code in _FALLBACK_ON else None
            envelope = self.ledger.failure(end.code, end.detail, cause=end.cause, fallback=fallback)
            return self._finish(envelope, conversation)
        except InvalidInput as exc:  # e.g. the escalation model cannot give structuredOutput
            return self._finish(Envelope.failure(codes.INVALID_INPUT, exc.detail), conversation)
        except _Pause as pause:
            return self._pause(conversation, pause.handled)

    async def _turn(self, conversation: Conversation) -> Accepted | None:
        """One model call and what follows from it; the accepted answer ends the job."""
        call = await self._prepare(conversation)
        response = await self._call(call)
        self.ledger.account(response, call.request.messages)
        # Best-of-N: the answers are checked in order and the first valid one is kept; with
        # none valid, the first answer's verdict stands (a stable choice).
        choices = response.choices
        chosen = 0
        try:
            verdict, merged = await self._verdict(call, choices[0])
            failed = self.failed_validator  # the first answer's, should it be the one kept
            for index, other in enumerate(choices[1:], start=1):
                if isinstance(verdict, Accepted):
                    break
                candidate, candidate_merged = await self._verdict(call, other)
                if isinstance(candidate, Accepted):
                    verdict, merged, chosen = candidate, candidate_merged, index
            self.failed_validator = failed
        except ValidatorUnavailable as exc:
            # Not the model's fault: no re-ask; the answer it could not check is recorded.
            content = _scrubbed(response).content or ""
            await self._record(
                call,
                _scrubbed(response),
                "unchecked",
                codes.VALIDATOR_UNAVAILABLE,
                exc.detail,
                answer=content,
            )
            raise _End(codes.VALIDATOR_UNAVAILABLE, exc.detail) from None
        # From here on the answer is recorded: as text that can be stored (the verdict
        # rejected an answer that was not valid Unicode, and says why).
        # The kept answer, with the usage and cost of them all (``choices`` carries them).
        kept = choices[chosen]
        record = _scrubbed(replace(kept, alternatives=()) if kept.alternatives else kept)
        content = record.content or ""
        best = _Best(len(choices), chosen) if call.request.n > 1 else None
        if not isinstance(verdict, Rejected | Work):
            self.patch = None
        match verdict:
            case Accepted():
                await self._record(
                    call,
                    record,
                    "success",
                    answer=content,
                    warnings=verdict.warnings,
                    best=best,
                )
                conversation.add_final((merged or content)[:RECORDED_ANSWER_CHARS])
                return verdict
            case Rejected():
                await self._reject(
                    conversation, call, record, verdict, content, shown=merged, best=best
                )
            case Work(calls=calls):
                self.patch = None
                handled = await handle_calls(self.tools, calls)
                self.budget.consume()
                names = tuple(c.name for c in calls)
                details = tuple(h.record for h in handled)
                await self._record(
                    call, record, "tool_calls", calls=names, details=details, best=best
                )
                if any(h.waiting for h in handled):
                    raise _Pause(handled)
                conversation.add_work(*work_messages(handled))
            case Refused(reason=reason):
                await self._record(
                    call, record, "refusal", codes.LLM_REFUSAL, reason, answer=content, best=best
                )
                raise _End(codes.LLM_REFUSAL, reason)
            case GaveUp(reason=reason):
                await self._record(
                    call,
                    record,
                    "explicit_fail",
                    codes.EXPLICIT_FAIL,
                    reason,
                    answer=content,
                    best=best,
                )
                raise _End(codes.EXPLICIT_FAIL, reason)
        return None

    async def _verdict(self, call: _Call, response: LLMResponse) -> tuple[Verdict, str | None]:
        """What one answer means; for a field-level re-ask, what the merged value means, and
        its text (the value the next correction quotes)."""
        self.failed_validator = None
        request = call.request
        prompt_text = "\n".join(m.content for m in request.messages)
        patch = call.patch
        if patch is None:
            verdict = await self._classify(response, self.contract, prompt_text, request)
            return verdict, None
        # The answer holds the parts asked for: read under the sub-schema, merged, and the
        # merged value checked whole (schema, then validators) as if the model had sent it.
        parts = await classify(
            response,
            contract=replace(self.contract, output_schema=patch.schema, validators=()),
            spec=self.spec,
            prompt_text=prompt_text,
            tools_offered=bool(request.tools),
            max_output_tokens=request.max_output_tokens,
            validate=_passing,
        )
        if isinstance(parts, Accepted):
            answer: Any = parts.value
        elif isinstance(parts, Rejected) and parts.parsed:
            answer = parts.value  # not the shape asked for; merge reads what it can
        else:
            return parts, None
        merged = merge(patch, answer)
        text = json.dumps(merged.value, ensure_ascii=False)
        whole = replace(response, content=text, finish_reason="stop", tool_calls=())
        limit = MAX_ANSWER_CHARS // ANSWER_CHARS_PER_TOKEN
        verdict = await self._classify(
            whole, self.contract, "", replace(request, max_output_tokens=limit)
        )
        if isinstance(verdict, Accepted):
            notes = [f"patch: re-asked for {', '.join(patch.pointers)} only; merged the answer"]
            if merged.ignored:
                notes.append(
                    "patch: ignored parts that were not asked for: " + ", ".join(merged.ignored[:8])
                )
            verdict = replace(verdict, warnings=(*verdict.warnings, *notes))
        return verdict, text

    async def _classify(
        self, response: LLMResponse, contract: Contract, prompt_text: str, request: LLMRequest
    ) -> Verdict:
        return await classify(
            response,
            contract=contract,
            spec=self.spec,
            prompt_text=prompt_text,
            tools_offered=bool(request.tools),
            max_output_tokens=request.max_output_tokens,
            validate=self._validate,
        )

    # -- pieces of a turn -------------------------------------------------------------------

    async def _prepare(self, conversation: Conversation) -> _Call:
        """Build the next request, check the budgets, and announce the turn."""
        if self.rt.cancelled is not None and self.rt.cancelled():
            raise _End(codes.CANCELLED, "the job was cancelled")
        turn_type = self.budget.turn_type
        escalate = (
            self.spec.escalate_model is not None
            and turn_type != "normal"
            and self.rejected >= self.spec.escalate_after
        )
        model = self.spec.escalate_model if escalate else self.spec.model
        simplified = (
            self.spec.simplify_on_final_attempt
            and self.budget.calls_left == 1
            and self.rejected > 0
        )
        # A field-level re-ask offers no tools: it corrects parts of an answer.
        patch = None if simplified else self.patch
        tools = self.tools.specs if self.budget.tools_available and patch is None else ()
        if simplified:
            messages = self.prompts.simplified(model, self.last_failure)
        elif self.fresh is not None and self.prompts.compact(model):
            note = self.prompts.note(self.budget, turn_type)
            text = self.fresh.content if note is None else f"{self.fresh.content}\n\n{note}"
            messages = (Message("user", text),)
        else:
            if escalate:
                conversation.system = self.prompts.system(model)
            messages = conversation.messages(self.prompts.note(self.budget, turn_type))

        prompt_tokens = sum(estimate_tokens(m.content) + 4 for m in messages)
        timeout_s = self._time_left()
        n, verdict = self._afford(self._candidates(), prompt_tokens, model)
        if not verdict.ok:
            raise _End(verdict.error or codes.INTERNAL_ERROR, verdict.detail or "")
        choice = self.spec.tool_choice
        call = _Call(
            request=LLMRequest(
                messages=messages,
                model=model,
                tools=tools,
                tool_choice="auto" if isinstance(choice, ToolChoiceName) else choice,
                forced_tool=choice.name if isinstance(choice, ToolChoiceName) else None,
                max_output_tokens=verdict.max_output_tokens,
                temperature=self._temperature(n),
                seed=self._seed(n),
                output_schema=self.contract.output_schema if patch is None else patch.schema,
                structured_output=self.spec.structured_output,
                timeout_s=timeout_s,
                n=n,
                # Nothing reads back the prefix of a job's only call (writing a cache can
                # cost more than plain input), nor of the simplified request (its own).
                cache_prefix=0
                if simplified or (self.budget.calls_left == 1 and not self.ledger.turns)
                else conversation.stable(),
                cache_key=conversation.cache_key,
                max_items=self.max_items,
            ),
            index=len(self.ledger.turns) + 1,
            type=turn_type,
            attempt=self.rejected + 1,
            prompt_tokens=prompt_tokens,
            escalated=escalate,
            simplified=simplified,
            started_at=iso(self.clock.now()),
            began=self.clock.monotonic(),
            patch=patch,
        )
        await emit(
            self.rt.tracer,
            TurnStarted(
                turn=call.index,
                type=turn_type,
                tools_count=len(tools),
                attempt=call.attempt,
                remaining=self.budget.retry_remaining,
                work_remaining=self.budget.work_remaining,
                model=model,
                escalated=escalate,
                simplified=simplified,
            ),
        )
        return call

    def _candidates(self) -> int:
        """Best-of-N: how many answers this call asks for."""
        wanted = self.spec.candidates
        if wanted is None or wanted.n <= 1:
            return 1
        if wanted.on == "final" and not (self.budget.calls_left == 1 and self.rejected > 0):
            return 1
        return wanted.n

    def _afford(self, n: int, prompt_tokens: int, model: str | None) -> tuple[int, Allowance]:
        """The most answers (up to ``n``) the budgets allow at the full output limit each,
        counting each as a call of its own (the worst case); one, with the output limit
        shrunk as usual, when not even two fit."""

        def check(k: int) -> Allowance:
            return self.limits.check(
                prompt_tokens=prompt_tokens * k,
                max_output_tokens=self.max_out * k,
                tokens_spent=self.ledger.spend.tokens,
                cost_spent=self.ledger.spend.cost,
                estimate_cost=lambda i, o: self.rt.client.estimate_cost(model, i, o),
            )

        for k in range(n, 1, -1):
            verdict = check(k)
            if verdict.ok and verdict.max_output_tokens >= self.max_out * k:
                if k < n:
                    self.ledger.warn(
                        f"candidates: asked for {n} answers per call; the budget allowed {k}"
                    )
                return k, replace(verdict, max_output_tokens=self.max_out)
        if n > 1:
            self.ledger.warn(f"candidates: asked for {n} answers per call; the budget allowed 1")
        return 1, check(1)

    async def _call(self, call: _Call) -> LLMResponse:
        """The model call; a failed call is recorded and ends the job."""
        request = call.request
        try:
            if request.timeout_s is None:
                return await self.rt.client.complete(request)
            async with asyncio.timeout(request.timeout_s):
                return await self.rt.client.complete(request)
        except ProviderError as exc:
            self.ledger.spend.transport_retries += exc.transport_retries
            if exc.code == codes.LLM_TIMEOUT and self._past_deadline():
                # The provider's timeout was the job's deadline (the call is bounded by what
                # is left of it): which of the two timers fired first is a race, not news.
                why = "the job's deadline passed during a model call"
                await self._record(call, None, "error", codes.DEADLINE_EXCEEDED, why)
                raise _End(codes.DEADLINE_EXCEEDED, why) from None
            detail = scrub(exc.detail)
            if exc.code == codes.LLM_CONFIG:
                # The provider's own words may echo the service's key or name its account:
                # they are for the operator's log (scrubbed at the transport), never the tenant.
                log.warning(
                    "provider %s rejected the service's credentials or configuration "
                    "(model %s): %s",
                    exc.provider,
                    exc.model or call.request.model or "default",
                    detail,
                )
                detail = CONFIG_FAILURE
            await self._record(call, None, "error", exc.code, detail)
            raise _End(exc.code, f"{exc.provider}: {detail}") from None
        except TimeoutError:
            why = "the job's deadline passed during a model call"
            await self._record(call, None, "error", codes.DEADLINE_EXCEEDED, why)
            raise _End(codes.DEADLINE_EXCEEDED, why) from None
        except Exception as exc:  # a client bug must end this job, not the worker
            log.exception("model client raised an unclassified error")
            why = f"the model client failed unexpectedly ({type(exc).__name__})"
            await self._record(call, None, "error", codes.INTERNAL_ERROR, why)
            raise _End(codes.INTERNAL_ERROR, why) from None

    async def _validate(self, value: Any) -> str | None:
        try:
            failed = await first_failing(self.contract.validators, value)
            if failed is None:
                return None
            self.failed_validator, diagnosis = failed
            return diagnosis
        except (ValidatorUnavailable, TooMuchWork, _End):
            raise
        except ProviderError as exc:  # an in-process validator's own model call failed
            raise ValidatorUnavailable(
                f"a validator's model call failed ({exc.code}): {scrub(exc.detail)[:300]}"
            ) from None
        except Exception as exc:  # a validator is a black box: its crash must not crash us
            log.warning("validator raised", exc_info=True)
            raise _End(
                codes.EVENT_INVALID_RESPONSE, f"a validator failed: {type(exc).__name__}"
            ) from None

    async def _reject(
        self,
        conversation: Conversation,
        call: _Call,
        response: LLMResponse,
        rejected: Rejected,
        content: str,
        *,
        shown: str | None = None,
        best: _Best | None = None,
    ) -> None:
        """A rejected answer: record it, tell the model why (collapsed), spend a turn.
        ``shown`` is the answer the correction is about when it is not ``content`` (a
        field-level re-ask's merged value)."""
        failure = rejected.failure
        # A cut-off answer is asked again with room to finish (up to the cap), and then its
        # fragment is not fed back: the same request, bigger. Not one that was looping when
        # it was cut (the same part over and over, or counting): more room buys more loop.
        # It is asked again differently, at the same size: told so, and (where a grammar
        # compiles the schema) with its lists bounded by the input's length in words.
        feed = True
        if failure.outcome == "truncated" and looping(content):
            failure = replace(
                failure,
                diagnosis=render(
                    "looping_feedback", {"max_output_tokens": call.request.max_output_tokens}
                ),
            )
            rejected = replace(rejected, failure=failure)
            shown = self.prompts.shown_input(call.request.model)
            self.max_items = max(1, len(shown.split()))
        elif failure.outcome == "truncated" and self.max_out < self.spec.output_cap:
            self.max_out = min(self.max_out * 2, self.spec.output_cap)
            feed = False
        self.budget.consume()
        # A cut-off answer is asked again bigger, not the same question: not a repeat.
        truncated = failure.outcome == "truncated"
        repeat_of = None if truncated else self._repeat_of(response, call.index, call.patch)
        await self._record(
            call,
            response,
            failure.outcome,
            failure.code,
            failure.diagnosis,
            answer=content,
            repeat_of=repeat_of,
            best=best,
        )
        self.rejected += 1
        self.last_failure = failure
        self.ledger.history.append(
            Rejection(
                turn=call.index,
                type=call.type,
                outcome=failure.outcome,
                error_code=failure.code,
                diagnosis=failure.diagnosis,
            )
        )
        if repeat_of is not None and self.repeats > len(REPEAT_TEMPERATURES):
            raise _End(
                codes.BUDGET_EXHAUSTED,
                f"the model gave the rejected answer of turn {repeat_of} again, "
                f"{self.repeats} times, whatever the feedback and sampling; stopped early "
                f"rather than pay for it again (last problem: {failure.diagnosis})",
                cause=REPEATED_ANSWER,
            )
        if not feed:
            # The same request again, bigger: a field-level re-ask stays one.
            conversation.transcript.append(Message("assistant", content[:RECORDED_ANSWER_CHARS]))
            return
        self.patch = self._next_patch(call, rejected)
        self.fresh = self.prompts.reask(call.request.model, failure, self.patch)
        if self.fresh is not None:
            # Asked afresh: the rejected answer is in the transcript, not in the next prompt.
            conversation.add_failure(None, self.fresh, recorded=content[:RECORDED_ANSWER_CHARS])
            return
        if self.patch is not None:
            text = self.prompts.patch_feedback(
                call.request.model, failure, self.patch
            ) or render_patch_feedback(failure, first=self.rejected == 1, patch=self.patch)
        else:
            text = render_feedback(
                failure,
                first=self.rejected == 1,
                example=self.contract.example,
                retry_prompt=self.spec.retry_prompt,
                attempt=max(self.rejected, 1),
                total_retries=self.spec.budget.max_calls - 1,
                previous_answer=quote(shown or content),
                compact=self.prompts.compact(call.request.model),
            )
        about = shown or content
        answer = None if failure.outcome == "truncated" else Message("assistant", quote(about))
        conversation.add_failure(
            answer, Message("user", text), recorded=content[:RECORDED_ANSWER_CHARS]
        )

    def _next_patch(self, call: _Call, rejected: Rejected) -> Patch | None:
        """Whether the next re-ask asks for only part of the answer (spec 002, patch by
        default), and which part. A field-level answer that could not be read is asked for
        again the same way."""
        mode = self.spec.retry_mode
        if not rejected.parsed:
            return call.patch
        if mode == "whole":
            return None
        if mode == "auto" and (
            self.spec.retry_prompt is not None  # the client's own correction message
            or (bool(self.tools) and self.budget.tools_available)  # work may still change it
        ):
            return None
        try:
            return self._patch_of(rejected, mode)
        except (TooMuchWork, RecursionError):  # a part too costly to name: ask for it all
            return None

    def _patch_of(self, rejected: Rejected, mode: RetryMode) -> Patch | None:
        value = rejected.value
        if rejected.failure.outcome == "rejected":
            index = self.failed_validator
            specs = self.spec.validators
            paths = (
                read_paths(specs[index], value)
                if index is not None and index < len(specs)
                else None
            )
        else:
            paths = compiled(self.contract.output_schema).failing_paths(value)
        return plan(value, paths, self.contract.output_schema, mode=mode)

    async def _record(
        self,
        call: _Call,
        response: LLMResponse | None,
        outcome: Outcome,
        code: str | None = None,
        diagnosis: str | None = None,
        *,
        answer: str | None = None,
        calls: tuple[str, ...] = (),
        details: tuple[ToolCallRecord, ...] = (),
        warnings: tuple[str, ...] = (),
        repeat_of: int | None = None,
        best: _Best | None = None,
    ) -> None:
        usage = response.usage if response is not None else None
        record = TurnRecord(
            index=call.index,
            type=call.type,
            outcome=outcome,
            attempt=call.attempt,
            error_code=code,
            diagnosis=diagnosis,
            usage=TokenUsage.of(usage),
            cost_usd=response.cost_usd if response is not None else None,
            latency_ms=int((self.clock.monotonic() - call.began) * 1000),
            provider=response.provider if response is not None else None,
            model=response.model if response is not None else None,
            finish_reason=response.finish_reason if response is not None else None,
            max_output_tokens=call.request.max_output_tokens,
            prompt_tokens_estimate=call.prompt_tokens,
            message_count=len(call.request.messages),
            tools_offered=len(call.request.tools),
            tool_calls=calls,
            tool_call_details=details,
            transport_retries=response.transport_retries if response is not None else 0,
            transport_wait_ms=response.transport_wait_ms if response is not None else 0,
            escalated=call.escalated,
            simplified=call.simplified,
            warnings=warnings,
            answer=None if answer is None else quote(answer),
            repeat_of=repeat_of,
            patch=None if call.patch is None else call.patch.pointers,
            candidates=None if best is None else best.answers,
            chosen=None if best is None else best.chosen,
            started_at=call.started_at,
        )
        self.ledger.turns.append(record)
        await emit(
            self.rt.tracer,
            TurnEnded(
                record=record,
                remaining=self.budget.retry_remaining,
                calls_left=self.budget.calls_left,
            ),
        )

    # -- validators that call out (app.core.answer.validators.Hooks) ---------------------

    async def webhook(self, spec: ValidatorSpec, value: Any) -> Finding:
        if self.rt.webhook is None:
            raise ValidatorUnavailable("webhook validators are not available here")
        return await self.rt.webhook(spec, value, self.rejected + 1)

    async def judge(self, spec: ValidatorSpec, value: Any) -> Finding:
        """A configured model grades the candidate; the job's budgets and deadline apply and
        its spend is counted (apart) in the envelope."""
        messages = judge_messages(self.spec, spec, value)
        prompt_tokens = sum(estimate_tokens(m.content) + 4 for m in messages)
        limit = self.limits.check(
            prompt_tokens=prompt_tokens,
            max_output_tokens=JUDGE_OUTPUT_TOKENS,
            tokens_spent=self.ledger.spend.tokens,
            cost_spent=self.ledger.spend.cost,
            estimate_cost=lambda i, o: self.rt.client.estimate_cost(spec.model, i, o),
        )
        if not limit.ok:
            raise _End(limit.error or codes.INTERNAL_ERROR, f"judge: {limit.detail or ''}")
        request = LLMRequest(
            messages=messages,
            model=spec.model,
            max_output_tokens=limit.max_output_tokens,
            temperature=0.0,
            output_schema=JUDGE_SCHEMA,
            timeout_s=self._time_left(),
        )
        try:
            if request.timeout_s is None:
                response = await self.rt.client.complete(request)
            else:
                async with asyncio.timeout(request.timeout_s):
                    response = await self.rt.client.complete(request)
        except ProviderError as exc:
            self.ledger.spend.transport_retries += exc.transport_retries
            raise ValidatorUnavailable(
                f"the judge model {spec.model!r} failed ({exc.code})"
            ) from None
        except TimeoutError:
            raise _End(
                codes.DEADLINE_EXCEEDED, "the job's deadline passed while a judge graded"
            ) from None
        self.ledger.account(response, messages, validator=True)
        return judge_finding(spec, response)

    # -- pause and resume (client tools) ------------------------------------------------------

    def _pause(self, conversation: Conversation, handled: list[Handled]) -> JobResult:
        """Stop for the client: everything the next worker needs, in a checkpoint."""
        ledger, spend = self.ledger, self.ledger.spend
        checkpoint = Checkpoint(
            work_remaining=self.budget.work_remaining,
            retry_remaining=self.budget.retry_remaining,
            rejected=self.rejected,
            seen=dict(self.seen),
            repeats=self.repeats,
            max_out=self.max_out,
            last_failure=None if self.last_failure is None else StoredFailure.of(self.last_failure),
            started_ms=self.started_ms,
            started_at=ledger.started_at,
            paused_ms=_epoch_ms(self.clock),
            spend=replace(spend),
            warnings=tuple(ledger.warnings),
            turns=tuple(ledger.turns),
            history=tuple(ledger.history),
            system=StoredMessage.of(conversation.system),
            task=StoredMessage.of(conversation.task),
            full=conversation.full,
            log=tuple(
                StoredEntry(kind=kind, messages=tuple(StoredMessage.of(m) for m in entry))
                for kind, entry in conversation.log
            ),
            transcript=tuple(StoredMessage.of(m) for m in conversation.transcript),
            pending=tuple(
                PendingCall(
                    id=h.call.id,
                    name=h.call.name,
                    arguments=h.call.arguments,
                    parsed=h.arguments,
                    record=h.record,
                    text=h.text,
                )
                for h in handled
            ),
        )
        return JobResult(
            envelope=Envelope.in_progress(Progress(phase="requires_action")),
            turns=tuple(ledger.turns),
            transcript=tuple(conversation.transcript),
            history=tuple(ledger.history),
            paused=checkpoint,
        )

    def _restore(self, checkpoint: Checkpoint) -> Conversation:
        """The state a checkpoint kept; the conversation it had."""
        self.budget.work_remaining = checkpoint.work_remaining
        self.budget.retry_remaining = checkpoint.retry_remaining
        self.rejected = checkpoint.rejected
        self.seen = dict(checkpoint.seen)
        self.repeats = checkpoint.repeats
        self.max_out = checkpoint.max_out
        failure = checkpoint.last_failure
        self.last_failure = None if failure is None else failure.failure()
        ledger = self.ledger
        # The job's clock runs on while it waits: its duration and deadline count the wait.
        self.started_ms = checkpoint.started_ms
        ledger.started = self.clock.monotonic() - (_epoch_ms(self.clock) - self.started_ms) / 1000
        ledger.started_at = checkpoint.started_at
        deadline_ms = self.spec.budget.deadline_ms
        self.deadline = None if deadline_ms is None else ledger.started + deadline_ms / 1000
        ledger.spend = replace(checkpoint.spend)
        ledger.warnings = list(checkpoint.warnings)
        ledger.turns = list(checkpoint.turns)
        ledger.history = list(checkpoint.history)
        conversation = Conversation(
            checkpoint.system.message(), checkpoint.task.message(), full=checkpoint.full
        )
        conversation.log = [
            (entry.kind, tuple(m.message() for m in entry.messages)) for entry in checkpoint.log
        ]
        conversation.transcript = [m.message() for m in checkpoint.transcript]
        return conversation

    async def _answered(self, conversation: Conversation, resume: Resume) -> None:
        """The paused work turn, completed with the client's outputs (or without them)."""
        checkpoint, outputs = resume.checkpoint, resume.outputs
        if outputs is None and self.spec.on_tool_timeout == "fail":
            names = ", ".join(call.name for call in checkpoint.waiting)
            raise _End(
                codes.TOOL_TIMEOUT,
                f"the client posted no outputs for the tool calls ({names}) before "
                "requiredAction.expiresAt",
            )
        handled: list[Handled] = []
        for pending in checkpoint.pending:
            call = ToolCall(pending.id, pending.name, pending.arguments)
            done = Handled(call, pending.record, pending.text, pending.parsed)
            if done.waiting:
                if outputs is None:
                    why = "the client did not answer this call in time"
                    done = answered(done, error=why, duration_ms=None)
                else:
                    output = outputs[pending.id]
                    received = resume.received_ms or checkpoint.paused_ms
                    waited = max(0, received - checkpoint.paused_ms)
                    done = answered(
                        done, output=output.output, error=output.error, duration_ms=waited
                    )
            handled.append(done)
        conversation.add_work(*work_messages(handled))
        if outputs is None:
            # spec 000's must-return: no more work, the next turn must answer.
            self.budget.work_remaining = min(self.budget.work_remaining, 1)
            self.ledger.warn(
                "the client did not answer the tool calls within toolTimeoutMs; "
                "the job went on without them"
            )
        waiting = {call.id for call in checkpoint.waiting}
        answers = tuple(h.record for h in handled if h.call.id in waiting)
        await emit(self.rt.tracer, ToolsAnswered(calls=answers))

    # -- the end ------------------------------------------------------------------------------

    def _repeat_of(self, response: LLMResponse, turn: int, patch: Patch | None) -> int | None:
        """The earlier turn whose rejected answer this one repeats (the same text, or the
        same JSON value however written, and the same tool calls; a field-level answer,
        for the same parts); None for a new answer, which is remembered."""
        scope = "" if patch is None else "\n".join(patch.pointers)
        digest = answer_digest(response.content or "", response.tool_calls, scope=scope)
        earlier = self.seen.get(digest)
        if earlier is None:
            self.seen[digest] = turn
            return None
        self.repeats += 1
        return earlier

    def _temperature(self, n: int = 1) -> float | None:
        asked = None if self.spec.temperature is None else float(self.spec.temperature)
        floor = 0.0 if n == 1 else CANDIDATE_TEMPERATURE
        if self.repeats > 0:
            floor = max(floor, REPEAT_TEMPERATURES[min(self.repeats, len(REPEAT_TEMPERATURES)) - 1])
        if floor == 0.0:
            return asked
        return max(asked or 0.0, floor)

    def _seed(self, n: int = 1) -> int | None:
        seed = self.spec.seed
        if seed is None and n > 1:
            seed = 0  # several answers: a seed each (the router's seed + k), never all alike
        if self.repeats == 0 or seed is None:
            return seed
        return seed + self.repeats

    def _past_deadline(self, slack_s: float = 0.05) -> bool:
        return self.deadline is not None and self.clock.monotonic() >= self.deadline - slack_s

    def _time_left(self) -> float | None:
        if self.deadline is None:
            return None
        left = self.deadline - self.clock.monotonic()
        if left <= 0:
            raise _End(codes.DEADLINE_EXCEEDED, f"deadlineMs {self.spec.budget.deadline_ms} passed")
        return left

    def _finish(self, envelope: Envelope, conversation: Conversation | None) -> JobResult:
        turns = self.ledger.turns
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
            history=tuple(self.ledger.history),
        )


@dataclass(frozen=True, slots=True)
class _Best:
    """Best-of-N on a turn record: how many answers came back, which one was kept."""

    answers: int
    chosen: int


async def _passing(value: Any) -> str | None:
    """No semantic checks: a field-level answer's parts are checked once merged."""
    return None


def _job_tools(spec: JobSpec, given: Sequence[Tool]) -> list[Tool]:
    """The runtime's tools, and the job's own: a tool without a url is the client's; one
    with a url needs a handler from the runtime (the worker's HTTP tools)."""
    tools = list(given)
    names = {tool.spec.name for tool in tools}
    for tool in spec.tools:
        if tool.name in names:
            continue
        if not tool.client_side:
            raise InvalidInput(
                f"the tool {tool.name!r} has a url, and no HTTP tool client is configured here",
                field="tools",
            )
        tools.append(
            Tool(ToolSpec(tool.name, tool.description, tool.parameters), None, mode="client")
        )
    return tools


def answer_digest(content: str, tool_calls: Sequence[ToolCall] = (), *, scope: str = "") -> str:
    """What makes two answers the same: their JSON value, however written (spacing, key
    order, a fence around it), else their text with whitespace runs folded; and the tool
    calls they make (a call where no tool is offered is rejected with empty content)."""
    text = unfenced(content).strip()
    try:
        canonical = json.dumps(json.loads(text), sort_keys=True, separators=(",", ":"))
    except (ValueError, RecursionError):
        canonical = " ".join(text.split())
    calls = "\n".join(f"{c.name}({c.arguments})" for c in tool_calls)
    digest = hashlib.sha256(canonical.encode("utf-8", "replace"))
    digest.update(b"\0" + calls.encode("utf-8", "replace"))
    if scope:  # a field-level answer: the same value for other parts is another answer
        digest.update(b"\0patch\0" + scope.encode("utf-8", "replace"))
    return digest.hexdigest()[:32]


def _epoch_ms(clock: Clock) -> int:
    return int(clock.now().timestamp() * 1000)


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
