"""An LLM judge (validator kind ``judge``): a configured model grades a candidate answer
against the client's rubric; its reason becomes the diagnosis the model is re-asked with.

    messages = judge_messages(spec, validator, value)
    finding = judge_finding(validator, response)     # (ok, diagnosis) or ValidatorUnavailable

The loop makes the call (``app.core.turn.loop``): the job's model client, budgets and deadline
apply, and its tokens and cost are counted apart in ``execution`` (``validatorCalls``,
``validatorTokens``, ``validatorCost``) and within the totals.
"""

from __future__ import annotations

import json
from typing import Any, Final

from app.core.answer.check import check_answer
from app.core.answer.finding import Finding
from app.core.answer.quote import quoted
from app.core.schema.steps import own_budget, steps_for
from app.core.turn.model import LLMResponse, Message
from app.core.turn.prompting import show_input
from app.core.turn.templates import data_tag, render
from app.core.wire.errors import ValidatorUnavailable
from app.core.wire.spec import JobSpec, ValidatorSpec

JUDGE_SCHEMA: Final[dict[str, Any]] = {
    "type": "object",
    "properties": {
        "reason": {"type": "string", "maxLength": 1000},
        "score": {"type": "integer", "minimum": 1, "maximum": 5},
        "pass": {"type": "boolean"},
    },
    "required": ["reason", "score", "pass"],
    "additionalProperties": False,
}
JUDGE_OUTPUT_TOKENS: Final = 400
_REASON_CHARS: Final = 600


def judge_messages(spec: JobSpec, validator: ValidatorSpec, value: Any) -> tuple[Message, ...]:
    """The judge's prompt (``prompts/judge_system`` and ``judge_task``): the rubric, the
    task, the input and the candidate, each fenced as data."""
    candidate = json.dumps(value, ensure_ascii=False, indent=2)
    shown = show_input(spec.input)
    context = {
        "rubric": validator.rubric or "",
        "rubric_tag": data_tag(validator.rubric or "", "rubric"),
        "task": spec.task,
        "task_tag": data_tag(spec.task, "task"),
        "has_input": spec.input is not None,
        "input": shown,
        "input_tag": data_tag(shown),
        "candidate": candidate,
        "candidate_tag": data_tag(candidate, "candidate"),
        "min_score": None if validator.pass_if is None else validator.pass_if.min_score,
    }
    return (
        Message("system", render("judge_system", context)),
        Message("user", render("judge_task", context)),
    )


def judge_finding(validator: ValidatorSpec, response: LLMResponse) -> Finding:
    """Pass or fail, with the judge's reason as the diagnosis; an answer that is not a
    grade is the judge's failure (``ValidatorUnavailable``), never the model's."""
    content = response.content or ""
    if response.finish_reason in ("refusal", "content_filter"):
        raise ValidatorUnavailable("the judge model refused to grade the answer")
    with own_budget(steps_for(len(content))):
        checked = check_answer(content, JUDGE_SCHEMA)
    if not checked.ok:
        raise ValidatorUnavailable(
            "the judge model did not answer with a grade: " + "; ".join(checked.errors[:2])
        )
    grade = checked.value
    reason = str(grade["reason"]).strip()[:_REASON_CHARS] or "no reason given"
    passed = (
        bool(grade["pass"])
        if validator.pass_if is None
        else int(grade["score"]) >= validator.pass_if.min_score
    )
    if passed:
        return True, None
    source = f"the judge model {validator.model or ''}".rstrip()
    return False, (
        f"{source} graded the answer {grade['score']}/5 against the rubric.\n"
        + quoted(f"{source}", reason)
    )
