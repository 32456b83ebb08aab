"""The contract an answer must meet, compiled once from a job spec.

contract = build_contract(spec)         # raises InvalidInput naming the field
contract.output_schema, contract.example, contract.validators
contract.grounding(value)               # the evidence grounded validators found for a value
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from functools import lru_cache
from typing import Any, Final

from app.core.answer import validators as validator_kinds
from app.core.answer.feedback import RETRY_PROMPT_KEYS
from app.core.answer.grounding import Grounded
from app.core.answer.validators import Hooks, Validator
from app.core.schema.example import example_for
from app.core.schema.signature import compile_signature
from app.core.schema.steps import TooMuchWork, steps_for, work_budget
from app.core.schema.validation import check_schema, fixed, schema_errors
from app.core.turn.templates import check_custom
from app.core.wire.envelope import GroundingSpan
from app.core.wire.errors import FieldErrors, InvalidInput
from app.core.wire.spec import JobSpec


@dataclass(frozen=True, slots=True)
class Contract:
    output_schema: dict[str, Any]
    input_schema: dict[str, Any] | None
    example: str | None  # compact JSON text of a valid instance, when one could be built
    validators: tuple[Validator, ...]

    def grounding(self, value: Any) -> tuple[GroundingSpan, ...]:
        """Where the input holds the values the grounded validators checked in ``value``
        (which they passed): one span per concrete path, in validator order."""
        spans: dict[str, GroundingSpan] = {}
        for validator in self.validators:
            if isinstance(validator, Grounded):
                for span in validator.spans(value):
                    spans.setdefault(span.path, span)
        return tuple(spans.values())


def _errors(data: Any, schema: dict[str, Any], *, field: str) -> list[str]:
    """The schema errors of data the client sent, within a work budget its size sets."""
    size = len(json.dumps(data, ensure_ascii=False, separators=(",", ":")))
    try:
        with work_budget(steps_for(size)):
            return schema_errors(data, schema, max_errors=5)
    except (TooMuchWork, RecursionError):
        raise InvalidInput(
            f"{field}: checking it against the schema needs more work than this service "
            "allows; simplify the schema (unions inside unions multiply the work)",
            field=field,
        ) from None


@dataclass(frozen=True, slots=True)
class _Shape:
    """What the signature or schema alone decides; shared between jobs, never mutated."""

    output_schema: dict[str, Any]
    input_schema: dict[str, Any] | None
    example: str | None


# Jobs of one service mostly repeat a few shapes: compiling a signature, checking a schema
# (a millisecond for a small one) and building the example are done once per distinct text.
_SHAPES_CACHED: Final = 256
_SHAPE_TEXT_CACHED: Final = 64 * 1024  # longer sources are compiled every time, not kept


def build_contract(
    spec: JobSpec, extra_validators: Sequence[Validator] = (), hooks: Hooks | None = None
) -> Contract:
    """The job's contract; ``InvalidInput`` names a bad field (``InvalidFields``: several).

    The signature is compiled or the schema checked, then what depends on it: the input,
    the fallback, the retry prompt, the validators.
    """
    errors = FieldErrors()
    contract = compile_contract(spec, errors, extra_validators, hooks)
    errors.raise_any()
    assert contract is not None  # no errors: built
    return contract


def compile_contract(
    spec: JobSpec,
    errors: FieldErrors,
    extra_validators: Sequence[Validator] = (),
    hooks: Hooks | None = None,
) -> Contract | None:
    """``build_contract`` that adds each field's error to ``errors``; None when it has any.

    A field ``errors`` holds already (e.g. over a size cap) is not read again: checking it
    could take unbounded work.
    """
    shape = None
    if ("signature" if spec.signature is not None else "schema") not in errors:
        with errors:
            shape = _job_shape(spec)
    if shape is not None:
        _check_data(spec, shape, errors)
    if spec.retry_prompt is not None:
        with errors:
            check_custom(spec.retry_prompt, field="retryPrompt", keys=RETRY_PROMPT_KEYS)
    built: list[Validator] = []
    for i, validator in enumerate(spec.validators):
        with errors:
            built.append(validator_kinds.build(validator, i, hooks, spec.input))
    if shape is None or errors:
        return None
    return Contract(
        output_schema=shape.output_schema,
        input_schema=shape.input_schema,
        example=shape.example,
        validators=(*built, *extra_validators),
    )


def _job_shape(spec: JobSpec) -> _Shape:
    if spec.signature is not None:
        return _shape("signature", spec.signature, spec.include_example)
    assert spec.schema_ is not None  # JobSpec guarantees one of the two
    text = json.dumps(spec.schema_, ensure_ascii=False, separators=(",", ":"))
    return _shape("schema", text, spec.include_example)


def _check_data(spec: JobSpec, shape: _Shape, errors: FieldErrors) -> None:
    """The job's input and fallback data against the schemas they must match."""
    if shape.input_schema is not None and spec.input is not None and "input" not in errors:
        with errors:
            problems = _errors(spec.input, shape.input_schema, field="input")
            if problems:
                raise InvalidInput(
                    "input does not match the signature's input part: " + "; ".join(problems),
                    field="input",
                )
    if spec.fallback is not None and "fallback.data" not in errors:
        with errors:
            problems = _errors(spec.fallback.data, shape.output_schema, field="fallback.data")
            if problems:
                raise InvalidInput(
                    "fallback.data does not match the output schema: " + "; ".join(problems),
                    field="fallback.data",
                )


def _shape(kind: str, text: str, include_example: bool) -> _Shape:
    if len(text) > _SHAPE_TEXT_CACHED:
        return _compile_shape(kind, text, include_example)
    return _cached_shape(kind, text, include_example)


def _compile_shape(kind: str, text: str, include_example: bool) -> _Shape:
    """Raises InvalidInput (not cached: a bad source is compiled again, and refused again)."""
    input_schema: dict[str, Any] | None = None
    if kind == "signature":
        signature = compile_signature(text)
        output_schema, input_schema = signature.output_schema, signature.input_schema
    else:
        output_schema = json.loads(text)  # a private copy: the job's own dict is never kept
        check_schema(output_schema)
    example = example_for(output_schema) if include_example else None
    return _Shape(
        output_schema=output_schema,
        input_schema=input_schema,
        example=None if example is None else json.dumps(example, ensure_ascii=False),
    )


@lru_cache(maxsize=_SHAPES_CACHED)
def _cached_shape(kind: str, text: str, include_example: bool) -> _Shape:
    shape = _compile_shape(kind, text, include_example)
    fixed(shape.output_schema)  # shared by every job of this shape, changed by none
    return shape
