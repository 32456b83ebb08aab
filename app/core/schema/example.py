"""A small, valid example instance of a JSON Schema, to show a model the expected shape.

::

    example_for({"type": "object", "properties": {"qty": {"type": "integer", "minimum": 1}},
                 "required": ["qty"]})
    # {'qty': 1}

Required fields are always filled; optional ones only when an object would
otherwise be empty. Placeholders are short and plain: ``"text"``, 0 (or the
minimum), ``true``, one array item, the first ``enum`` value, a sample for
each well-known ``format``. The result is checked against the schema; when no
valid instance can be built (an unsupported ``pattern``, contradictory
constraints, a required recursion) the answer is None. A schema whose only
instance is ``null`` therefore also gets None.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from app.core.schema.pattern import PatternError, compile_pattern
from app.core.schema.steps import TooMuchWork, work_budget
from app.core.schema.validation import Schema, Scope

_MAX_DEPTH = 12
_MAX_STEPS = 5000
# All the schema checks of one example share this work budget (see app.core.schema.validation).
_MAX_CHECK_STEPS = 10_000
_FAIL: Any = object()

FORMAT_SAMPLES: dict[str, str] = {
    "date": "2024-01-31",
    "date-time": "2024-01-31T12:00:00Z",
    "time": "12:00:00Z",
    "duration": "P1D",
    "email": "user@example.com",
    "idn-email": "user@example.com",
    "hostname": "example.com",
    "idn-hostname": "example.com",
    "ipv4": "192.0.2.1",
    "ipv6": "2001:db8::1",
    "uri": "https://example.com",
    "uri-reference": "https://example.com",
    "iri": "https://example.com",
    "iri-reference": "https://example.com",
    "uuid": "123e4567-e89b-12d3-a456-426614174000",
    "json-pointer": "/text",
    "regex": "^text$",
}
# Tried in order against a pattern; a pattern none of them fits makes the example fail.
_PATTERN_SAMPLES = (
    "text",
    "abc",
    "ABC",
    "Text",
    "123",
    "a1",
    "A1",
    "ABC-123",
    "abc_123",
    "x",
    "X",
    "0",
    "2024-01-31",
    "user@example.com",
    "https://example.com",
    "+15555550100",
    "USD",
)


def example_for(schema: Mapping[str, Any]) -> Any | None:
    """A small instance that validates against ``schema``, or None when none can be built."""
    try:
        with work_budget(_MAX_CHECK_STEPS):
            compiled = Schema(schema)
            value = _Builder(compiled).build((compiled.root,), frozenset(), 0, 0)
            if value is _FAIL or not compiled.is_valid(value):
                return None
    except (RecursionError, ValueError, TypeError, LookupError, PatternError, TooMuchWork):
        return None
    return value


@dataclass
class _Shape:
    """The constraints of several subschemas that all apply to one value, merged."""

    types: list[str] | None = None
    const: list[Any] = field(default_factory=list)
    enum: list[Any] | None = None
    unions: list[tuple[int, list[Scope]]] = field(default_factory=list)
    properties: dict[str, list[Scope]] = field(default_factory=dict)
    required: list[str] = field(default_factory=list)
    pattern_properties: list[tuple[str, Scope]] = field(default_factory=list)
    additional: list[Scope] = field(default_factory=list)
    dependent_required: dict[str, list[str]] = field(default_factory=dict)
    prefix: list[list[Scope]] = field(default_factory=list)
    items: list[Scope] = field(default_factory=list)
    contains: list[Scope] = field(default_factory=list)
    numbers: dict[str, float] = field(default_factory=dict)
    multiple_of: float | None = None
    patterns: list[str] = field(default_factory=list)
    format: str | None = None
    keywords: set[str] = field(default_factory=set)
    impossible: bool = False


class _Builder:
    def __init__(self, schema: Schema) -> None:
        self.schema = schema
        self.steps = 0

    def build(
        self, scopes: tuple[Scope, ...], decided: frozenset[int], depth: int, variant: int
    ) -> Any:
        """An instance of every scope at once; ``decided`` lists the unions already chosen."""
        self.steps += 1
        if depth > _MAX_DEPTH or self.steps > _MAX_STEPS:
            return _FAIL
        shape = _collect(scopes, decided)
        if shape.impossible:
            return _FAIL
        if shape.const:
            return shape.const[0]
        if shape.unions:
            key, branches = shape.unions[0]
            for branch in branches:
                trial = (*scopes, branch)
                value = self.build(trial, decided | {key}, depth + 1, variant)
                if value is not _FAIL and all(self.schema.is_valid(value, s) for s in trial):
                    return value
            return _FAIL
        if shape.enum is not None:
            fitting = [v for v in shape.enum if all(self.schema.is_valid(v, s) for s in scopes)]
            return fitting[variant % len(fitting)] if fitting else _FAIL
        for kind in _kinds(shape):
            value = self._build_kind(kind, shape, depth, variant)
            if value is not _FAIL:
                return value
        return _FAIL

    def _build_kind(self, kind: str, shape: _Shape, depth: int, variant: int) -> Any:
        if kind == "object":
            return self._object(shape, depth, variant)
        if kind == "array":
            return self._array(shape, depth, variant)
        if kind == "string":
            return _string(shape, variant)
        if kind in ("integer", "number"):
            return _number(shape, integer=kind == "integer", variant=variant)
        if kind == "boolean":
            return variant % 2 == 0
        return None  # "null"

    def _object(self, shape: _Shape, depth: int, variant: int) -> Any:
        names = list(shape.required)
        optional = [name for name in shape.properties if name not in names]
        if not names and optional:
            names.append(optional.pop(0))
        minimum = int(shape.numbers.get("minProperties", 0))
        while len(names) < minimum and optional:
            names.append(optional.pop(0))
        for name in list(names):  # dependentRequired may pull in more fields
            names.extend(
                need for need in shape.dependent_required.get(name, ()) if need not in names
            )
        serial = 1
        while len(names) < minimum:
            names.append(f"field{serial}")
            serial += 1
        result: dict[str, Any] = {}
        for name in names:
            subs = _property_scopes(shape, name)
            value = self.build(subs, frozenset(), depth + 1, variant) if subs else _plain(variant)
            if value is _FAIL:
                return _FAIL
            result[name] = value
        return result

    def _array(self, shape: _Shape, depth: int, variant: int) -> Any:
        low = int(shape.numbers.get("minItems", 0))
        high = shape.numbers.get("maxItems", math.inf)
        more_allowed = all(scope.node is not False for scope in shape.items)
        # One item shows the item shape; a tuple shows its positions and no more.
        shows_items = (bool(shape.items) and more_allowed) or bool(shape.contains)
        count = max(low, len(shape.prefix) or (1 if shows_items else 0))
        count = int(min(count, high))
        result: list[Any] = []
        for index in range(count):
            at = shape.prefix[index] if index < len(shape.prefix) else shape.items
            subs = tuple(at)
            if index == 0 and shape.contains:
                subs = (*subs, *shape.contains)
            # Positions of a tuple differ already; repeated items get varied placeholders.
            vary = index if index >= len(shape.prefix) or "uniqueItems" in shape.keywords else 0
            value = self.build(subs, frozenset(), depth + 1, vary) if subs else _plain(vary)
            if value is _FAIL:
                return _FAIL
            result.append(value)
        return result


def _collect(scopes: tuple[Scope, ...], decided: frozenset[int]) -> _Shape:
    shape = _Shape()
    for scope in (flat for outer in scopes for flat in outer.flatten()):
        node = scope.node
        if node is False:
            shape.impossible = True
            continue
        if not isinstance(node, Mapping):
            continue
        _collect_node(shape, scope, node, decided)
    return shape


def _collect_node(
    shape: _Shape, scope: Scope, node: Mapping[str, Any], decided: frozenset[int]
) -> None:
    shape.keywords.update(node)
    _collect_values(shape, scope, node, decided)
    _collect_object(shape, scope, node)
    _collect_array(shape, scope, node)
    _collect_bounds(shape, node)


def _collect_values(
    shape: _Shape, scope: Scope, node: Mapping[str, Any], decided: frozenset[int]
) -> None:
    """``type``, ``const``, ``enum``, and the ``anyOf``/``oneOf`` unions not yet decided."""
    declared = node.get("type")
    if declared is not None:
        kinds = [declared] if isinstance(declared, str) else list(declared)
        shape.types = kinds if shape.types is None else _intersect(shape.types, kinds)
    if "const" in node:
        shape.const.append(node["const"])
    if isinstance(node.get("enum"), list):
        values = node["enum"]
        shape.enum = values if shape.enum is None else [v for v in shape.enum if v in values]
    for keyword in ("anyOf", "oneOf"):
        branches = node.get(keyword)
        if isinstance(branches, list) and branches and id(branches) not in decided:
            shape.unions.append((id(branches), [scope.enter(b) for b in branches]))


def _collect_object(shape: _Shape, scope: Scope, node: Mapping[str, Any]) -> None:
    """The object keywords: properties, required fields, extra fields, dependencies."""
    for name, sub in _mapping(node.get("properties")).items():
        shape.properties.setdefault(name, []).append(scope.enter(sub))
    for name in node.get("required", ()) if isinstance(node.get("required"), list) else ():
        if name not in shape.required:
            shape.required.append(name)
    for pattern, sub in _mapping(node.get("patternProperties")).items():
        shape.pattern_properties.append((pattern, scope.enter(sub)))
    if "additionalProperties" in node:
        shape.additional.append(scope.enter(node["additionalProperties"]))
    for name, needs in _mapping(node.get("dependentRequired")).items():
        shape.dependent_required.setdefault(name, []).extend(needs)


def _collect_array(shape: _Shape, scope: Scope, node: Mapping[str, Any]) -> None:
    """The array keywords: ``prefixItems`` position by position, ``items``, ``contains``."""
    prefix = node.get("prefixItems")
    for index, sub in enumerate(prefix if isinstance(prefix, list) else []):
        while len(shape.prefix) <= index:
            shape.prefix.append([])
        shape.prefix[index].append(scope.enter(sub))
    if "items" in node:
        shape.items.append(scope.enter(node["items"]))
    if "contains" in node:
        shape.contains.append(scope.enter(node["contains"]))


def _collect_bounds(shape: _Shape, node: Mapping[str, Any]) -> None:
    """Numeric and size bounds (the tightest wins), ``multipleOf``, ``pattern``, ``format``."""
    for keyword in ("minimum", "exclusiveMinimum", "minLength", "minItems", "minProperties"):
        if isinstance(node.get(keyword), int | float) and not isinstance(node[keyword], bool):
            shape.numbers[keyword] = max(shape.numbers.get(keyword, -math.inf), node[keyword])
    for keyword in ("maximum", "exclusiveMaximum", "maxLength", "maxItems", "maxProperties"):
        if isinstance(node.get(keyword), int | float) and not isinstance(node[keyword], bool):
            shape.numbers[keyword] = min(shape.numbers.get(keyword, math.inf), node[keyword])
    if isinstance(node.get("multipleOf"), int | float) and shape.multiple_of is None:
        shape.multiple_of = node["multipleOf"]
    if isinstance(node.get("pattern"), str):
        shape.patterns.append(node["pattern"])
    if isinstance(node.get("format"), str) and shape.format is None:
        shape.format = node["format"]


def _intersect(kinds: list[str], others: list[str]) -> list[str]:
    """Types allowed by both lists; every integer is a number."""
    both: list[str] = []
    for kind in kinds:
        if kind in others:
            both.append(kind)
        elif kind == "number" and "integer" in others:
            both.append("integer")
        elif kind == "integer" and "number" in others:
            both.append(kind)
    return both


def _kinds(shape: _Shape) -> list[str]:
    """The JSON types to try, most informative first, in the schema's own order."""
    if shape.types is not None:
        ordered = [k for k in shape.types if k != "null"]
        return ordered + (["null"] if "null" in shape.types else [])
    words = shape.keywords
    if words & {
        "properties",
        "required",
        "additionalProperties",
        "patternProperties",
        "minProperties",
        "maxProperties",
        "dependentRequired",
    }:
        return ["object"]
    if words & {"items", "prefixItems", "contains", "minItems", "maxItems", "uniqueItems"}:
        return ["array"]
    if words & {"minLength", "maxLength", "pattern", "format"}:
        return ["string"]
    if words & {"minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum", "multipleOf"}:
        return ["number"]
    return ["string", "object", "null"]


def _property_scopes(shape: _Shape, name: str) -> tuple[Scope, ...]:
    found = list(shape.properties.get(name, ()))
    found.extend(
        scope
        for pattern, scope in shape.pattern_properties
        if compile_pattern(pattern).search(name)
    )
    if not found:
        found.extend(shape.additional)
    return tuple(found)


def _string(shape: _Shape, variant: int) -> Any:
    low = int(shape.numbers.get("minLength", 0))
    high = shape.numbers.get("maxLength", math.inf)
    sample = FORMAT_SAMPLES.get(shape.format or "")
    base = sample if sample is not None else _plain(variant)
    if sample is not None and variant:
        base = _vary_format(sample, shape.format or "", variant)
    options = [base] if not shape.patterns else [base, *_PATTERN_SAMPLES]
    for option in options:
        if len(option) < low:
            option = option + "x" * (low - len(option))
        if len(option) > high:
            option = option[: int(high)]
        if all(compile_pattern(p).search(option) for p in shape.patterns):
            return option
    return _FAIL


def _plain(variant: int) -> str:
    return "text" if variant == 0 else f"text {variant + 1}"


def _vary_format(sample: str, fmt: str, variant: int) -> str:
    if fmt in ("email", "idn-email"):
        return f"user{variant + 1}@example.com"
    if fmt in ("uri", "uri-reference", "iri", "iri-reference"):
        return f"{sample}/{variant + 1}"
    if fmt in ("date", "date-time"):
        return sample.replace("-31", f"-{(variant % 28) + 1:02d}", 1)
    return sample


def _number(shape: _Shape, *, integer: bool, variant: int) -> Any:
    numbers = shape.numbers
    low = numbers.get("minimum", -math.inf)
    high = numbers.get("maximum", math.inf)
    low_open = numbers.get("exclusiveMinimum", -math.inf)
    high_open = numbers.get("exclusiveMaximum", math.inf)
    step = shape.multiple_of

    def fits(value: float) -> bool:
        if not (low <= value <= high and low_open < value < high_open):
            return False
        if integer and not float(value).is_integer():
            return False
        return step is None or float(value / step).is_integer()

    floor = max(low, low_open)
    ceiling = min(high, high_open)
    options: list[float] = [variant, 0, 1]
    if math.isfinite(floor):
        options += [floor, math.ceil(floor), math.floor(floor) + 1, floor + 1]
    if math.isfinite(floor) and math.isfinite(ceiling):
        options.append((floor + ceiling) / 2)
    if math.isfinite(ceiling):
        options += [ceiling, math.floor(ceiling), math.ceil(ceiling) - 1, ceiling - 1]
    if step:
        options = [m * step for o in options for m in (math.ceil(o / step), math.floor(o / step))]
        options += [step, 0]
    for option in options:
        if math.isfinite(option) and fits(option):
            return int(option) if float(option).is_integer() else option
    return _FAIL


def _mapping(value: Any) -> Mapping[str, Any]:
    return value if isinstance(value, Mapping) else {}
