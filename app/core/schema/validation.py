"""JSON Schema 2020-12 validation with diagnostics a model can act on.

The one place jsonschema and referencing enter the core::

    check_schema(job_schema)                      # InvalidInput(field="schema") if unusable
    schema_errors({"qty": "3 units"}, schema)
    # ['$.qty: expected integer, got string "3 units"']

Each error line is ``<JSONPath>: <message>``; lines are deduplicated, ordered
as the offending values appear in the document and capped at ``max_errors``
with a final ``... and N more errors``.

Every check is bounded: the keywords are ``app.core.schema.keywords`` (patterns on RE2, linear
``uniqueItems``, every evaluation charged to ``app.core.schema.steps``'s budget; without an
enclosing budget a check gets ``BASE_STEPS``). ``check_schema`` refuses a pattern RE2
cannot run and a ``$ref``/``allOf``/... loop that never reaches a value.
"""

from __future__ import annotations

import functools
import itertools
import json
import re
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Final, Protocol, TypeVar, cast

from jsonschema import Draft202012Validator, FormatChecker
from jsonschema.exceptions import SchemaError, ValidationError
from referencing import Registry
from referencing.exceptions import Unresolvable
from referencing.jsonschema import DRAFT202012

from app.core.schema.formats import CHECKS as FORMAT_CHECKS
from app.core.schema.formats import conforms, unknown_formats
from app.core.schema.keywords import Validator, additional, identity, resolving
from app.core.schema.pattern import PatternError, compile_pattern
from app.core.schema.plain import plain_check
from app.core.schema.steps import BASE_STEPS, charge, tentatively, work_budget
from app.core.wire.errors import InvalidInput

Path = tuple[str | int, ...]
T = TypeVar("T")

DIALECT_2020_12 = "https://json-schema.org/draft/2020-12/schema"
# Work bounds: a model answer can hold thousands of errors; we never need them all.
_ERROR_SCAN_LIMIT = 1000
_LINE_LIMIT = 200
_VALUE_LIMIT = 40
_LIST_LIMIT = 10

_IDENTIFIER = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
# Every 2020-12 format, checked by ``app.core.schema.formats`` (the same in every install:
# jsonschema's own checkers depend on which optional packages happen to be there).
FORMATS = FormatChecker(formats=())
for _name, _check in FORMAT_CHECKS.items():
    FORMATS.checks(_name)(functools.partial(conforms, name=_name))


FORMAT_DESCRIPTIONS: dict[str, str] = {
    "date": "a date like 2024-01-31",
    "date-time": "a date-time like 2024-01-31T12:00:00Z",
    "time": "a time like 12:00:00Z",
    "email": "an email address",
    "idn-email": "an email address",
    "uri": "an absolute URI like https://example.com",
    "uuid": "a UUID",
    "ipv4": "an IPv4 address",
    "ipv6": "an IPv6 address",
    "hostname": "a host name",
    "regex": "a regular expression",
    "duration": "an ISO 8601 duration like P3DT4H",
    "idn-hostname": "a host name",
    "uri-reference": "a URI or relative reference like /path?q=1",
    "iri": "an absolute IRI like https://example.com/ünï",
    "iri-reference": "an IRI or relative reference",
    "uri-template": "a URI template like /users/{id}",
    "json-pointer": "a JSON Pointer like /a/0",
    "relative-json-pointer": "a relative JSON Pointer like 1/a",
}


class Resolved(Protocol):
    """What a ``Resolver.lookup`` finds: the subschema and where its own $refs resolve."""

    @property
    def contents(self) -> Any: ...
    @property
    def resolver(self) -> Resolver: ...


class Resolver(Protocol):
    """referencing's resolver (``Registry().resolver_with_root(...)``), as used here:
    referencing does not export its class."""

    def lookup(self, ref: str, /) -> Resolved: ...
    def in_subresource(self, subresource: Any, /) -> Resolver: ...


@dataclass(frozen=True)
class Scope:
    """A subschema together with the resolver its ``$ref`` resolves against."""

    node: Any
    resolver: Resolver

    def enter(self, node: Any) -> Scope:
        """The scope of ``node``, a subschema of this one (it may set a new ``$id``)."""
        if isinstance(node, Mapping):
            return Scope(node, self.resolver.in_subresource(DRAFT202012.create_resource(node)))
        return Scope(node, self.resolver)

    def target(self) -> Scope | None:
        """Where this node's ``$ref`` points, or None (no ``$ref``, or unresolvable)."""
        ref = self.node.get("$ref") if isinstance(self.node, Mapping) else None
        if not isinstance(ref, str):
            return None
        try:
            resolved = self.resolver.lookup(ref)
        except Unresolvable:
            return None
        return Scope(resolved.contents, resolved.resolver).enter(resolved.contents)

    def flatten(self) -> list[Scope]:
        """This node plus every node it must also satisfy (its ``$ref`` and ``allOf``), each
        once: a diamond of ``allOf``s costs its size, not two to the power of its depth."""
        found: list[Scope] = []
        seen: set[int] = set()
        stack: list[tuple[Scope, int]] = [(self, 0)]
        while stack:
            scope, depth = stack.pop()
            if id(scope.node) in seen:
                continue
            seen.add(id(scope.node))
            charge(1)
            found.append(scope)
            if depth > 16 or not isinstance(scope.node, Mapping):
                continue
            following = [scope.enter(m) for m in _as_list(scope.node.get("allOf"))]
            target = scope.target()
            if target is not None:
                following.insert(0, target)
            stack.extend((s, depth + 1) for s in reversed(following))
        return found


class Schema:
    """A 2020-12 schema compiled once: validate values, walk subschemas.

    >>> Schema({"type": "integer"}).errors("x")
    ['$: expected integer, got string "x"']
    """

    def __init__(self, schema: Mapping[str, Any] | bool) -> None:
        self.schema = schema
        # An empty registry: a $ref is never fetched over the network.
        self._validator = Validator(schema, format_checker=FORMATS, registry=Registry())
        resource = DRAFT202012.create_resource(schema)
        self.root = Scope(schema, Registry().resolver_with_root(resource))
        # A plain schema (the ones signatures make) has a quick check: its yes is final.
        self._plain = plain_check(schema)
        self._resolvers: dict[int, Resolver] | None = None  # by id(): ``resolver_of``
        self._has_id: bool | None = None  # whether any subschema sets "$id" (schema_at)

    def resolver_of(self, node: Any) -> Resolver | None:
        """The resolver a subschema of this document resolves its ``$ref``s against (for
        ``unevaluatedProperties``, ``app.core.schema.keywords``), found on first use."""
        if self._resolvers is None:
            self._resolvers = _resolvers(self.root)
        return self._resolvers.get(id(node))

    def is_valid(self, value: Any, scope: Scope | None = None) -> bool:
        """Whether ``value`` satisfies the whole schema, or only the subschema ``scope``."""
        if scope is None and self._quickly_valid(value):
            return True
        validator: Any = self._validator
        try:
            with work_budget(BASE_STEPS), resolving(self.resolver_of):
                if scope is None:
                    return bool(validator.is_valid(value))
                # The resolver keeps $refs inside the subschema resolving against the
                # document they came from.
                errors = validator.descend(value, scope.node, resolver=scope.resolver)
                return not any(True for _ in errors)
        except Unresolvable as exc:
            raise _unresolvable(exc) from exc

    def errors(self, value: Any) -> list[str]:
        """Every distinct error line, in document order (not capped)."""
        return self.error_lines(value)[0]

    def error_lines(self, value: Any) -> tuple[list[str], bool]:
        """The distinct error lines, and whether that is all of them (the scan is bounded)."""
        if self._quickly_valid(value):
            return [], True
        try:
            with work_budget(BASE_STEPS), resolving(self.resolver_of):
                errors = self._validator.iter_errors(value)
                found = list(itertools.islice(errors, _ERROR_SCAN_LIMIT))
        except Unresolvable as exc:
            raise _unresolvable(exc) from exc
        complete = len(found) < _ERROR_SCAN_LIMIT
        located: list[tuple[Path, str]] = []
        for error in found:
            located.extend(_describe(error))
        order = _Positions(value)
        located.sort(key=lambda item: order.of(item[0]))
        lines = (_clip(f"{json_path(path)}: {message}", _LINE_LIMIT) for path, message in located)
        return list(dict.fromkeys(lines)), complete

    def failing_paths(self, value: Any) -> tuple[Path, ...] | None:
        """Where ``value`` must change to pass; ``None`` past the bounded scan's errors.

        The value at each error's path, a missing field's own path, the whole object for a
        field it must not have.
        """
        if self._quickly_valid(value):
            return ()
        try:
            with work_budget(BASE_STEPS), resolving(self.resolver_of):
                found = list(
                    itertools.islice(self._validator.iter_errors(value), _ERROR_SCAN_LIMIT)
                )
        except Unresolvable as exc:
            raise _unresolvable(exc) from exc
        if len(found) >= _ERROR_SCAN_LIMIT:
            return None
        paths: dict[Path, None] = {}
        for error in found:
            for path in _fix_paths(error):
                paths[path] = None
        return tuple(paths)

    def _quickly_valid(self, value: Any) -> bool:
        """The plain schema's quick yes (``app.core.schema.plain``), within a work budget; a
        no (or a check that ran out of steps) is the full validator's to explain."""
        plain = self._plain
        if plain is None:
            return False
        # No work_budget around it: ``tentatively`` takes BASE_STEPS itself when none is in
        # force, and work_budget would defer to one that is.
        return tentatively(lambda: plain(value))

    def schema_at(self, path: Path) -> dict[str, Any] | None:
        """The subschema a value at ``path`` must satisfy, as a document of its own.

        It keeps the root's ``$defs``. ``None`` when it cannot be named alone: a union on
        the way, a reference outside ``$defs``, a step no subschema describes.
        """
        scopes = [self.root]
        for step in path:
            following: list[Scope] = []
            for scope in scopes:
                for part in scope.flatten():
                    node = part.node
                    if node is True:
                        continue
                    if not isinstance(node, Mapping) or "anyOf" in node or "oneOf" in node:
                        return None
                    child = _child_schema(node, step)
                    if child is not None:
                        following.append(part.enter(child))
            if not following:
                return None
            scopes = following
        nodes = [scope.node for scope in scopes]
        found: dict[str, Any] = (
            dict(nodes[0]) if len(nodes) == 1 and isinstance(nodes[0], Mapping)
            else {"allOf": nodes}
        )  # fmt: skip
        root = self.schema if isinstance(self.schema, Mapping) else {}
        text = json.dumps(found)
        if self._has_id is None:  # asked once per schema, not once per path
            self._has_id = '"$id"' in json.dumps(root)
        if self._has_id or '"$dynamicRef"' in text:
            return None
        if '"$ref"' in text:
            if any(not ref.startswith("#/$defs/") for ref in _refs(found)):
                return None
            found.pop("$defs", None)
            found["$defs"] = root.get("$defs", {})
        return found


# Distinct schemas kept compiled (each holds a copy of its schema, at most
# ``max_schema_bytes`` of JSON): most jobs share a few schemas.
_COMPILED_MAX = 128


@dataclass(slots=True)
class _Fixed:
    schema: Any
    compiled: Schema
    derived: dict[str, Any]


# Schemas declared never to change again (a contract's: one per distinct signature or
# schema, shared by its jobs), by identity, with what was derived from them. Each is held
# here, so while it is listed no other object has its id.
_FIXED_MAX: Final = 256
_fixed: dict[int, _Fixed] = {}


def fixed(schema: dict[str, Any]) -> dict[str, Any]:
    """Declare ``schema`` never to be changed again: ``compiled`` and ``derived`` then find
    what they made from it by identity, without writing it out as JSON for every job."""
    if len(_fixed) >= _FIXED_MAX:
        _fixed.clear()
    _fixed[id(schema)] = _Fixed(schema, compiled(schema), {})
    return schema


def _known(schema: Any) -> _Fixed | None:
    entry = _fixed.get(id(schema))
    return entry if entry is not None and entry.schema is schema else None


def derived(schema: dict[str, Any], what: str, make: Callable[[dict[str, Any]], T]) -> T:
    """``make(schema)``: made once and kept for a ``fixed`` schema, made every time for any
    other. ``what`` names what is made (one name per ``make``)."""
    entry = _known(schema)
    if entry is None:
        return make(schema)
    if what not in entry.derived:
        entry.derived[what] = make(schema)
    return cast(T, entry.derived[what])


def compiled(schema: Mapping[str, Any] | bool) -> Schema:
    """``Schema(schema)``, compiled once per distinct schema and kept (keyed by its JSON).

    Compiling costs more than checking a small answer. The cached one is built from a
    copy, so no caller's dict is shared or kept.
    """
    entry = _known(schema)
    if entry is not None:
        return entry.compiled
    try:
        key = json.dumps(schema, ensure_ascii=False, allow_nan=False)
    except (TypeError, ValueError):  # not plain JSON data: compiled as it is, not kept
        return Schema(schema)
    return _compiled(key)


@functools.lru_cache(maxsize=_COMPILED_MAX)
def _compiled(key: str) -> Schema:
    return Schema(json.loads(key))


def schema_errors(value: Any, schema: Mapping[str, Any], *, max_errors: int = 8) -> list[str]:
    """Path-precise, deduplicated error lines for ``value``; empty when it is valid."""
    lines, complete = compiled(schema).error_lines(value)
    return cap_errors(lines, max_errors, complete=complete)


def cap_errors(lines: Sequence[str], max_errors: int, *, complete: bool = True) -> list[str]:
    """The first ``max_errors`` lines plus ``... and N more errors`` when there are more."""
    keep = max(max_errors, 1)
    if len(lines) <= keep and complete:
        return list(lines)
    rest = len(lines) - keep
    if rest < 1:  # incomplete, yet every distinct line fits
        return [*lines, "... and possibly more errors"]
    count = f"{rest}" if complete else f"at least {rest}"
    return [*lines[:keep], f"... and {count} more error{'s' if rest != 1 else ''}"]


def check_schema(schema: Any, *, max_depth: int = 32) -> None:
    """Raise ``InvalidInput(field="schema")`` unless ``schema`` is a usable 2020-12 schema.

    Usable: a JSON object, declaring no other dialect, valid against the
    2020-12 meta-schema, no deeper than ``max_depth`` subschemas, and every
    ``$ref`` resolvable inside the document (nothing is fetched).
    """
    if not isinstance(schema, Mapping):
        raise InvalidInput(f"schema must be a JSON object, got {json_type(schema)}", field="schema")
    dialect = schema.get("$schema")
    if dialect is not None and str(dialect).rstrip("#") != DIALECT_2020_12:
        raise InvalidInput(
            f"schema declares $schema {_brief(dialect, 100)}; only JSON Schema 2020-12 "
            f"({DIALECT_2020_12}) is supported",
            field="schema",
        )
    # Raw JSON nesting, measured before anything recursive touches the document; a
    # subschema costs about two levels (keyword, then schema), enum data may add more.
    if _nesting(schema, limit=max_depth * 8) > max_depth * 8:
        raise InvalidInput(f"schema is nested too deeply (over {max_depth} levels)", field="schema")
    try:
        # Our format checker: the meta-schema's "format": "regex" never compiles with `re`.
        Draft202012Validator.check_schema(schema, format_checker=FORMATS)
    except RecursionError:
        raise InvalidInput(
            f"schema is nested too deeply (over {max_depth} levels)", field="schema"
        ) from None
    except SchemaError as exc:
        _name_pattern_problem(exc)
        lines = [f"{json_path(path)}: {message}" for path, message in _describe(exc)]
        detail = lines[0] if lines else exc.message
        raise InvalidInput(
            _clip(f"schema is not valid JSON Schema 2020-12: {detail}", _LINE_LIMIT),
            field="schema",
        ) from exc
    unknown = unknown_formats(schema)
    if unknown:
        raise InvalidInput(
            _clip(
                f"schema uses format {_choices(unknown)}, which this service cannot check; "
                f"the formats it asserts are {', '.join(FORMAT_CHECKS)}",
                _LINE_LIMIT * 2,
            ),
            field="schema",
        )
    root = DRAFT202012.create_resource(schema)
    walked: list[tuple[Scope, Path]] = []
    _check_refs(Scope(schema, Registry().resolver_with_root(root)), (), 1, max_depth, walked)
    _check_cycles(walked)


def _name_pattern_problem(exc: SchemaError) -> None:
    """A pattern the meta-schema's ``format: regex`` refused: say what in it is refused
    (``\\p{Letter}``), not that the meta-schema wants a regular expression."""
    if exc.validator != "format" or exc.validator_value != "regex":
        return
    source = exc.instance
    if not isinstance(source, str):
        return
    try:
        compile_pattern(source)
    except PatternError as problem:
        where = json_path(tuple(exc.absolute_path))
        raise InvalidInput(
            _clip(f"schema pattern {_brief(source, 60)} at {where}: {problem}", 300),
            field="schema",
        ) from None


def json_path(path: Sequence[str | int]) -> str:
    """Render a path: ``$`` root, ``.key`` identifiers, ``["odd key"]`` others, ``[i]`` indices."""
    parts = ["$"]
    for step in path:
        if isinstance(step, int):
            parts.append(f"[{step}]")
        elif _IDENTIFIER.fullmatch(step):
            parts.append(f".{step}")
        else:
            parts.append(f"[{json.dumps(step, ensure_ascii=False)}]")
    return "".join(parts)


def json_type(value: Any) -> str:
    """The JSON name of ``value``'s type."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, int):
        return "integer"
    if isinstance(value, float):
        return "number"
    if isinstance(value, str):
        return "string"
    if isinstance(value, Mapping):
        return "object"
    if isinstance(value, list | tuple):
        return "array"
    return type(value).__name__


def brief(value: Any, limit: int = _VALUE_LIMIT) -> str:
    """A short JSON rendering of ``value``, truncated with an ellipsis."""
    return _brief(value, limit)


# -- diagnostics ------------------------------------------------------------------


def _describe(error: ValidationError | SchemaError) -> list[tuple[Path, str]]:
    """One error (possibly with sub-errors) as ``(path, message)`` lines."""
    path: Path = tuple(error.absolute_path)
    keyword = error.validator if isinstance(error.validator, str) else None
    value: Any = error.validator_value
    instance = error.instance
    schema = error.schema if isinstance(error.schema, Mapping) else {}
    if "propertyNames" in error.absolute_schema_path and keyword != "propertyNames":
        return [(path, f"invalid field name: {m}") for _, m in _describe_keyword(error, keyword)]
    if keyword in ("anyOf", "oneOf"):
        return _describe_union(error, keyword)
    if keyword == "required" and isinstance(instance, Mapping):
        missing = [name for name in value if name not in instance]
        return [(path, f"missing required field {_brief(name)}") for name in missing]
    if keyword == "dependentRequired" and isinstance(instance, Mapping):
        return [
            (path, f"missing field {_brief(need)} (required when {_brief(name)} is present)")
            for name, needs in value.items()
            if name in instance
            for need in needs
            if need not in instance
        ]
    if keyword == "additionalProperties" and isinstance(instance, Mapping):
        allowed = list(schema.get("properties", {}))
        patterns = list(schema.get("patternProperties", {}))
        extra = list(additional(instance, schema))
        if allowed:
            hint = f"(allowed: {_names(allowed)})"
        elif patterns:
            hint = f"(field names must match {_names(patterns)})"
        else:
            hint = "(this object allows no fields)"
        return [(path, f"unexpected field {_brief(name)} {hint}") for name in extra]
    return _describe_keyword(error, keyword)


def _describe_keyword(
    error: ValidationError | SchemaError, keyword: str | None
) -> list[tuple[Path, str]]:
    path: Path = tuple(error.absolute_path)
    return [(path, _message(keyword, error.validator_value, error.instance, error))]


# A message from the keyword's value in the schema and the instance that fails it.
_Message = Callable[[Any, Any], str]


def _bound(relation: str) -> _Message:
    return lambda value, instance: (
        f"expected a number {relation} {_num(value)}, got {_brief(instance)}"
    )


def _length(extent: str) -> _Message:
    return lambda value, instance: (
        f"expected {extent} {_plural(value, 'character')}, got {len(instance)}: {_brief(instance)}"
    )


def _count(extent: str, noun: str) -> _Message:
    return lambda value, instance: f"expected {extent} {_plural(value, noun)}, got {len(instance)}"


def _format(value: Any, instance: Any) -> str:
    wanted = FORMAT_DESCRIPTIONS.get(value, f"a valid {value}")
    return f'expected {wanted} (format "{value}"), got {_brief(instance)}'


# The keywords whose message needs only the schema value and the instance; see _message.
_MESSAGES: dict[str, _Message] = {
    "type": lambda value, instance: f"expected {_types(value)}, got {_show(instance)}",
    "enum": lambda value, instance: f"expected one of {_choices(value)}, got {_brief(instance)}",
    "const": lambda value, instance: f"expected {_brief(value)}, got {_brief(instance)}",
    "minimum": _bound(">="),
    "maximum": _bound("<="),
    "exclusiveMinimum": _bound(">"),
    "exclusiveMaximum": _bound("<"),
    "multipleOf": lambda value, instance: (
        f"expected a multiple of {_num(value)}, got {_brief(instance)}"
    ),
    "minLength": _length("at least"),
    "maxLength": _length("at most"),
    "pattern": lambda value, instance: (
        f"expected a string matching {_clip(str(value), 60)}, got {_brief(instance)}"
    ),
    "format": _format,
    "minItems": _count("at least", "item"),
    "maxItems": _count("at most", "item"),
    "uniqueItems": lambda value, instance: (
        f"expected unique items, but {_duplicate(instance)} appears more than once"
    ),
    "minProperties": _count("at least", "field"),
    "maxProperties": _count("at most", "field"),
    "not": lambda value, instance: f"{_brief(instance)} is not allowed here",
}


def _message(keyword: str | None, value: Any, instance: Any, error: Any) -> str:
    simple = _MESSAGES.get(keyword) if keyword is not None else None
    if simple is not None:
        return simple(value, instance)
    return _special_message(keyword, value, instance, error)


def _special_message(keyword: str | None, value: Any, instance: Any, error: Any) -> str:
    """The messages that need more than the schema value and the instance."""
    match keyword:
        case None:  # a `false` subschema; jsonschema drops the path step below the keyword
            parent = error.absolute_schema_path[-1] if error.absolute_schema_path else None
            if parent in ("properties", "patternProperties", "additionalProperties"):
                return f"a field with value {_brief(instance)} is not allowed here"
            return f"{_brief(instance)} is not allowed here"
        case "items" if value is False:
            schema = error.schema if isinstance(error.schema, Mapping) else {}
            prefix = len(schema.get("prefixItems", ()))
            return f"expected at most {_plural(prefix, 'item')}, got {len(instance)}"
        case "contains":
            if error.message.startswith("Too "):
                return _clip(error.message, 120)
            return 'expected at least one item matching the "contains" schema'
        case "unevaluatedProperties" | "unevaluatedItems":
            return _clip(error.message, 120)
        case _:
            return f"fails {keyword}: {_clip(error.message, 120)}"


def _describe_union(error: ValidationError | SchemaError, keyword: str) -> list[tuple[Path, str]]:
    """anyOf/oneOf: name the alternatives when none fits the value's type, else the closest one."""
    path: Path = tuple(error.absolute_path)
    if not error.context:  # oneOf matched more than one alternative
        return [(path, f"matches more than one alternative of {keyword}; it must match one")]
    branches: dict[int, list[ValidationError]] = {}
    for sub in error.context:
        index = sub.relative_schema_path[0] if sub.relative_schema_path else 0
        branches.setdefault(int(index), []).append(sub)
    alternatives: list[str] = []
    viable: list[int] = []
    for index, errors in sorted(branches.items()):
        at_root = [e for e in errors if not e.relative_path and e.validator in _SHAPE_KEYWORDS]
        if at_root:
            alternatives.extend(_alternative(e) for e in at_root[:1])
        else:
            viable.append(index)
    if not viable:
        wanted = " or ".join(dict.fromkeys(alternatives))
        return [(path, f"expected {wanted}, got {_show(error.instance)}")]

    def closeness(index: int) -> tuple[int, int, int]:
        errors = branches[index]
        mismatched_tags = sum(1 for e in errors if e.validator in ("const", "enum"))
        return (mismatched_tags, len(errors), index)

    best = min(viable, key=closeness)
    lines: list[tuple[Path, str]] = []
    for sub in branches[best]:
        lines.extend(_describe(sub))
    return lines


_SHAPE_KEYWORDS = ("type", "const", "enum")


def _alternative(error: ValidationError) -> str:
    if error.validator == "type":
        return _types(error.validator_value)
    if error.validator == "const":
        return _brief(error.validator_value)
    return f"one of {_choices(error.validator_value)}"


_UNKNOWN_POSITION = 1 << 30


class _Positions:
    """Where a path sits in ``value``'s document order (parents before children); each
    object's key order is indexed once, however many errors it holds."""

    def __init__(self, value: Any) -> None:
        self.value = value
        self._keys: dict[int, dict[str, int]] = {}
        self._paths: dict[Path, tuple[int, ...]] = {}

    def of(self, path: Path) -> tuple[int, ...]:
        if path not in self._paths:
            self._paths[path] = self._find(path)
        return self._paths[path]

    def _find(self, path: Path) -> tuple[int, ...]:
        steps: list[int] = []
        node = self.value
        for step in path:
            if isinstance(node, Mapping) and step in node:
                keys = self._keys.get(id(node))
                if keys is None:
                    keys = self._keys[id(node)] = {k: i for i, k in enumerate(node)}
                steps.append(keys[step])  # type: ignore[index]
                node = node[step]
            elif isinstance(node, list) and isinstance(step, int) and 0 <= step < len(node):
                steps.append(step)
                node = node[step]
            else:
                steps.append(_UNKNOWN_POSITION)
                break
        return tuple(steps)


def _types(value: Any) -> str:
    if isinstance(value, str):
        return value
    return " or ".join(str(v) for v in value)


def _show(value: Any) -> str:
    if value is None:
        return "null"
    return f"{json_type(value)} {_brief(value)}"


def _brief(value: Any, limit: int = _VALUE_LIMIT) -> str:
    if isinstance(value, str):
        body = json.dumps(value, ensure_ascii=False)[1:-1]
        if len(body) > limit - 2:
            body = body[: limit - 3] + "…"
        return f'"{body}"'
    try:
        text = json.dumps(value, ensure_ascii=False, separators=(", ", ": "))
    except (TypeError, ValueError):
        text = repr(value)
    return _clip(text, limit)


def _choices(values: Any) -> str:
    items = list(values) if isinstance(values, list | tuple) else [values]
    shown = ", ".join(_brief(v) for v in items[:_LIST_LIMIT])
    return shown + (", …" if len(items) > _LIST_LIMIT else "")


def _names(names: Sequence[str]) -> str:
    shown = ", ".join(names[:_LIST_LIMIT])
    return shown + (", …" if len(names) > _LIST_LIMIT else "")


def _num(value: Any) -> str:
    return json.dumps(value) if isinstance(value, int | float) else str(value)


def _plural(count: Any, noun: str) -> str:
    return f"{count} {noun}{'' if count == 1 else 's'}"


def _duplicate(items: Any) -> str:
    seen: set[Any] = set()
    for item in items:
        key = identity(item)
        if key in seen:
            return _brief(item)
        seen.add(key)
    return "an item"


def _clip(text: str, limit: int) -> str:
    return text if len(text) <= limit else text[: limit - 1] + "…"


def _as_list(value: Any) -> list[Any]:
    return list(value) if isinstance(value, list) else []


# -- schema checks ----------------------------------------------------------------


def _unresolvable(exc: Unresolvable) -> InvalidInput:
    return InvalidInput(f"schema has an unresolvable $ref {_brief(exc.ref)}", field="schema")


def _nesting(value: Any, *, limit: int) -> int:
    """Container nesting depth of a JSON document, without recursion; stops past ``limit``."""
    deepest = 0
    stack: list[tuple[Any, int]] = [(value, 1)]
    while stack:
        node, depth = stack.pop()
        if isinstance(node, Mapping):
            children: Iterator[Any] = iter(node.values())
        elif isinstance(node, list):
            children = iter(node)
        else:
            continue
        deepest = max(deepest, depth)
        if deepest > limit:
            return deepest
        stack.extend((child, depth + 1) for child in children)
    return deepest


def _resolvers(root: Scope) -> dict[int, Resolver]:
    """The resolver of every subschema validation can reach from ``root`` (by keyword or
    by ``$ref``), by the subschema's ``id()``; the first way found to one wins."""
    found: dict[int, Resolver] = {}
    stack = [root]
    while stack:
        scope = stack.pop()
        node = scope.node
        if not isinstance(node, Mapping) or id(node) in found:
            continue
        found[id(node)] = scope.resolver
        stack.extend(scope.enter(child) for _, child in _subschemas(node))
        for keyword in ("$ref", "$dynamicRef"):
            ref = node.get(keyword)
            if isinstance(ref, str):
                try:
                    resolved = scope.resolver.lookup(ref)
                except Unresolvable:
                    continue
                # Where jsonschema's $ref stands in it (its lookup entered any $id on the way).
                stack.append(Scope(resolved.contents, resolved.resolver))
    return found


def _check_refs(
    scope: Scope, path: Path, depth: int, max_depth: int, walked: list[tuple[Scope, Path]]
) -> None:
    """Depth, ``$ref``s and patterns of every subschema; ``walked`` collects them all."""
    if depth > max_depth:
        raise InvalidInput(
            f"schema is nested too deeply: more than {max_depth} subschemas "
            f"(at {_clip(json_path(path), 80)})",
            field="schema",
        )
    node = scope.node
    if not isinstance(node, Mapping):
        return
    walked.append((scope, path))
    _check_patterns(node, path)
    ref = node.get("$ref")
    if isinstance(ref, str):
        try:
            scope.resolver.lookup(ref)
        except Unresolvable:
            raise InvalidInput(
                f"schema has an unresolvable $ref {_brief(ref)} at {json_path(path)}; "
                "only references inside the schema (such as #/$defs/name) are supported",
                field="schema",
            ) from None
    # Subschemas are found by keyword (not by referencing's crawler) so errors can name them.
    for child_path, child in _subschemas(node):
        _check_refs(scope.enter(child), path + child_path, depth + 1, max_depth, walked)


def _check_patterns(node: Mapping[str, Any], path: Path) -> None:
    """Every pattern must compile for RE2 (``app.core.schema.pattern`` lists what is refused)."""
    found: list[tuple[Path, Any]] = []
    if "pattern" in node:
        found.append(((*path, "pattern"), node["pattern"]))
    properties = node.get("patternProperties")
    if isinstance(properties, Mapping):
        found.extend(((*path, "patternProperties", key), key) for key in properties)
    for where, source in found:
        if not isinstance(source, str):
            continue  # the meta-schema check has said so already
        try:
            compile_pattern(source)
        except PatternError as exc:
            raise InvalidInput(
                _clip(f"schema pattern {_brief(source, 60)} at {json_path(where)}: {exc}", 300),
                field="schema",
            ) from None


# Keywords that apply a subschema to the same value: a loop of them never ends.
_IN_PLACE_ONE = ("not", "if", "then", "else")
_IN_PLACE_MANY = ("allOf", "anyOf", "oneOf")


def _in_place(scope: Scope) -> Iterator[Scope]:
    node = scope.node
    if not isinstance(node, Mapping):
        return
    for keyword in ("$ref", "$dynamicRef"):
        ref = node.get(keyword)
        if isinstance(ref, str):
            try:
                resolved = scope.resolver.lookup(ref)
            except Unresolvable:
                continue
            yield Scope(resolved.contents, resolved.resolver).enter(resolved.contents)
    for keyword in _IN_PLACE_ONE:
        if keyword in node:
            yield scope.enter(node[keyword])
    for keyword in _IN_PLACE_MANY:
        for member in _as_list(node.get(keyword)):
            yield scope.enter(member)
    dependent = node.get("dependentSchemas")
    if isinstance(dependent, Mapping):
        for member in dependent.values():
            yield scope.enter(member)


def _check_cycles(walked: list[tuple[Scope, Path]]) -> None:
    """Refuse a ``$ref``/``allOf``/... loop that never goes down into the value.

    Checking any value against ``{"$ref": "#"}`` never ends. Recursion through
    ``properties``, ``items`` and the like is fine.
    """
    where = {id(scope.node): path for scope, path in walked}
    state: dict[int, int] = {}  # 1: on the current path, 2: done
    for start, _ in walked:
        if id(start.node) in state:
            continue
        state[id(start.node)] = 1
        stack: list[tuple[Scope, Iterator[Scope]]] = [(start, _in_place(start))]
        while stack:
            scope, following = stack[-1]
            child = next(following, None)
            if child is None:
                state[id(scope.node)] = 2
                stack.pop()
                continue
            seen = state.get(id(child.node))
            if seen == 1:
                loop = [s for s, _ in stack]
                first = next(i for i, s in enumerate(loop) if s.node is child.node)
                shown = [_where(where, s) for s in (*loop[first:], child)]
                raise InvalidInput(
                    _clip(
                        "schema has a $ref cycle that never reaches a value: "
                        + " → ".join(shown)
                        + "; a recursive schema must recurse through properties or items",
                        300,
                    ),
                    field="schema",
                )
            if seen is None and isinstance(child.node, Mapping):
                state[id(child.node)] = 1
                stack.append((child, _in_place(child)))


def _where(where: Mapping[int, Path], scope: Scope) -> str:
    path = where.get(id(scope.node))
    return "(elsewhere)" if path is None else json_path(path)


_SCHEMA_IN_PLACE = (
    "additionalProperties",
    "contains",
    "else",
    "if",
    "items",
    "not",
    "propertyNames",
    "then",
    "unevaluatedItems",
    "unevaluatedProperties",
    "contentSchema",
)
_SCHEMA_ARRAYS = ("allOf", "anyOf", "oneOf", "prefixItems")
_SCHEMA_MAPS = ("$defs", "definitions", "properties", "patternProperties", "dependentSchemas")


def _subschemas(node: Mapping[str, Any]) -> Iterator[tuple[Path, Any]]:
    for key in _SCHEMA_IN_PLACE:
        if key in node:
            yield (key,), node[key]
    for key in _SCHEMA_ARRAYS:
        for index, child in enumerate(_as_list(node.get(key))):
            yield (key, index), child
    for key in _SCHEMA_MAPS:
        children = node.get(key)
        if isinstance(children, Mapping):
            for name, child in children.items():
                yield (key, name), child


def _fix_paths(error: ValidationError) -> list[Path]:
    """The paths one error says must change (see ``Schema.failing_paths``)."""
    path: Path = tuple(error.absolute_path)
    instance = error.instance
    keyword = error.validator
    wanted: Any = error.validator_value
    if keyword == "required" and isinstance(instance, Mapping):
        return [(*path, name) for name in wanted if name not in instance]
    if keyword == "dependentRequired" and isinstance(instance, Mapping):
        return [
            (*path, need)
            for name, needs in wanted.items()
            if name in instance
            for need in needs
            if need not in instance
        ]
    return [path]


def _child_schema(node: Mapping[str, Any], step: str | int) -> Any:
    """The subschema ``node`` gives a child at ``step`` (a key or an index), if any."""
    if isinstance(step, str):
        properties = node.get("properties")
        if isinstance(properties, Mapping) and step in properties:
            return properties[step]
        extra = node.get("additionalProperties")
        return extra if isinstance(extra, Mapping) else None
    prefix = node.get("prefixItems")
    if isinstance(prefix, list) and step < len(prefix):
        return prefix[step]
    items = node.get("items")
    return items if isinstance(items, Mapping) else None


def _refs(node: Any) -> Iterator[str]:
    stack = [node]
    while stack:
        item = stack.pop()
        if isinstance(item, Mapping):
            for key, child in item.items():
                if key == "$ref" and isinstance(child, str):
                    yield child
                else:
                    stack.append(child)
        elif isinstance(item, list):
            stack.extend(item)
