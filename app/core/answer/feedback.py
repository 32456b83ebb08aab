"""Why an answer was rejected, and the correction message the model gets for it.

failure = failure_from_check(checked)
text = render_feedback(failure, first=True, example=contract.example, retry_prompt=None, ...)
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from app.core.answer.check import Checked
from app.core.answer.patch import Patch, value_at
from app.core.schema.example import example_for
from app.core.schema.validation import brief
from app.core.turn.templates import fence, render, render_custom
from app.core.wire import codes
from app.core.wire.record import Outcome

# Model output quoted back is capped: head and tail survive, the middle is cut.
QUOTE_HEAD_CHARS = 1500
QUOTE_TAIL_CHARS = 400
# What a client's retryPrompt may name: the keys render_feedback passes, and no others.
RETRY_PROMPT_KEYS = frozenset(
    {"first", "diagnosis", "excerpt", "example", "attempt", "total_retries", "previous_answer"}
)


@dataclass(frozen=True, slots=True)
class Failure:
    """A rejected answer: the turn's outcome, the envelope code and the diagnosis text."""

    outcome: Outcome
    code: str
    diagnosis: str
    excerpt: str | None = None
    show_example: bool = False


def _diagnosis(**flags: Any) -> str:
    context: dict[str, Any] = {
        "empty": False,
        "syntax": False,
        "schema": False,
        "rejected": False,
        "tools_unavailable": False,
        "limit": False,
        "too_large": False,
        "bad_text": False,
        "message": "",
        "errors": [],
    }
    context.update(flags)
    return render("diagnosis", context)


def failure_from_check(checked: Checked) -> Failure:
    """The answer did not parse or did not match the schema."""
    if checked.kind == "syntax" and checked.syntax is not None:
        problem = checked.syntax
        message = f"line {problem.line}, column {problem.column}: {problem.message}"
        return Failure(
            outcome="invalid",
            code=codes.LLM_INVALID_OUTPUT,
            diagnosis=_diagnosis(syntax=True, message=message),
            excerpt=problem.excerpt,
            show_example=True,
        )
    if checked.kind == "limit":
        return failure_too_complex(checked.errors[0])
    if checked.kind == "schema":
        return Failure(
            outcome="invalid",
            code=codes.LLM_INVALID_OUTPUT,
            diagnosis=_diagnosis(schema=True, errors=list(checked.errors)),
            show_example=True,
        )
    return Failure(
        outcome="invalid",
        code=codes.LLM_INVALID_OUTPUT,
        diagnosis=_diagnosis(empty=True),
        show_example=True,
    )


def failure_from_validator(diagnosis: str) -> Failure:
    """The answer matched the schema but a semantic validator said no."""
    return Failure(
        outcome="rejected",
        code=codes.LLM_INVALID_OUTPUT,
        diagnosis=_diagnosis(rejected=True, message=diagnosis),
    )


def failure_too_large(size: int, limit: int) -> Failure:
    """The answer is longer than the request's output limit allows; it was not parsed."""
    return Failure(
        outcome="invalid",
        code=codes.LLM_INVALID_OUTPUT,
        diagnosis=_diagnosis(too_large=True, size=size, max_chars=limit),
    )


def failure_too_complex(message: str) -> Failure:
    """Checking the answer passed its work budget (see app.core.answer.check)."""
    return Failure(
        outcome="invalid",
        code=codes.LLM_INVALID_OUTPUT,
        diagnosis=_diagnosis(limit=True, message=message),
    )


def failure_bad_text(where: str) -> Failure:
    """The answer holds text that is not valid Unicode (an unpaired surrogate)."""
    return Failure(
        outcome="invalid",
        code=codes.LLM_INVALID_OUTPUT,
        diagnosis=_diagnosis(bad_text=True, message=where),
    )


def failure_tools_unavailable() -> Failure:
    return Failure(
        outcome="invalid",
        code=codes.LLM_INVALID_OUTPUT,
        diagnosis=_diagnosis(tools_unavailable=True),
    )


def failure_truncated(max_output_tokens: int) -> Failure:
    return Failure(
        outcome="truncated",
        code=codes.LLM_TOKEN_LIMIT,
        diagnosis=render("truncated_feedback", {"max_output_tokens": max_output_tokens}),
    )


def render_feedback(
    failure: Failure,
    *,
    first: bool,
    example: str | None,
    retry_prompt: str | None,
    attempt: int,
    total_retries: int,
    previous_answer: str | None,
    compact: bool = False,
) -> str:
    """The correction message; a client's ``retryPrompt`` replaces the shipped template.

    ``compact`` (the compact prompt profile): the diagnosis and one line, without the
    quoted excerpt or the example a small model would copy.
    """
    if failure.outcome == "truncated":
        return failure.diagnosis
    context: dict[str, Any] = {
        "first": first,
        "diagnosis": failure.diagnosis,
        "excerpt": failure.excerpt,
        "example": example if failure.show_example else None,
        "attempt": attempt,
        "total_retries": total_retries,
        "previous_answer": previous_answer,
    }
    if retry_prompt is not None:
        return render_custom(retry_prompt, context)
    if compact:
        return render("compact_feedback", {"diagnosis": failure.diagnosis})
    # Quoted model output (and the example) in fences it cannot close.
    fences = {
        "excerpt_fence": fence(failure.excerpt or ""),
        "example_fence": fence(context["example"] or ""),
    }
    return render("retry_feedback", context | fences)


def render_patch_feedback(failure: Failure, *, first: bool, patch: Patch) -> str:
    """The correction message of a field-level re-ask: the error, the parts asked for again
    (with their current values), and the sub-schema their answer must match."""
    schema = json.dumps(patch.schema, ensure_ascii=False)
    example_value = example_for(patch.schema)
    example = None if example_value is None else json.dumps(example_value, ensure_ascii=False)
    parts = []
    for path, key in zip(patch.paths, patch.pointers, strict=True):
        found, current = value_at(patch.base, path)
        parts.append({"pointer": key, "current": brief(current, 60) if found else "missing"})
    return render(
        "patch_feedback",
        {
            "first": first,
            "diagnosis": failure.diagnosis,
            "parts": parts,
            "schema": schema,
            "schema_fence": fence(schema),
            "example": example,
            "example_fence": fence(example or ""),
        },
    )


def quote(text: str) -> str:
    """Bound model output before it goes back to the model (or into a record)."""
    limit = QUOTE_HEAD_CHARS + QUOTE_TAIL_CHARS
    if len(text) <= limit + 80:
        return text
    omitted = len(text) - limit
    marker = render("quote_cut", {"omitted": omitted})
    return f"{text[:QUOTE_HEAD_CHARS]}\n{marker}\n{text[-QUOTE_TAIL_CHARS:]}"
