"""What a run does with a rejected answer: record it, spend a turn, tell the model why.

Small policies, applied in this order by ``reject``:

- room: a cut-off answer is asked again with room to finish, unless it was looping;
- repeats: the same rejected answer again samples more freely, and at last stops the job;
- the count: the rejection joins the history (spec 000 "error evolution");
- scope: the next re-ask asks for the failed parts only (spec 002's patch) or the whole;
- the correction: a fresh re-ask, a patch's feedback, or the full feedback (collapsed).
"""

from __future__ import annotations

from dataclasses import replace
from typing import Final

from app.core.answer.feedback import Failure, quote, render_feedback, render_patch_feedback
from app.core.answer.patch import Patch, plan
from app.core.answer.runaway import looping
from app.core.answer.validators import read_paths
from app.core.answer.verdict import Rejected
from app.core.schema.steps import TooMuchWork
from app.core.schema.validation import compiled
from app.core.turn.conversation import RECORDED_ANSWER_CHARS, Conversation
from app.core.turn.model import Message
from app.core.turn.recorder import Answered, Recorder
from app.core.turn.request import REPEAT_TEMPERATURES, Call
from app.core.turn.setup import Setup
from app.core.turn.state import RunState
from app.core.turn.stop import Ended
from app.core.turn.templates import render
from app.core.wire import codes
from app.core.wire.record import Rejection
from app.core.wire.spec import RetryMode

REPEATED_ANSWER: Final = "repeated-answer"


async def reject(
    setup: Setup,
    state: RunState,
    record: Recorder,
    conversation: Conversation,
    answer: Answered,
    rejected: Rejected,
) -> None:
    """Apply the policies to a rejected answer; the job goes on, or ``Ended``."""
    call, content = answer.call, answer.content
    rejected, shown, feed = _make_room(setup, state, call, rejected, content, answer.merged)
    failure = rejected.failure
    state.budget.consume()
    # A cut-off answer is asked again bigger, not the same question: not a repeat.
    truncated = failure.outcome == "truncated"
    repeat_of = None if truncated else state.repeat_of(answer.response, call.index, call.patch)
    await record(
        call,
        answer.response,
        failure.outcome,
        failure.code,
        failure.diagnosis,
        answer=content,
        repeat_of=repeat_of,
        best=answer.best,
    )
    _count(state, call, failure)
    if repeat_of is not None:
        _stop_repeating(state, repeat_of, failure)
    if not feed:
        # The same request again, bigger: a field-level re-ask stays one.
        conversation.transcript.append(Message("assistant", content[:RECORDED_ANSWER_CHARS]))
        return
    state.patch = next_patch(setup, state, call, rejected)
    # The correction is about the merged value of a field-level answer, else the answer.
    _correct(setup, state, conversation, call, failure, shown or content, content)


def _make_room(
    setup: Setup,
    state: RunState,
    call: Call,
    rejected: Rejected,
    content: str,
    shown: str | None,
) -> tuple[Rejected, str | None, bool]:
    """The rejection, the answer it is about, and whether its fragment is fed back.

    A cut-off answer is asked again with more room (up to the cap), its fragment not fed
    back: the same request, bigger. Not one that was looping when cut (the same part over
    and over, or counting): more room buys more loop. That one is asked again at the same
    size, told so, with its lists bounded by the input's length in words (where a grammar
    compiles the schema).
    """
    failure = rejected.failure
    if failure.outcome != "truncated":
        return rejected, shown, True
    if looping(content):
        limit = {"max_output_tokens": call.request.max_output_tokens}
        failure = replace(failure, diagnosis=render("looping_feedback", limit))
        shown = setup.prompts.shown_input(call.request.model)
        state.max_items = max(1, len(shown.split()))
        return replace(rejected, failure=failure), shown, True
    cap = setup.spec.output_cap
    if state.max_out < cap:
        state.max_out = min(state.max_out * 2, cap)
        return rejected, shown, False
    return rejected, shown, True


def _count(state: RunState, call: Call, failure: Failure) -> None:
    state.rejected += 1
    state.last_failure = failure
    state.ledger.history.append(
        Rejection(
            turn=call.index,
            type=call.type,
            outcome=failure.outcome,
            error_code=failure.code,
            diagnosis=failure.diagnosis,
        )
    )


def _stop_repeating(state: RunState, repeat_of: int, failure: Failure) -> None:
    """Past the last freer sampling, a model that repeats itself is not paid again."""
    if state.repeats > len(REPEAT_TEMPERATURES):
        raise Ended(
            codes.BUDGET_EXHAUSTED,
            f"the model gave the rejected answer of turn {repeat_of} again, "
            f"{state.repeats} times, whatever the feedback and sampling; stopped early "
            f"rather than pay for it again (last problem: {failure.diagnosis})",
            cause=REPEATED_ANSWER,
        )


def next_patch(setup: Setup, state: RunState, call: Call, rejected: Rejected) -> Patch | None:
    """The parts the next re-ask asks for (spec 002); None for the whole answer.

    A field-level answer that could not be read is asked for again the same way.
    """
    spec = setup.spec
    mode = spec.retry_mode
    if not rejected.parsed:
        return call.patch
    if mode == "whole":
        return None
    if mode == "auto" and (
        spec.retry_prompt is not None  # the client's own correction message
        or (bool(setup.tools) and state.budget.tools_available)  # work may still change it
    ):
        return None
    try:
        return _patch_of(setup, state, rejected, mode)
    except (TooMuchWork, RecursionError):  # a part too costly to name: ask for it all
        return None


def _patch_of(setup: Setup, state: RunState, rejected: Rejected, mode: RetryMode) -> Patch | None:
    value, schema = rejected.value, setup.contract.output_schema
    if rejected.failure.outcome == "rejected":
        index, specs = state.failed_validator, setup.spec.validators
        in_spec = index is not None and index < len(specs)
        paths = read_paths(specs[index], value) if index is not None and in_spec else None
    else:
        paths = compiled(schema).failing_paths(value)
    return plan(value, paths, schema, mode=mode)


def _correct(
    setup: Setup,
    state: RunState,
    conversation: Conversation,
    call: Call,
    failure: Failure,
    about: str,
    content: str,
) -> None:
    """Tell the model why: a correction quoting ``about``; the transcript keeps ``content``."""
    recorded = content[:RECORDED_ANSWER_CHARS]
    state.fresh = setup.prompts.reask(call.request.model, failure, state.patch)
    if state.fresh is not None:
        # Asked afresh: the rejected answer is in the transcript, not in the next prompt.
        conversation.add_failure(None, state.fresh, recorded=recorded)
        return
    text = _feedback(setup, state, call, failure, about)
    answer = None if failure.outcome == "truncated" else Message("assistant", quote(about))
    conversation.add_failure(answer, Message("user", text), recorded=recorded)


def _feedback(setup: Setup, state: RunState, call: Call, failure: Failure, about: str) -> str:
    model, patch, first = call.request.model, state.patch, state.rejected == 1
    if patch is not None:
        custom = setup.prompts.patch_feedback(model, failure, patch)
        return custom or render_patch_feedback(failure, first=first, patch=patch)
    spec = setup.spec
    return render_feedback(
        failure,
        first=first,
        example=setup.contract.example,
        retry_prompt=spec.retry_prompt,
        attempt=max(state.rejected, 1),
        total_retries=spec.budget.max_calls - 1,
        previous_answer=quote(about),
        compact=setup.prompts.compact(model),
    )
