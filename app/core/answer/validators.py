"""Semantic validators (spec 002): black boxes that return ``(ok, diagnosis)``.

The diagnosis becomes the correction message the model sees. Any callable fits::

    def total_matches(value) -> tuple[bool, str | None]:
        ok = sum(line["amount"] for line in value["lines"]) == value["total"]
        return ok, None if ok else "total must equal the sum of the lines"

Jobs submitted over HTTP use the declarative kinds built here from ``ValidatorSpec``.
Two kinds call out and need ``Hooks`` from whoever runs the job: ``webhook`` (the worker
POSTs the candidate to the client's URL) and ``judge`` (a configured model grades it);
either raises ``ValidatorUnavailable`` when it cannot give a verdict.
"""

from __future__ import annotations

import inspect
import json
import math
import operator
from collections import Counter
from collections.abc import Awaitable, Callable, Sequence
from typing import Any, Protocol

from app.core.answer import grounding
from app.core.answer.finding import Finding
from app.core.schema import jsonpath
from app.core.schema.pattern import Pattern, PatternError, compile_pattern
from app.core.schema.steps import charge
from app.core.wire.errors import InvalidInput, ValidatorUnavailable
from app.core.wire.spec import ValidatorSpec

Validator = Callable[[Any], Awaitable[Finding] | Finding]

_OPS: dict[str, Callable[[Any, Any], bool]] = {
    "==": operator.eq,
    "!=": operator.ne,
    "<": operator.lt,
    "<=": operator.le,
    ">": operator.gt,
    ">=": operator.ge,
}


class Hooks(Protocol):
    """The validators that call out, provided by whoever runs the job."""

    async def webhook(self, spec: ValidatorSpec, value: Any) -> Finding:
        """POST the candidate to ``spec.url``; ``(ok, diagnosis)`` from the answer."""
        ...

    async def judge(self, spec: ValidatorSpec, value: Any) -> Finding:
        """Have ``spec.model`` grade the candidate against ``spec.rubric``."""
        ...


async def first_failure(validators: Sequence[Validator], value: Any) -> str | None:
    """Run validators in order; the first diagnosis wins, ``None`` when all pass."""
    failed = await first_failing(validators, value)
    return None if failed is None else failed[1]


async def first_failing(validators: Sequence[Validator], value: Any) -> tuple[int, str] | None:
    """The index of the first validator that fails, and its diagnosis; ``None`` when all pass."""
    for index, validator in enumerate(validators):
        result = validator(value)
        ok, diagnosis = await result if inspect.isawaitable(result) else result
        if not ok:
            return index, diagnosis or "the answer failed a validation check"
    return None


def read_paths(spec: ValidatorSpec, value: Any) -> tuple[tuple[str | int, ...], ...] | None:
    """The paths of ``value`` a declarative check read: what a field-level re-ask asks for.

    ``None`` when the check reads no paths (a webhook, a judge) or its paths reach nothing
    that could be named.
    """
    if spec.kind == "sum":
        wanted = [spec.items, spec.equals]
    elif spec.kind == "compare":
        wanted = [spec.left, spec.right if (spec.right or "").startswith("$") else None]
    elif spec.kind == "grounded":
        wanted = list(spec.paths or [])
    elif spec.kind in ("unique", "regex", "nonempty"):
        wanted = [spec.path]
    else:
        return None
    found: dict[tuple[str | int, ...], None] = {}
    for text in wanted:
        if text is None:
            continue
        steps = jsonpath.parse(text)
        located = jsonpath.locate(value, steps)
        if located:
            found.update((at, None) for at, _ in located)
        elif all(isinstance(s, str) or (isinstance(s, int) and s >= 0) for s in steps):
            found[tuple(s for s in steps if s is not None)] = None  # missing: a new field
        else:
            return None
    return tuple(found) or None


def build(
    spec: ValidatorSpec, index: int, hooks: Hooks | None = None, job_input: Any = None
) -> Validator:
    """A validator from its declarative spec; a malformed spec names its field.

    Without ``hooks`` (the API checking a job at submit) a calling-out kind is checked and
    built, but cannot run: it raises ``ValidatorUnavailable``. ``job_input`` is the job's
    ``input``: where a ``grounded`` check looks for the values.
    """
    where = f"validators[{index}]"
    if spec.kind == "grounded":
        return grounding.build(spec, where, job_input)
    if spec.kind in _CALLING_OUT:
        return _CALLING_OUT[spec.kind](spec, where, hooks)
    return _BUILDERS[spec.kind](spec, where)


def _need(spec: ValidatorSpec, where: str, name: str) -> str:
    """Field ``name`` of the spec, which its kind requires; a path there must parse."""
    value = getattr(spec, name)
    if value is None:
        raise InvalidInput(f"{where}.{name}: required for kind {spec.kind!r}", field=where)
    jsonpath_field = f"{where}.{name}"
    if name in {"path", "items", "equals", "left"} or (
        name == "right" and str(value).startswith("$")
    ):
        jsonpath.parse(str(value), field=jsonpath_field)
    return str(value)


def _explain(spec: ValidatorSpec, detail: str) -> str:
    """The diagnosis: the spec's own message, when it has one, with the detail after it."""
    return f"{spec.message} ({detail})" if spec.message else detail


def _build_sum(spec: ValidatorSpec, where: str) -> Validator:
    items, equals = _need(spec, where, "items"), _need(spec, where, "equals")
    tol = float(spec.tolerance)

    def check_sum(value: Any) -> Finding:
        numbers = [v for v in jsonpath.select(value, items) if _is_number(v)]
        targets = [v for v in jsonpath.select(value, equals) if _is_number(v)]
        if len(targets) != 1:
            return False, _explain(spec, f"{equals} must be a single number")
        total = math.fsum(numbers)
        if abs(total - targets[0]) <= tol:
            return True, None
        return False, _explain(
            spec, f"{equals} is {_show(targets[0])} but the sum of {items} is {_show(total)}"
        )

    return check_sum


def _build_unique(spec: ValidatorSpec, where: str) -> Validator:
    path = _need(spec, where, "path")

    def check_unique(value: Any) -> Finding:
        counts = Counter(json.dumps(v, sort_keys=True) for v in jsonpath.select(value, path))
        dupes = [f"{k} ({n} times)" for k, n in counts.items() if n > 1]
        if not dupes:
            return True, None
        return False, _explain(spec, f"{path} must be unique; repeated: {', '.join(dupes[:5])}")

    return check_unique


def _build_compare(spec: ValidatorSpec, where: str) -> Validator:
    left, right = _need(spec, where, "left"), _need(spec, where, "right")
    if spec.op is None:
        raise InvalidInput(f"{where}.op: required for kind 'compare'", field=where)
    op_name = spec.op
    compare = _OPS[op_name]
    right_literal = None if right.startswith("$") else _literal(right, f"{where}.right")

    def check_compare(value: Any) -> Finding:
        lefts = jsonpath.select(value, left)
        rights = jsonpath.select(value, right) if right_literal is None else [right_literal[0]]
        if len(lefts) != 1 or len(rights) != 1:
            return False, _explain(spec, f"{left} and {right} must each name one value")
        try:
            ok = compare(lefts[0], rights[0])
        except TypeError:
            ok = False
        if ok:
            return True, None
        return False, _explain(
            spec,
            f"expected {left} {op_name} {right}, but {left} is {_show(lefts[0])}"
            + ("" if right_literal is not None else f" and {right} is {_show(rights[0])}"),
        )

    return check_compare


def _build_regex(spec: ValidatorSpec, where: str) -> Validator:
    path, pattern_text = _need(spec, where, "path"), _need(spec, where, "pattern")
    try:
        pattern = compile_pattern(pattern_text)
    except PatternError as exc:
        # Named like a schema pattern: the same engine, the same refusals (app.core.schema.pattern).
        raise InvalidInput(f"{where}.pattern: {exc}", field=where) from None

    def check_regex(value: Any) -> Finding:
        bad = [v for v in jsonpath.select(value, path) if not _matches(pattern, v)]
        if not bad:
            return True, None
        return False, _explain(spec, f"{path}: {_show(bad[0])} does not match /{pattern_text}/")

    return check_regex


def _build_nonempty(spec: ValidatorSpec, where: str) -> Validator:
    path = _need(spec, where, "path")

    def check_nonempty(value: Any) -> Finding:
        found = jsonpath.select(value, path)
        if found and all(v not in (None, "", [], {}) for v in found):
            return True, None
        return False, _explain(spec, f"{path} must not be empty")

    return check_nonempty


# kind → builder, given the spec and where it sits in the job (``validators[i]``) for errors
_BUILDERS: dict[str, Callable[[ValidatorSpec, str], Validator]] = {
    "sum": _build_sum,
    "unique": _build_unique,
    "compare": _build_compare,
    "regex": _build_regex,
    "nonempty": _build_nonempty,
}


def _build_webhook(spec: ValidatorSpec, where: str, hooks: Hooks | None) -> Validator:
    _need(spec, where, "url")

    async def check_webhook(value: Any) -> Finding:
        if hooks is None:
            raise ValidatorUnavailable("webhook validators run only in a worker")
        return await hooks.webhook(spec, value)

    return check_webhook


def _build_judge(spec: ValidatorSpec, where: str, hooks: Hooks | None) -> Validator:
    _need(spec, where, "model")
    _need(spec, where, "rubric")

    async def check_judge(value: Any) -> Finding:
        if hooks is None:
            raise ValidatorUnavailable("judge validators run only in a worker")
        return await hooks.judge(spec, value)

    return check_judge


_CALLING_OUT: dict[str, Callable[[ValidatorSpec, str, Hooks | None], Validator]] = {
    "webhook": _build_webhook,
    "judge": _build_judge,
}


def _is_number(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


def _matches(pattern: Pattern, value: Any) -> bool:
    if not isinstance(value, str):
        return False
    charge(pattern.cost(value))
    return pattern.search(value)


def _literal(text: str, field: str) -> tuple[Any]:
    try:
        return (json.loads(text),)
    except json.JSONDecodeError as exc:
        raise InvalidInput(f"{field}: neither a $-path nor a JSON literal", field=field) from exc


def _show(value: Any) -> str:
    text = json.dumps(value, ensure_ascii=False)
    return text if len(text) <= 60 else text[:57] + "..."
