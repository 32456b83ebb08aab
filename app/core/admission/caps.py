"""Caps on a job's dimensions: the sizes and depths a service lets a client ask for.

    check_data(spec.input, caps, field="input")              # 422 naming the field
    check_output_schema(tool.parameters, caps, field="tools[0].parameters")
    check_signature_schema(spec.signature, contract.output_schema, caps)  # kept per text

``Caps`` is what ``app.settings.Settings`` has (``REPROMPT_MAX_*``); JobSpec's own bounds
still apply underneath them.
"""

from __future__ import annotations

from typing import Any, Final, Protocol

from app.core.wire.base import compact_json
from app.core.wire.errors import FieldErrors, InvalidInput
from app.core.wire.spec import JobSpec


class Caps(Protocol):
    """The service's caps on a job (``Settings`` is one)."""

    @property
    def max_task_chars(self) -> int: ...
    @property
    def max_turns(self) -> int: ...
    @property
    def max_return_retries(self) -> int: ...
    @property
    def max_candidates(self) -> int: ...
    @property
    def max_deadline_ms(self) -> int: ...
    @property
    def max_output_tokens(self) -> int: ...
    @property
    def max_input_bytes(self) -> int: ...
    @property
    def max_input_depth(self) -> int: ...
    @property
    def max_tool_output_bytes(self) -> int: ...
    @property
    def max_schema_bytes(self) -> int: ...
    @property
    def max_schema_depth(self) -> int: ...
    @property
    def max_images(self) -> int: ...
    @property
    def max_image_bytes(self) -> int: ...
    @property
    def max_images_bytes(self) -> int: ...


def check_caps(spec: JobSpec, caps: Caps, errors: FieldErrors) -> None:
    """The caps that need no compiled contract; each field's error goes to ``errors``."""
    budget = spec.budget
    counts: list[tuple[str, int, int, str]] = [
        ("task", len(spec.task), caps.max_task_chars, "characters"),
        ("budget.maxTurns", budget.max_turns, caps.max_turns, ""),
        ("budget.returnRetries", budget.return_retries, caps.max_return_retries, ""),
    ]
    if spec.candidates is not None:
        counts.append(("candidates.n", spec.candidates.n, caps.max_candidates, ""))
    if budget.deadline_ms is not None:
        counts.append(("budget.deadlineMs", budget.deadline_ms, caps.max_deadline_ms, ""))
    counts.append(("maxOutputTokens", spec.max_output_tokens, caps.max_output_tokens, ""))
    if spec.max_output_tokens_cap is not None:
        cap = caps.max_output_tokens
        counts.append(("maxOutputTokensCap", spec.max_output_tokens_cap, cap, ""))
    if spec.tool_timeout_ms is not None:
        counts.append(("toolTimeoutMs", spec.tool_timeout_ms, caps.max_deadline_ms, "ms"))
    for field, value, cap, unit in counts:
        with errors:
            at_most(field, value, cap, unit)
    if spec.input is not None:
        with errors:
            check_data(spec.input, caps, field="input")
    if spec.fallback is not None:
        with errors:
            check_data(spec.fallback.data, caps, field="fallback.data")
    if spec.schema_ is not None:
        with errors:
            check_output_schema(spec.schema_, caps, field="schema")


def check_data(value: Any, caps: Caps, *, field: str, cap: str = "input") -> None:
    """Depth, then compact JSON bytes, of data a client sends along.

    ``input``, ``fallback.data``, or a tool's output (``cap="tool"``). Depth first: the
    size is measured with a recursive encoder.
    """
    at_most(field, depth(value), caps.max_input_depth, "levels", what=f"{field} depth")
    size = len(compact_json(value).encode())
    limit = caps.max_tool_output_bytes if cap == "tool" else caps.max_input_bytes
    at_most(field, size, limit, "bytes of JSON", what=f"{field} size")


def check_output_schema(schema: Any, caps: Caps, *, field: str) -> None:
    """Size (compact JSON bytes) and nesting depth of a schema, given or compiled."""
    _check_schema_measures(field, _measure(schema), caps)


def check_signature_schema(signature: str, schema: Any, caps: Caps) -> None:
    """``check_output_schema`` of the schema compiled from ``signature``, named ``signature``.

    Its measures are kept by the signature's text: jobs mostly repeat a few signatures.
    """
    measures = _SIGNATURE_MEASURES.get(signature)
    if measures is None:
        measures = _measure(schema)
        if len(signature) <= _SIGNATURE_TEXT_KEPT:
            if len(_SIGNATURE_MEASURES) >= _SIGNATURES_KEPT:
                del _SIGNATURE_MEASURES[next(iter(_SIGNATURE_MEASURES))]
            _SIGNATURE_MEASURES[signature] = measures
    _check_schema_measures("signature", measures, caps)


# Signature text → (bytes, depth) of its compiled schema, oldest first (what
# app.core.answer.contract keeps compiled, kept as long: 256 texts up to 64 KiB).
_SIGNATURE_MEASURES: dict[str, tuple[int, int]] = {}
_SIGNATURES_KEPT: Final = 256
_SIGNATURE_TEXT_KEPT: Final = 64 * 1024


def _measure(schema: Any) -> tuple[int, int]:
    size = len(compact_json(schema).encode())
    return size, depth(schema)


def _check_schema_measures(field: str, measures: tuple[int, int], caps: Caps) -> None:
    size, levels = measures
    at_most(field, size, caps.max_schema_bytes, "bytes of JSON", what="schema size")
    at_most(field, levels, caps.max_schema_depth, "levels", what="schema depth")


def depth(value: Any) -> int:
    """Nesting depth of a JSON value: a scalar is 0, ``{}`` and ``[]`` are 1."""
    # Level by level (no recursion, however deep): the containers of one level hold the
    # next level's values.
    deepest = 0
    level: list[Any] = [value]
    while level:
        below: list[Any] = []
        containers = False
        for node in level:
            if isinstance(node, dict):
                containers = True
                below.extend(node.values())
            elif isinstance(node, list):
                containers = True
                below.extend(node)
        if not containers:
            break
        deepest += 1
        level = below
    return deepest


def at_most(field: str, value: int, cap: int, unit: str = "", *, what: str = "") -> None:
    if value > cap:
        label = what or field
        unit = f" {unit}" if unit else ""
        raise InvalidInput(
            f"{label} is {value}{unit}; this service allows at most {cap}", field=field
        )
