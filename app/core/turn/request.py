"""The next call of a run, prepared: its request built within the budgets, the turn announced.

call = await prepare(setup, state, conversation)    # raises Ended past a limit
response = await call_model(client, state, record, call)
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Final

from app.core.answer.patch import Patch
from app.core.turn.budget import Allowance, estimate_tokens
from app.core.turn.clock import iso
from app.core.turn.conversation import Conversation
from app.core.turn.model import LLMRequest, Message, ToolSpec
from app.core.turn.setup import Setup
from app.core.turn.state import RunState
from app.core.turn.stop import Ended
from app.core.wire import codes
from app.core.wire.events import TurnStarted, emit
from app.core.wire.record import TurnType
from app.core.wire.spec import JobSpec, ToolChoiceName

# After the model repeats a rejected answer, the next calls sample more freely (at least
# this temperature, a new seed); repeated once more at the last one, the job stops early.
REPEAT_TEMPERATURES: Final = (0.7, 1.0)
# Best-of-N: answers asked for together are sampled at least this freely, each with its own
# seed (from 0 when the job gives none): N greedy answers would be one answer N times.
CANDIDATE_TEMPERATURE: Final = 0.7


@dataclass(frozen=True, slots=True)
class Call:
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


async def prepare(setup: Setup, state: RunState, conversation: Conversation) -> Call:
    """Build the next request, check the budgets, and announce the turn."""
    spec, budget, clock = setup.spec, state.budget, state.clock
    if setup.runtime.cancelled is not None and setup.runtime.cancelled():
        raise Ended(codes.CANCELLED, "the job was cancelled")
    turn_type = budget.turn_type
    escalate = (
        spec.escalate_model is not None
        and turn_type != "normal"
        and state.rejected >= spec.escalate_after
    )
    model = spec.escalate_model if escalate else spec.model
    simplified = spec.simplify_on_final_attempt and budget.calls_left == 1 and state.rejected > 0
    # A field-level re-ask offers no tools: it corrects parts of an answer.
    patch = None if simplified else state.patch
    tools = setup.tools.specs if budget.tools_available and patch is None else ()
    messages = _messages(setup, state, conversation, model, simplified, escalate=escalate)
    prompt_tokens = sum(estimate_tokens(m.content) + 4 for m in messages)
    timeout_s = state.time_left()
    n, allowance = _afford(setup, state, _candidates(spec, state), prompt_tokens, model)
    if not allowance.ok:
        raise Ended(allowance.error or codes.INTERNAL_ERROR, allowance.detail or "")
    choice = spec.tool_choice
    request = LLMRequest(
        messages=messages,
        model=model,
        tools=tools,
        tool_choice="auto" if isinstance(choice, ToolChoiceName) else choice,
        forced_tool=choice.name if isinstance(choice, ToolChoiceName) else None,
        max_output_tokens=allowance.max_output_tokens,
        temperature=_temperature(spec, state.repeats, n),
        seed=_seed(spec, state.repeats, n),
        output_schema=setup.contract.output_schema if patch is None else patch.schema,
        structured_output=spec.structured_output,
        timeout_s=timeout_s,
        n=n,
        # Nothing reads back the prefix of a job's only call (writing a cache can cost
        # more than plain input), nor of the simplified request (its own).
        cache_prefix=0
        if simplified or (budget.calls_left == 1 and not state.ledger.turns)
        else conversation.stable(),
        cache_key=conversation.cache_key,
        max_items=state.max_items,
    )
    call = Call(
        request=request,
        index=len(state.ledger.turns) + 1,
        type=turn_type,
        attempt=state.rejected + 1,
        prompt_tokens=prompt_tokens,
        escalated=escalate,
        simplified=simplified,
        started_at=iso(clock.now()),
        began=clock.monotonic(),
        patch=patch,
    )
    await _announce(setup, state, call, tools)
    return call


def _messages(
    setup: Setup,
    state: RunState,
    conversation: Conversation,
    model: str | None,
    simplified: bool,
    *,
    escalate: bool,
) -> tuple[Message, ...]:
    """What the call sends: the simplified request, a fresh re-ask, or the conversation."""
    prompts, turn_type = setup.prompts, state.budget.turn_type
    if simplified:
        return prompts.simplified(model, state.last_failure)
    if state.fresh is not None and prompts.compact(model):
        note = prompts.note(state.budget, turn_type)
        text = state.fresh.content if note is None else f"{state.fresh.content}\n\n{note}"
        return (Message("user", text),)
    if escalate:
        conversation.system = prompts.system(model)
    return conversation.messages(prompts.note(state.budget, turn_type))


async def _announce(setup: Setup, state: RunState, call: Call, tools: tuple[ToolSpec, ...]) -> None:
    await emit(
        setup.runtime.tracer,
        TurnStarted(
            turn=call.index,
            type=call.type,
            tools_count=len(tools),
            attempt=call.attempt,
            remaining=state.budget.retry_remaining,
            work_remaining=state.budget.work_remaining,
            model=call.request.model,
            escalated=call.escalated,
            simplified=call.simplified,
        ),
    )


def _candidates(spec: JobSpec, state: RunState) -> int:
    """Best-of-N: how many answers this call asks for."""
    wanted = spec.candidates
    if wanted is None or wanted.n <= 1:
        return 1
    if wanted.on == "final" and not (state.budget.calls_left == 1 and state.rejected > 0):
        return 1
    return wanted.n


def _afford(
    setup: Setup, state: RunState, n: int, prompt_tokens: int, model: str | None
) -> tuple[int, Allowance]:
    """How many answers (up to ``n``) the budgets allow, and the call's allowance.

    Each at the full output limit, counted as a call of its own (the worst case); when not
    even two fit, one, its output limit shrunk as usual.
    """
    spend, max_out = state.ledger.spend, state.max_out

    def check(k: int) -> Allowance:
        return setup.limits.check(
            prompt_tokens=prompt_tokens * k,
            max_output_tokens=max_out * k,
            tokens_spent=spend.tokens,
            cost_spent=spend.cost,
            estimate_cost=lambda i, o: setup.runtime.client.estimate_cost(model, i, o),
        )

    for k in range(n, 1, -1):
        allowance = check(k)
        if allowance.ok and allowance.max_output_tokens >= max_out * k:
            if k < n:
                state.ledger.warn(
                    f"candidates: asked for {n} answers per call; the budget allowed {k}"
                )
            return k, replace(allowance, max_output_tokens=max_out)
    if n > 1:
        state.ledger.warn(f"candidates: asked for {n} answers per call; the budget allowed 1")
    return 1, check(1)


def _temperature(spec: JobSpec, repeats: int, n: int) -> float | None:
    asked = None if spec.temperature is None else float(spec.temperature)
    floor = 0.0 if n == 1 else CANDIDATE_TEMPERATURE
    if repeats > 0:
        floor = max(floor, REPEAT_TEMPERATURES[min(repeats, len(REPEAT_TEMPERATURES)) - 1])
    if floor == 0.0:
        return asked
    return max(asked or 0.0, floor)


def _seed(spec: JobSpec, repeats: int, n: int) -> int | None:
    seed = spec.seed
    if seed is None and n > 1:
        seed = 0  # several answers: a seed each (the router's seed + k), never all alike
    if repeats == 0 or seed is None:
        return seed
    return seed + repeats
