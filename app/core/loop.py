"""The turn loop: one job in, an envelope and one record per model call out.

    result = await run_job(spec, Runtime(client=router))
    result.envelope.to_dict()        # {"status": "success", "data": {...}, "execution": {...}}
    [t.type for t in result.turns]   # ["must_return", "retry"]

Spec 000's state machine drives it (see ``app.core.budget.TurnBudget``): work turns with
tools, must-return on the last work turn (tools stripped), correction turns after that;
an explicit fail ends the job at once; the worst case is ``maxTurns + returnRetries``
calls. Resource limits are checked before every call. Transport retries happen inside
``ModelClient.complete`` and never count here.
"""

from __future__ import annotations

import asyncio
import inspect
import json
import logging
import re
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from app.core import codes
from app.core.answer import check_answer
from app.core.budget import Limits, TurnBudget, estimate_tokens
from app.core.clock import Clock, SystemClock, iso
from app.core.contract import Contract, build_contract
from app.core.conversation import Conversation
from app.core.envelope import Envelope, Execution
from app.core.feedback import (
    Failure,
    failure_from_check,
    failure_from_validator,
    failure_tools_unavailable,
    failure_truncated,
    quote,
    render_feedback,
)
from app.core.model import LLMRequest, LLMResponse, Message, ModelClient, ToolCall, ToolSpec
from app.core.prompts import render
from app.core.spec import JobSpec
from app.core.trace import TraceEvent, Tracer, emit
from app.core.turn import Outcome, TurnRecord, TurnType
from app.core.validators import Validator, first_failure
from app.errors import InvalidInput, ProviderError

log = logging.getLogger(__name__)

# The reserved shape a model uses to give up (told to it in prompts/explicit_fail.mustache).
_FAIL = re.compile(r'\{\s*"\$fail"\s*:\s*"((?:[^"\\]|\\.)*)"\s*\}')  # the whole answer
TOOL_RESULT_CHARS = 4000
RECORDED_ANSWER_CHARS = 20_000
_WASTED = {"invalid", "rejected", "truncated", "refusal", "explicit_fail", "error"}
# Errors after which configured fallback data is returned instead.
_FALLBACK_ON = (codes.LLM_ERRORS | codes.EVENT_ERRORS | codes.LOOP_ERRORS) - {
    codes.CANCELLED,
    codes.INTERNAL_ERROR,
    codes.LLM_CONFIG,
    codes.WORKER_LOST,
}


@dataclass(frozen=True, slots=True)
class Tool:
    """A tool the model may call on work turns; ``handler`` gets the parsed arguments."""

    spec: ToolSpec
    handler: Callable[[dict[str, Any]], Awaitable[Any] | Any]


@dataclass(frozen=True, slots=True)
class Runtime:
    """What the loop needs from outside: a model client, a clock, and optional hooks."""

    client: ModelClient
    clock: Clock = field(default_factory=SystemClock)
    tracer: Tracer | None = None
    tools: Sequence[Tool] = ()
    validators: Sequence[Validator] = ()
    cancelled: Callable[[], bool] | None = None


@dataclass(frozen=True, slots=True)
class JobResult:
    envelope: Envelope
    turns: tuple[TurnRecord, ...]
    transcript: tuple[Message, ...]
    history: tuple[dict[str, Any], ...]  # spec 000 "error evolution": one entry per rejection


async def run_job(spec: JobSpec, runtime: Runtime) -> JobResult:
    """Run one job to its end. Never raises for model or input trouble: that is in the envelope."""
    return await _Run(spec, runtime).run()


class _End(Exception):
    """Internal: the job ends with this envelope error."""

    def __init__(self, code: str, detail: str, *, cause: str | None = None) -> None:
        super().__init__(detail)
        self.code, self.detail, self.cause = code, detail, cause


@dataclass
class _Spend:
    input_tokens: int = 0
    output_tokens: int = 0
    cost: float = 0.0
    cost_known: bool = True
    transport_retries: int = 0

    @property
    def tokens(self) -> int:
        return self.input_tokens + self.output_tokens


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
        self.tools = {tool.spec.name: tool for tool in runtime.tools}
        self.turns: list[TurnRecord] = []
        self.history: list[dict[str, Any]] = []
        self.spend = _Spend()
        self.warnings: list[str] = []
        self.rejected = 0
        self.max_out = spec.max_output_tokens
        self.last_failure: Failure | None = None
        self.started = self.clock.monotonic()
        self.started_at = iso(self.clock.now())
        deadline_ms = spec.budget.deadline_ms
        self.deadline = None if deadline_ms is None else self.started + deadline_ms / 1000

    # -- the loop -------------------------------------------------------------------------

    async def run(self) -> JobResult:
        try:
            self.contract: Contract = build_contract(self.spec, self.rt.validators)
            conversation = self._conversation(self.spec.model)
        except InvalidInput as exc:  # includes a model that cannot give structuredOutput
            return self._finish(Envelope.failure(codes.INVALID_INPUT, exc.detail), None)
        try:
            while self.budget.phase != "exhausted":
                data = await self._turn(conversation)
                if data is not _CONTINUE:
                    return self._finish(self._success(data[0], data[1]), conversation)
            last = self.last_failure
            raise _End(
                codes.BUDGET_EXHAUSTED,
                "no valid answer within the budget"
                + ("" if last is None else f"; last problem: {last.diagnosis}"),
                cause=None if last is None else last.code,
            )
        except _End as end:
            return self._finish(self._failure(end), conversation)
        except InvalidInput as exc:  # e.g. the escalation model cannot give structuredOutput
            return self._finish(Envelope.failure(codes.INVALID_INPUT, exc.detail), conversation)

    async def _turn(self, conversation: Conversation) -> Any:
        if self.rt.cancelled is not None and self.rt.cancelled():
            raise _End(codes.CANCELLED, "the job was cancelled")
        turn_type = self.budget.turn_type
        index = len(self.turns) + 1
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
        tools = tuple(t.spec for t in self.tools.values()) if self.budget.tools_available else ()
        if simplified:
            messages = self._simplified(model)
        else:
            if escalate:
                conversation.system = self._system(model)
            messages = conversation.messages(self._note(turn_type))

        prompt_tokens = sum(estimate_tokens(m.content) + 4 for m in messages)
        timeout_s = self._time_left()
        verdict = self.limits.check(
            prompt_tokens=prompt_tokens,
            max_output_tokens=self.max_out,
            tokens_spent=self.spend.tokens,
            cost_spent=self.spend.cost,
            estimate_cost=lambda i, o: self.rt.client.estimate_cost(model, i, o),
        )
        if not verdict.ok:
            raise _End(verdict.error or codes.INTERNAL_ERROR, verdict.detail or "")

        request = LLMRequest(
            messages=messages,
            model=model,
            tools=tools,
            max_output_tokens=verdict.max_output_tokens,
            temperature=None if self.spec.temperature is None else float(self.spec.temperature),
            seed=self.spec.seed,
            output_schema=self.contract.output_schema,
            structured_output=self.spec.structured_output,
            timeout_s=timeout_s,
        )
        attempt = self.rejected + 1
        await emit(
            self.rt.tracer,
            TraceEvent(
                "turn_start",
                {
                    "turn": index,
                    "type": turn_type,
                    "toolsCount": len(tools),
                    "attempt": attempt,
                    "remaining": self.budget.retry_remaining,
                    "workRemaining": self.budget.work_remaining,
                    "model": model,
                    "escalated": escalate,
                    "simplified": simplified,
                },
            ),
        )
        began = self.clock.monotonic()
        started_at = iso(self.clock.now())
        base = _TurnBase(
            index=index,
            type=turn_type,
            attempt=attempt,
            max_output_tokens=verdict.max_output_tokens,
            prompt_tokens=prompt_tokens,
            message_count=len(messages),
            tools_offered=len(tools),
            escalated=escalate,
            simplified=simplified,
            started_at=started_at,
            began=began,
        )
        try:
            response = await self._call(request)
        except ProviderError as exc:
            self.spend.transport_retries += exc.transport_retries
            await self._record(base, None, "error", exc.code, exc.detail, answer=None)
            raise _End(exc.code, f"{exc.provider}: {exc.detail}") from None
        except TimeoutError:
            why = "the job's deadline passed during a model call"
            await self._record(base, None, "error", codes.DEADLINE_EXCEEDED, why, answer=None)
            raise _End(codes.DEADLINE_EXCEEDED, why) from None
        except Exception as exc:  # a client bug must end this job, not the worker
            log.exception("model client raised an unclassified error")
            why = f"the model client failed unexpectedly ({type(exc).__name__})"
            await self._record(base, None, "error", codes.INTERNAL_ERROR, why, answer=None)
            raise _End(codes.INTERNAL_ERROR, why) from None

        self._account(response, messages)
        content = response.content or ""

        if response.finish_reason in ("refusal", "content_filter"):
            why = response.refusal or f"the provider stopped with {response.finish_reason}"
            await self._record(base, response, "refusal", codes.LLM_REFUSAL, why, answer=content)
            raise _End(codes.LLM_REFUSAL, why)

        if response.tool_calls and not content.strip():
            if tools:
                names = await self._work(conversation, response.tool_calls)
                self.budget.consume()
                await self._record(
                    base, response, "tool_calls", None, None, answer=None, calls=names
                )
                return _CONTINUE
            return await self._reject(
                conversation, base, response, failure_tools_unavailable(), content
            )

        prompt_text = "\n".join(m.content for m in messages)
        if response.finish_reason == "length":
            # A rambling model may have written a whole answer before the cut; never one
            # copied from the prompt, and never in strict mode.
            if not self.spec.strict:
                salvaged = check_answer(
                    content, self.contract.output_schema, prompt=prompt_text, allow_echo=False
                )
                if salvaged.ok and await self._validate(salvaged.value) is None:
                    note = (
                        "extract: the answer was cut off at the output limit; "
                        "used the complete JSON value written before the cut"
                    )
                    return await self._accept(
                        conversation,
                        base,
                        response,
                        content,
                        salvaged.value,
                        (*salvaged.warnings, note),
                    )
            failure = failure_truncated(verdict.max_output_tokens)
            cap = self.spec.output_cap
            if self.max_out < cap:
                # Re-ask the same request with room to finish; the fragment is not fed back.
                self.max_out = min(self.max_out * 2, cap)
                return await self._reject(
                    conversation, base, response, failure, content, feed=False
                )
            return await self._reject(conversation, base, response, failure, content)

        fail = _FAIL.fullmatch(_unfenced(content))
        if fail is not None:
            reason = _unescape(fail.group(1))[:500] or "the model gave no reason"
            await self._record(
                base, response, "explicit_fail", codes.EXPLICIT_FAIL, reason, answer=content
            )
            raise _End(codes.EXPLICIT_FAIL, reason)

        checked = check_answer(
            content, self.contract.output_schema, strict=self.spec.strict, prompt=prompt_text
        )
        if not checked.ok:
            return await self._reject(
                conversation, base, response, failure_from_check(checked), content
            )
        problem = await self._validate(checked.value)
        if problem is not None:
            return await self._reject(
                conversation, base, response, failure_from_validator(problem), content
            )
        return await self._accept(
            conversation, base, response, content, checked.value, checked.warnings
        )

    async def _accept(
        self,
        conversation: Conversation,
        base: _TurnBase,
        response: LLMResponse,
        content: str,
        value: Any,
        warnings: tuple[str, ...],
    ) -> tuple[Any, tuple[str, ...]]:
        await self._record(base, response, "success", None, None, answer=content, warnings=warnings)
        conversation.add_final(content[:RECORDED_ANSWER_CHARS])
        return value, warnings

    # -- pieces of a turn -------------------------------------------------------------------

    async def _call(self, request: LLMRequest) -> LLMResponse:
        if request.timeout_s is None:
            return await self.rt.client.complete(request)
        async with asyncio.timeout(request.timeout_s):
            return await self.rt.client.complete(request)

    async def _validate(self, value: Any) -> str | None:
        try:
            return await first_failure(self.contract.validators, value)
        except ProviderError:
            raise
        except Exception as exc:  # a validator is a black box: its crash must not crash us
            log.warning("validator raised", exc_info=True)
            raise _End(
                codes.EVENT_INVALID_RESPONSE, f"a validator failed: {type(exc).__name__}"
            ) from None

    async def _reject(
        self,
        conversation: Conversation,
        base: _TurnBase,
        response: LLMResponse,
        failure: Failure,
        content: str,
        *,
        feed: bool = True,
    ) -> Any:
        """A rejected answer: record it, tell the model why (collapsed), spend a turn."""
        self.budget.consume()
        await self._record(
            base, response, failure.outcome, failure.code, failure.diagnosis, answer=content
        )
        self.rejected += 1
        self.last_failure = failure
        self.history.append(
            {
                "turn": base.index,
                "type": base.type,
                "outcome": failure.outcome,
                "errorCode": failure.code,
                "diagnosis": failure.diagnosis,
            }
        )
        if feed:
            retry_no = max(self.rejected, 1)
            text = render_feedback(
                failure,
                first=self.rejected == 1,
                example=self.contract.example,
                retry_prompt=self.spec.retry_prompt,
                attempt=retry_no,
                total_retries=self.spec.budget.max_calls - 1,
                previous_answer=quote(content),
            )
            shown = None if failure.outcome == "truncated" else Message("assistant", quote(content))
            conversation.add_failure(
                shown, Message("user", text), recorded=content[:RECORDED_ANSWER_CHARS]
            )
        else:
            conversation.transcript.append(Message("assistant", content[:RECORDED_ANSWER_CHARS]))
        return _CONTINUE

    async def _work(
        self, conversation: Conversation, calls: tuple[ToolCall, ...]
    ) -> tuple[str, ...]:
        """Run the tools the model called and add the exchange to the conversation."""
        results: list[Message] = []
        for call in calls:
            results.append(
                Message("tool", await self._run_tool(call), tool_call_id=call.id, name=call.name)
            )
        conversation.add_work(Message("assistant", "", tool_calls=calls), *results)
        return tuple(call.name for call in calls)

    async def _run_tool(self, call: ToolCall) -> str:
        context: dict[str, Any] = {
            "unknown": False,
            "name": call.name,
            "bad_arguments": False,
            "message": "",
            "error": None,
            "ok": False,
            "result": "",
            "truncated": False,
            "omitted": 0,
        }
        tool = self.tools.get(call.name)
        if tool is None:
            context["unknown"] = True
            return render("tool_result", context)
        try:
            arguments = json.loads(call.arguments or "{}")
            if not isinstance(arguments, dict):
                raise ValueError("expected a JSON object")
        except ValueError as exc:
            context.update(bad_arguments=True, message=str(exc)[:200])
            return render("tool_result", context)
        try:
            result = tool.handler(arguments)
            if inspect.isawaitable(result):
                result = await result
        except Exception as exc:  # a tool's failure is information for the model, not a crash
            context["error"] = f"{type(exc).__name__}: {str(exc)[:300]}"
            return render("tool_result", context)
        text = (
            result
            if isinstance(result, str)
            else json.dumps(result, ensure_ascii=False, default=str)
        )
        if len(text) > TOOL_RESULT_CHARS:
            context.update(truncated=True, omitted=len(text) - TOOL_RESULT_CHARS)
            text = text[:TOOL_RESULT_CHARS]
        context.update(ok=True, result=text)
        return render("tool_result", context)

    async def _record(
        self,
        base: _TurnBase,
        response: LLMResponse | None,
        outcome: Outcome,
        code: str | None,
        diagnosis: str | None,
        *,
        answer: str | None,
        calls: tuple[str, ...] = (),
        warnings: tuple[str, ...] = (),
    ) -> None:
        usage = response.usage if response is not None else None
        record = TurnRecord(
            index=base.index,
            type=base.type,
            outcome=outcome,
            attempt=base.attempt,
            error_code=code,
            diagnosis=diagnosis,
            input_tokens=usage.input_tokens if usage else 0,
            output_tokens=usage.output_tokens if usage else 0,
            cost_usd=response.cost_usd if response is not None else None,
            latency_ms=int((self.clock.monotonic() - base.began) * 1000),
            provider=response.provider if response is not None else None,
            model=response.model if response is not None else None,
            finish_reason=response.finish_reason if response is not None else None,
            max_output_tokens=base.max_output_tokens,
            prompt_tokens_estimate=base.prompt_tokens,
            message_count=base.message_count,
            tools_offered=base.tools_offered,
            tool_calls=calls,
            transport_retries=response.transport_retries if response is not None else 0,
            transport_wait_ms=response.transport_wait_ms if response is not None else 0,
            escalated=base.escalated,
            simplified=base.simplified,
            warnings=warnings,
            answer=None if answer is None else quote(answer),
            started_at=base.started_at,
        )
        self.turns.append(record)
        await emit(
            self.rt.tracer,
            TraceEvent(
                "turn_end",
                {
                    "turn": base.index,
                    "type": base.type,
                    "result": outcome,
                    "errorCode": code,
                    "diagnosis": diagnosis,
                    "attempt": base.attempt,
                    "remaining": self.budget.retry_remaining,
                    "callsLeft": self.budget.calls_left,
                    "inputTokens": record.input_tokens,
                    "outputTokens": record.output_tokens,
                    "costUsd": record.cost_usd,
                    "latencyMs": record.latency_ms,
                    "model": record.model,
                    "provider": record.provider,
                    "record": record.to_dict(),
                },
            ),
        )

    def _account(self, response: LLMResponse, messages: tuple[Message, ...]) -> None:
        usage = response.usage
        if usage is None:
            # Honest about it: estimated, and said so.
            est_in = sum(estimate_tokens(m.content) + 4 for m in messages)
            est_out = estimate_tokens(response.content or "")
            self.spend.input_tokens += est_in
            self.spend.output_tokens += est_out
            self._warn(f"{response.provider} reported no token usage; tokens were estimated")
        else:
            self.spend.input_tokens += usage.input_tokens
            self.spend.output_tokens += usage.output_tokens
        if response.cost_usd is None:
            self.spend.cost_known = False
        else:
            self.spend.cost += response.cost_usd
        self.spend.transport_retries += response.transport_retries
        for warning in response.warnings:
            self._warn(warning)

    # -- prompts ------------------------------------------------------------------------------

    def _system(self, model: str | None) -> Message:
        mode = self.rt.client.structured_mode(model, self.spec.structured_output)
        native = mode in ("json_schema", "tool")
        schema_text = _schema_text(self.contract.output_schema)
        return Message(
            "system",
            render(
                "system",
                {
                    "has_tools": bool(self.tools) and self.budget.max_turns > 1,
                    "show_schema": not native,
                    "schema": schema_text,
                    "can_fail": not native,
                },
            ),
        )

    def _conversation(self, model: str | None) -> Conversation:
        task = render(
            "task",
            {
                "task": self.spec.task,
                "has_input": self.spec.input is not None,
                "input": _show_input(self.spec.input),
                "has_plan": bool(self.spec.plan),
                "plan": self.spec.plan or [],
            },
        )
        return Conversation(
            system=self._system(model),
            task=Message("user", task),
            full=self.spec.feedback == "full",
        )

    def _simplified(self, model: str | None) -> tuple[Message, ...]:
        mode = self.rt.client.structured_mode(model, self.spec.structured_output)
        system = render(
            "simplified_final",
            {
                "schema": _schema_text(self.contract.output_schema),
                "example": self.contract.example,
                "can_fail": mode not in ("json_schema", "tool"),
            },
        )
        last = self.last_failure
        user = render(
            "simplified_task",
            {
                "task": self.spec.task,
                "has_input": self.spec.input is not None,
                "input": _show_input(self.spec.input),
                "last_error": None if last is None else last.diagnosis,
            },
        )
        return (Message("system", system), Message("user", user))

    def _note(self, turn_type: TurnType) -> str | None:
        budget = self.budget
        info = render(
            "turn_info",
            {
                "in_retry": turn_type == "retry",
                "current_retry": budget.retry_attempt,
                "total_retries": budget.return_retries,
                "multi_turn": budget.max_turns > 1,
                "turn": budget.max_turns - budget.work_remaining + 1,
                "max_turns": budget.max_turns,
                "work_left": max(budget.work_remaining - 1, 0),
                "has_retries": budget.return_retries > 0,
                "retries_left": budget.retry_remaining,
            },
        )
        parts = [info] if info else []
        if turn_type == "must_return":
            parts.append(
                render(
                    "must_return_warning",
                    {
                        "has_retries": budget.retry_remaining > 0,
                        "retry_count": budget.retry_remaining,
                    },
                )
            )
        return "\n\n".join(parts) or None

    # -- the end ------------------------------------------------------------------------------

    def _time_left(self) -> float | None:
        if self.deadline is None:
            return None
        left = self.deadline - self.clock.monotonic()
        if left <= 0:
            raise _End(codes.DEADLINE_EXCEEDED, f"deadlineMs {self.spec.budget.deadline_ms} passed")
        return left

    def _warn(self, text: str) -> None:
        if text not in self.warnings:
            self.warnings.append(text)

    def _execution(self, success: bool) -> Execution:
        wasted = [t for t in self.turns if not success or t.outcome in _WASTED]
        wasted_tokens = sum(t.input_tokens + t.output_tokens for t in wasted)
        # A failed call (outcome "error") spent nothing we know of; any other unknown price
        # makes the whole figure unknown.
        priced = [t for t in wasted if t.outcome != "error"]
        wasted_cost = (
            None
            if any(t.cost_usd is None for t in priced)
            else sum(t.cost_usd or 0.0 for t in priced)
        )
        last = next((t for t in reversed(self.turns) if t.model is not None), None)
        retry_count = sum(
            1 for prev in self.turns[:-1] if prev.outcome in {"invalid", "rejected", "truncated"}
        )
        return Execution(
            duration_ms=int((self.clock.monotonic() - self.started) * 1000),
            tokens_used=self.spend.tokens,
            input_tokens=self.spend.input_tokens,
            output_tokens=self.spend.output_tokens,
            cost=round(self.spend.cost, 10) if self.spend.cost_known else None,
            model=None if last is None else last.model,
            provider=None if last is None else last.provider,
            retry_count=retry_count,
            timestamp=self.started_at,
            llm_calls=len(self.turns),
            transport_retries=self.spend.transport_retries,
            wasted_tokens=wasted_tokens,
            wasted_cost=None if wasted_cost is None else round(wasted_cost, 10),
        )

    def _success(self, data: Any, repairs: tuple[str, ...]) -> Envelope:
        provenance = None
        if self.history:
            summary = "; ".join(_first_line(h["diagnosis"]) for h in self.history)
            provenance = render(
                "provenance",
                {"retries": len(self.history), "one": len(self.history) == 1, "summary": summary},
            )
        return Envelope.success(
            data,
            warnings=tuple(repairs) + tuple(self.warnings),
            provenance=provenance,
            execution=self._execution(True),
        )

    def _failure(self, end: _End) -> Envelope:
        execution = self._execution(False)
        if self.spec.fallback is not None and end.code in _FALLBACK_ON:
            return Envelope.success(
                self.spec.fallback.data,
                warnings=(
                    f"all attempts failed ({end.code}: {_first_line(end.detail)}); "
                    "returned the configured fallback data",
                    *self.warnings,
                ),
                execution=execution,
            )
        return Envelope.failure(
            end.code,
            end.detail,
            cause=end.cause,
            warnings=tuple(self.warnings),
            execution=execution,
        )

    def _finish(self, envelope: Envelope, conversation: Conversation | None) -> JobResult:
        if conversation is None:
            transcript: list[Message] = []
        elif (
            self.spec.purify
            and envelope.status == codes.RESULT_SUCCESS
            and self.turns
            and (self.turns[-1].outcome == "success")
        ):
            transcript = conversation.purified()
        else:
            transcript = conversation.transcript
        return JobResult(
            envelope=envelope,
            turns=tuple(self.turns),
            transcript=tuple(transcript),
            history=tuple(self.history),
        )


@dataclass(frozen=True, slots=True)
class _TurnBase:
    index: int
    type: TurnType
    attempt: int
    max_output_tokens: int
    prompt_tokens: int
    message_count: int
    tools_offered: int
    escalated: bool
    simplified: bool
    started_at: str
    began: float


_CONTINUE: Any = object()


def _show_input(value: Any) -> str:
    if value is None:
        return ""
    if isinstance(value, str):
        return value
    return json.dumps(value, ensure_ascii=False, indent=1)


def _schema_text(schema: dict[str, Any]) -> str:
    # One line, no dialect marker: every prompt token is paid for on every retry.
    shown = {k: v for k, v in schema.items() if k != "$schema"}
    return json.dumps(shown, ensure_ascii=False)


def _first_line(text: str) -> str:
    lines = [line.strip(" -") for line in text.splitlines() if line.strip()]
    # The first line of a diagnosis is framing; the second names the problem when there is one.
    line = lines[1] if len(lines) > 1 else (lines[0] if lines else "")
    return line if len(line) <= 120 else line[:117] + "..."


def _unfenced(text: str) -> str:
    """The answer without surrounding whitespace and one Markdown code fence, if any."""
    stripped = text.strip()
    fence = re.fullmatch(r"```[A-Za-z]*\s*(.*?)\s*```", stripped, re.DOTALL)
    return fence.group(1) if fence else stripped


def _unescape(text: str) -> str:
    try:
        return str(json.loads(f'"{text}"'))
    except json.JSONDecodeError:
        return text
