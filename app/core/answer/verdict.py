"""What one model answer means for the job: a typed verdict, decided here, acted on by the loop.

    verdict = await classify(response, contract=contract, spec=spec, prompt_text=text,
                             tools_offered=True, max_output_tokens=1024, validate=check)
    match verdict:
        case Accepted(value=value): ...
        case Rejected(failure=failure): ...

The order matters and follows spec 000/004: a refusal, then tool work, then the answer's
size and text (an answer longer than the output limit allows, or one that is not valid
Unicode, is rejected before anything parses it), then truncation (whose complete part may
still be used), then an explicit fail, then parsing and the schema, then the semantic
validators.

The check of an answer is bounded (``app.core.answer.check``); a long answer is checked in a
worker thread (``THREAD_ABOVE_CHARS``), so a busy check never stalls the event loop that
runs the worker's heartbeats and its other jobs.
"""

from __future__ import annotations

import asyncio
import json
import re
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, replace
from typing import Any, Final

from app.core.answer.check import Checked, check_answer
from app.core.answer.contract import Contract
from app.core.answer.feedback import (
    Failure,
    failure_bad_text,
    failure_from_check,
    failure_from_validator,
    failure_too_complex,
    failure_too_large,
    failure_tools_unavailable,
    failure_truncated,
)
from app.core.schema.steps import TooMuchWork, steps_for, work_budget
from app.core.schema.validation import compiled
from app.core.text.unicode import described, scrub, surrogate_at
from app.core.turn.model import LLMResponse, ToolCall
from app.core.wire.envelope import GroundingSpan
from app.core.wire.spec import JobSpec

# The reserved shape a model uses to give up (told to it in prompts/explicit_fail.mustache).
# Linear: the two alternatives of the repeated group never match the same character.
_FAIL: Final = re.compile(r'\{\s*"\$fail"\s*:\s*"((?:[^"\\]|\\.)*)"\s*\}')
_FENCE: Final = "```"
# An answer may be this many characters per output token the request allowed, and never
# more than MAX_ANSWER_CHARS: past that it is rejected unread (tokens are 3-4 characters of
# text on average; 16 leaves room for any tokenizer and any script).
ANSWER_CHARS_PER_TOKEN: Final = 16
MAX_ANSWER_CHARS: Final = 524_288
# Answers longer than this are checked in a thread; shorter ones take a few ms at most.
THREAD_ABOVE_CHARS: Final = 8_192
_SALVAGED: Final = (
    "extract: the answer was cut off at the output limit; "
    "used the complete JSON value written before the cut"
)


@dataclass(frozen=True, slots=True)
class Accepted:
    value: Any
    warnings: tuple[str, ...]
    grounding: tuple[GroundingSpan, ...] = ()  # the evidence grounded validators found
    confidence: float | None = None  # from the answer's token log-probabilities, if any


@dataclass(frozen=True, slots=True)
class Rejected:
    failure: Failure
    # The rejected value when the answer parsed (it failed the schema or a validator): what
    # a field-level re-ask patches.
    value: Any = None
    parsed: bool = False


@dataclass(frozen=True, slots=True)
class Work:
    calls: tuple[ToolCall, ...]


@dataclass(frozen=True, slots=True)
class Refused:
    reason: str


@dataclass(frozen=True, slots=True)
class GaveUp:
    """The model answered with an explicit fail: ``{"$fail": "<reason>"}``."""

    reason: str


Verdict = Accepted | Rejected | Work | Refused | GaveUp
# A semantic check of a schema-valid value: None when it passes, else the diagnosis.
Validate = Callable[[Any], Awaitable[str | None]]
# A repair of a schema-valid value before the checks: the value (repaired or not) and a
# warning for each repair. Kept only when the repaired value still fits the schema.
Repair = Callable[[Any], tuple[Any, tuple[str, ...]]]


async def classify(
    response: LLMResponse,
    *,
    contract: Contract,
    spec: JobSpec,
    prompt_text: str,
    tools_offered: bool,
    max_output_tokens: int,
    validate: Validate,
    repair: Repair | None = None,
) -> Verdict:
    content = response.content or ""
    if response.finish_reason in ("refusal", "content_filter"):
        reason = response.refusal or f"the provider stopped with {response.finish_reason}"
        return Refused(scrub(reason))
    if response.tool_calls and not content.strip():
        if not tools_offered:
            return Rejected(failure_tools_unavailable())
        return Work(tuple(_clean_call(call) for call in response.tool_calls))
    unreadable = _unreadable(content, max_output_tokens)
    if unreadable is not None:
        return Rejected(unreadable)
    schema = contract.output_schema
    if response.finish_reason == "length":
        # A rambling model may have written a whole answer before the cut; never one
        # copied from the prompt, and never in strict mode.
        salvaged = None if spec.strict else await _salvaged(content, contract, prompt_text)
        if salvaged is not None:
            value, repairs = _repaired(repair, salvaged.value, schema, content)
            if await _passes(validate, value, content):
                warnings = (*salvaged.warnings, _SALVAGED, *repairs)
                return Accepted(value, warnings, contract.grounding(value))
        return Rejected(failure_truncated(max_output_tokens))
    fail = _FAIL.fullmatch(unfenced(content))
    if fail is not None:
        return GaveUp(_unescape(fail.group(1))[:500] or "the model gave no reason")
    checked = await _check(content, schema, strict=spec.strict, prompt=prompt_text)
    if not checked.ok:
        parsed = checked.kind == "schema"
        return Rejected(
            failure_from_check(checked), value=checked.value if parsed else None, parsed=parsed
        )
    value, repairs = _repaired(repair, checked.value, schema, content)
    try:
        problem = await _validated(validate, value, content)
    except TooMuchWork as exc:
        return Rejected(failure_too_complex(f"the checks needed more than {exc.limit} steps"))
    if problem is not None:
        return Rejected(failure_from_validator(problem), value=value, parsed=True)
    return Accepted(value, (*checked.warnings, *repairs), contract.grounding(value))


def answer_limit(max_output_tokens: int) -> int:
    """The longest answer, in characters, a request with this output limit may get."""
    return min(max_output_tokens * ANSWER_CHARS_PER_TOKEN, MAX_ANSWER_CHARS)


def _unreadable(content: str, max_output_tokens: int) -> Failure | None:
    """Too long to have been written within the output limit, or not valid Unicode."""
    limit = answer_limit(max_output_tokens)
    if len(content) > limit:
        return failure_too_large(len(content), limit)
    at = surrogate_at(content)
    if at is not None:
        return failure_bad_text(described(content, at))
    return None


async def _salvaged(content: str, contract: Contract, prompt_text: str) -> Checked | None:
    """The complete JSON value a cut-off answer holds, if it fits the schema."""
    salvaged = await _check(content, contract.output_schema, prompt=prompt_text, allow_echo=False)
    return salvaged if salvaged.ok else None


async def _check(content: str, schema: Mapping[str, Any], **options: Any) -> Checked:
    if len(content) <= THREAD_ABOVE_CHARS:
        return check_answer(content, schema, **options)
    return await asyncio.to_thread(check_answer, content, schema, **options)


def _repaired(
    repair: Repair | None, value: Any, schema: Mapping[str, Any], content: str
) -> tuple[Any, tuple[str, ...]]:
    """``value`` repaired, with its warnings, when the repair fits the schema; else as it was."""
    if repair is None:
        return value, ()
    try:
        with work_budget(steps_for(len(content))):
            repaired, warnings = repair(value)
            if not warnings or not compiled(schema).is_valid(repaired):
                return value, ()
    except TooMuchWork:
        return value, ()
    return repaired, warnings


async def _validated(validate: Validate, value: Any, content: str) -> str | None:
    """The semantic checks, under the same kind of work budget as the schema check."""
    with work_budget(steps_for(len(content))):
        return await validate(value)


async def _passes(validate: Validate, value: Any, content: str) -> bool:
    try:
        return await _validated(validate, value, content) is None
    except TooMuchWork:
        return False


def _clean_call(call: ToolCall) -> ToolCall:
    return replace(call, id=scrub(call.id), name=scrub(call.name), arguments=scrub(call.arguments))


def unfenced(text: str) -> str:
    """The answer without surrounding whitespace and one Markdown code fence, if any.

    String operations, not a regex: a lazy pattern over the whole answer was cubic on an
    unclosed fence followed by many newlines.
    """
    stripped = text.strip()
    if len(stripped) < 2 * len(_FENCE) or not (
        stripped.startswith(_FENCE) and stripped.endswith(_FENCE)
    ):
        return stripped
    inner = stripped[len(_FENCE) : -len(_FENCE)]
    language = 0
    while language < len(inner) and inner[language].isascii() and inner[language].isalpha():
        language += 1
    return inner[language:].strip()


def _unescape(text: str) -> str:
    try:
        return scrub(str(json.loads(f'"{text}"')))  # "\ud800" decodes to a lone surrogate
    except json.JSONDecodeError:
        return text
