"""JSON Schema's keywords as the product runs them: jsonschema's Draft 2020-12 validator,
extended so that every check is bounded.

    Validator(schema, format_checker=FORMATS, registry=Registry()).iter_errors(value)

Every keyword evaluation is charged to the work budget in force (``app.core.schema.steps``).
``pattern``, ``patternProperties``, ``additionalProperties`` and ``unevaluatedProperties``
match with RE2 (``app.core.schema.pattern``: linear time, ECMA-262 syntax) instead of Python's
backtracking ``re``; ``uniqueItems`` is linear instead of pairwise; ``format`` is charged
by the length of the string it checks.

``unevaluatedProperties`` follows the ``$ref``s of the subschemas it looks into from where
each stands in its document; jsonschema keeps its own position to itself, so the caller
names each subschema's resolver around a validation (``resolving``; ``Schema`` does).
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable, Iterator, Mapping
from contextlib import contextmanager
from contextvars import ContextVar
from typing import Any

from jsonschema import Draft202012Validator
from jsonschema.exceptions import FormatError, ValidationError
from jsonschema.validators import extend

from app.core.schema.pattern import Pattern, PatternError, compile_pattern
from app.core.schema.steps import charge

_LIST_LIMIT = 10

Keyword = Callable[[Any, Any, Any, Any], Iterable[ValidationError] | None]

# The referencing resolver a subschema of the document being validated resolves its $refs
# against, by the subschema (the object a keyword is handed); None for one it does not know.
ResolverOf = Callable[[Any], Any]
_RESOLVER_OF: ContextVar[ResolverOf | None] = ContextVar("resolver_of", default=None)


@contextmanager
def resolving(resolver_of: ResolverOf) -> Iterator[None]:
    """Validate within this block with ``resolver_of`` naming each subschema's resolver."""
    token = _RESOLVER_OF.set(resolver_of)
    try:
        yield
    finally:
        _RESOLVER_OF.reset(token)


def _resolver(schema: Any) -> Any:
    resolver_of = _RESOLVER_OF.get()
    return None if resolver_of is None else resolver_of(schema)


def _counted(keyword: Keyword) -> Keyword:
    def run(validator: Any, value: Any, instance: Any, schema: Any) -> Any:
        charge(1)
        return keyword(validator, value, instance, schema)

    run.__name__ = getattr(keyword, "__name__", "keyword")
    return run


def _regex(source: str) -> Pattern:
    try:
        return compile_pattern(source)
    except PatternError as exc:
        # check_schema refuses such a schema at submit; this is a schema nobody checked.
        raise ValidationError(f"the schema's pattern {_brief(source)} is unusable: {exc}") from None


def _search(source: str, text: str) -> bool:
    compiled = _regex(source)
    charge(compiled.cost(text))
    return compiled.search(text)


def _pattern(validator: Any, pattern: Any, instance: Any, schema: Any) -> Iterator[ValidationError]:
    if validator.is_type(instance, "string") and not _search(pattern, instance):
        yield ValidationError(f"does not match {_brief(pattern, 80)}")


def _pattern_properties(
    validator: Any, patterns: Any, instance: Any, schema: Any
) -> Iterator[ValidationError]:
    if not validator.is_type(instance, "object"):
        return
    for pattern, subschema in patterns.items():
        for key, value in instance.items():
            if _search(pattern, key):
                yield from validator.descend(value, subschema, path=key, schema_path=pattern)


def additional(instance: Mapping[str, Any], schema: Mapping[str, Any]) -> Iterator[str]:
    """The fields of ``instance`` that neither ``properties`` nor ``patternProperties`` name."""
    properties = schema.get("properties", {})
    patterns = schema.get("patternProperties", {})
    for name in instance:
        if name not in properties and not any(_search(p, name) for p in patterns):
            yield name


def _additional_properties(
    validator: Any, allowed: Any, instance: Any, schema: Any
) -> Iterator[ValidationError]:
    if not validator.is_type(instance, "object"):
        return
    extras = list(additional(instance, schema))
    if validator.is_type(allowed, "object"):
        for extra in extras:
            yield from validator.descend(instance[extra], allowed, path=extra)
    elif not allowed and extras:
        shown = ", ".join(_brief(extra) for extra in extras[:_LIST_LIMIT])
        yield ValidationError(f"Additional properties are not allowed ({shown} unexpected)")


def _unique_items(
    validator: Any, unique: Any, instance: Any, schema: Any
) -> Iterator[ValidationError]:
    # jsonschema compares unsortable items pairwise: quadratic in the array's length.
    if not unique or not validator.is_type(instance, "array"):
        return
    charge(len(instance))
    seen: set[Any] = set()
    for item in instance:
        key = identity(item)
        if key in seen:
            yield ValidationError("has non-unique elements")
            return
        seen.add(key)


def identity(value: Any) -> Any:
    """A hashable key under which two JSON values are equal exactly when JSON Schema says so
    (``1`` equals ``1.0``; ``true`` is not ``1``; objects ignore key order)."""
    if isinstance(value, bool):
        return ("boolean", value)
    if isinstance(value, int | float):
        return ("number", value)
    if isinstance(value, Mapping):
        return ("object", frozenset((k, identity(v)) for k, v in value.items()))
    if isinstance(value, list | tuple):
        return ("array", tuple(identity(v) for v in value))
    return (type(value).__name__, value)


def _format(validator: Any, format: Any, instance: Any, schema: Any) -> Iterator[ValidationError]:
    if validator.format_checker is None:
        return
    if isinstance(instance, str):
        charge(len(instance) // 64)  # the checkers are linear (idna, ipaddress, our regex)
    try:
        validator.format_checker.check(instance, format)
    except FormatError as error:
        yield ValidationError(error.message, cause=error.cause)


def _unevaluated_properties(
    validator: Any, unevaluated: Any, instance: Any, schema: Any
) -> Iterator[ValidationError]:
    if not validator.is_type(instance, "object"):
        return
    evaluated = _evaluated_keys(validator, instance, schema)
    failed = [
        name
        for name in instance
        if name not in evaluated and not _valid(validator, instance[name], unevaluated)
    ]
    if failed:
        shown = ", ".join(_brief(name) for name in failed[:_LIST_LIMIT])
        if unevaluated is False:
            yield ValidationError(f"Unevaluated properties are not allowed ({shown} unexpected)")
        else:
            yield ValidationError(
                f"Unevaluated properties are not valid under the given schema ({shown})"
            )


def _evaluated_keys(validator: Any, instance: Mapping[str, Any], schema: Any) -> set[str]:
    """jsonschema's ``find_evaluated_property_keys_by_schema``, on RE2 patterns."""
    if not isinstance(schema, Mapping):
        return set()
    charge(1)
    keys = _evaluated_by_refs(validator, instance, schema)
    properties = schema.get("properties")
    if isinstance(properties, Mapping):
        keys |= properties.keys() & instance.keys()
    for keyword in ("additionalProperties", "unevaluatedProperties"):
        sub = schema.get(keyword)
        if sub is not None:
            keys |= {name for name, value in instance.items() if _valid(validator, value, sub)}
    for pattern in schema.get("patternProperties", {}):
        keys |= {name for name in instance if _search(pattern, name)}
    return keys | _evaluated_in_place(validator, instance, schema)


def _evaluated_by_refs(
    validator: Any, instance: Mapping[str, Any], schema: Mapping[str, Any]
) -> set[str]:
    keys: set[str] = set()
    for ref_keyword in ("$ref", "$dynamicRef"):
        ref = schema.get(ref_keyword)
        if isinstance(ref, str):
            resolver = _resolver(schema)
            if resolver is None:  # validated outside ``resolving``: nowhere to look it up
                raise ValidationError(f"{ref_keyword} {_brief(ref)} cannot be followed here")
            keys |= _evaluated_keys(validator, instance, resolver.lookup(ref).contents)
    return keys


def _evaluated_in_place(
    validator: Any, instance: Mapping[str, Any], schema: Mapping[str, Any]
) -> set[str]:
    """The keys the applicators (dependentSchemas, allOf/oneOf/anyOf, if/then/else) saw."""
    keys: set[str] = set()
    for name, sub in schema.get("dependentSchemas", {}).items():
        if name in instance:
            keys |= _evaluated_keys(validator, instance, sub)
    for keyword in ("allOf", "oneOf", "anyOf"):
        for sub in _as_list(schema.get(keyword)):
            if _valid(validator, instance, sub):
                keys |= _evaluated_keys(validator, instance, sub)
    if "if" in schema:
        if _valid(validator, instance, schema["if"]):
            keys |= _evaluated_keys(validator, instance, schema["if"])
            if "then" in schema:
                keys |= _evaluated_keys(validator, instance, schema["then"])
        elif "else" in schema:
            keys |= _evaluated_keys(validator, instance, schema["else"])
    return keys


def _valid(validator: Any, value: Any, schema: Any) -> bool:
    """Whether ``value`` satisfies ``schema``, its $refs resolved from where it stands."""
    errors = validator.descend(value, schema, resolver=_resolver(schema))
    return not any(True for _ in errors)


_OWN: dict[str, Keyword] = {
    "pattern": _pattern,
    "patternProperties": _pattern_properties,
    "additionalProperties": _additional_properties,
    "uniqueItems": _unique_items,
    "format": _format,
    "unevaluatedProperties": _unevaluated_properties,
}
# The one validator class of the product: Draft 2020-12, every keyword counted.
Validator: Any = extend(  # type: ignore[no-untyped-call]  # jsonschema's stubs leave it untyped
    Draft202012Validator,
    validators={
        name: _counted(_OWN.get(name) or keyword)
        for name, keyword in Draft202012Validator.VALIDATORS.items()
    },
)


def _brief(value: Any, limit: int = 40) -> str:
    text = json.dumps(value, ensure_ascii=False)
    return text if len(text) <= limit else text[: limit - 1] + "…"


def _as_list(value: Any) -> list[Any]:
    return list(value) if isinstance(value, list) else []
