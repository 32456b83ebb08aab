"""What one model answer means for the job: a typed verdict, decided here, acted on by the loop.

    verdict = await classify(response, contract=contract, spec=spec, prompt_text=text,
                             tools_offered=True, max_output_tokens=1024, validate=check)
    match verdict:
        case Accepted(value=value): ...
        case Rejected(failure=failure): ...

The order matters and follows spec 000/004: a refusal, then tool work, then truncation
(whose complete part may still be used), then an explicit fail, then parsing and the
schema, then the semantic validators.
"""

from __future__ import annotations

import json
import re
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any, Final

from app.core.answer import check_answer
from app.core.contract import Contract
from app.core.feedback import (
    Failure,
    failure_from_check,
    failure_from_validator,
    failure_tools_unavailable,
    failure_truncated,
)
from app.core.model import LLMResponse, ToolCall
from app.core.spec import JobSpec

# The reserved shape a model uses to give up (told to it in prompts/explicit_fail.mustache).
# Linear: the two alternatives of the repeated group never match the same character.
_FAIL: Final = re.compile(r'\{\s*"\$fail"\s*:\s*"((?:[^"\\]|\\.)*)"\s*\}')
_FENCE: Final = "```"
_SALVAGED: Final = (
    "extract: the answer was cut off at the output limit; "
    "used the complete JSON value written before the cut"
)


@dataclass(frozen=True, slots=True)
class Accepted:
    value: Any
    warnings: tuple[str, ...]


@dataclass(frozen=True, slots=True)
class Rejected:
    failure: Failure


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


async def classify(
    response: LLMResponse,
    *,
    contract: Contract,
    spec: JobSpec,
    prompt_text: str,
    tools_offered: bool,
    max_output_tokens: int,
    validate: Validate,
) -> Verdict:
    content = response.content or ""
    if response.finish_reason in ("refusal", "content_filter"):
        return Refused(response.refusal or f"the provider stopped with {response.finish_reason}")
    if response.tool_calls and not content.strip():
        return Work(response.tool_calls) if tools_offered else Rejected(failure_tools_unavailable())
    schema = contract.output_schema
    if response.finish_reason == "length":
        # A rambling model may have written a whole answer before the cut; never one
        # copied from the prompt, and never in strict mode.
        if not spec.strict:
            salvaged = check_answer(content, schema, prompt=prompt_text, allow_echo=False)
            if salvaged.ok and await validate(salvaged.value) is None:
                return Accepted(salvaged.value, (*salvaged.warnings, _SALVAGED))
        return Rejected(failure_truncated(max_output_tokens))
    fail = _FAIL.fullmatch(unfenced(content))
    if fail is not None:
        return GaveUp(_unescape(fail.group(1))[:500] or "the model gave no reason")
    checked = check_answer(content, schema, strict=spec.strict, prompt=prompt_text)
    if not checked.ok:
        return Rejected(failure_from_check(checked))
    problem = await validate(checked.value)
    if problem is not None:
        return Rejected(failure_from_validator(problem))
    return Accepted(checked.value, checked.warnings)


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
        return str(json.loads(f'"{text}"'))
    except json.JSONDecodeError:
        return text
