"""A quick yes for values of plain schemas: the ones signatures compile to, and most others.

    check = plain_check({"type": "object", "properties": {"age": {"type": "integer"}}})
    check({"age": 3})        # True: the schema takes it
    check({"age": "3"})      # False: it may not; ask the full validator
    plain_check({"$ref": "#/$defs/x"})   # None: not a plain schema

A plain schema uses only ``type``, ``properties``, ``required``, ``additionalProperties``,
``items``, ``anyOf``, ``enum`` (of strings and null), the numeric, length and item-count
bounds, and annotations. For such a schema the check is a few dict lookups per value, where
jsonschema's validator (``app.core.schema.keywords``) evolves a validator per subschema. It only
ever says yes when JSON Schema 2020-12 (as ``app.core.schema.validation.Schema`` runs it) would:
a no, or any doubt, goes to the full validator, which says why. Each schema node a value
meets is charged one step of the work budget in force (``app.core.schema.steps``).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Final

from app.core.schema.steps import charge

Check = Callable[[Any], bool]

# Keywords that never make a value invalid.
_ANNOTATIONS: Final = frozenset(
    {
        "$schema",
        "$comment",
        "title",
        "description",
        "default",
        "examples",
        "deprecated",
        "readOnly",
        "writeOnly",
    }
)
_BOUNDS: Final = {
    "minimum": "number",
    "maximum": "number",
    "exclusiveMinimum": "number",
    "exclusiveMaximum": "number",
    "minLength": "string",
    "maxLength": "string",
    "minItems": "array",
    "maxItems": "array",
}
_KEYWORDS: Final = (
    _ANNOTATIONS
    | frozenset(
        {"type", "properties", "required", "additionalProperties", "items", "anyOf", "enum"}
    )
    | frozenset(_BOUNDS)
)
_MAX_DEPTH: Final = 64


def _is_number(value: Any) -> bool:
    return type(value) is int or type(value) is float


# The types of the values json.loads makes; a value of any other type (a tuple, a
# subclass, a Decimal) is left to the full validator.
_JSON_TYPES: Final = frozenset({str, int, float, bool, type(None), dict, list})
# JSON Schema's types over those values.
_TYPES: Final[dict[str, Check]] = {
    "string": lambda value: type(value) is str,
    "integer": lambda value: type(value) is int or (type(value) is float and value.is_integer()),
    "number": _is_number,
    "boolean": lambda value: type(value) is bool,
    "null": lambda value: value is None,
    "object": lambda value: type(value) is dict,
    "array": lambda value: type(value) is list,
}


def plain_check(schema: Any) -> Check | None:
    """The quick check of ``schema``, or None when it is not a plain schema."""
    return _node(schema, 0)


def _yes(value: Any) -> bool:
    return True


def _no(value: Any) -> bool:
    return False


def _node(node: Any, depth: int) -> Check | None:
    if node is True:
        return _yes
    if node is False:
        return _no
    if type(node) is not dict or depth > _MAX_DEPTH or not node.keys() <= _KEYWORDS:
        return None
    checks: list[Check] = []
    for part in (_type_part, _enum_part, _bounds_part, _object_part, _items_part, _any_part):
        found = part(node, depth)
        if found is None:
            return None
        checks.extend(found)
    return _all_check(tuple(checks))


# Each part of a node: its checks (none when its keywords are absent), or None when the
# keywords are there in a form this module does not know.
Part = list[Check] | None


def _type_part(node: dict[str, Any], depth: int) -> Part:
    if "type" not in node:
        return []
    kind = _type_check(node["type"])
    return None if kind is None else [kind]


def _enum_part(node: dict[str, Any], depth: int) -> Part:
    if "enum" not in node:
        return []
    enum = _enum_check(node["enum"])
    return None if enum is None else [enum]


def _bounds_part(node: dict[str, Any], depth: int) -> Part:
    checks = []
    for keyword, applies_to in _BOUNDS.items():
        if keyword in node:
            bound = _bound_check(keyword, node[keyword], _TYPES[applies_to])
            if bound is None:
                return None
            checks.append(bound)
    return checks


def _object_part(node: dict[str, Any], depth: int) -> Part:
    if not node.keys() & {"properties", "required", "additionalProperties"}:
        return []
    fields = _object_check(node, depth)
    return None if fields is None else [fields]


def _items_part(node: dict[str, Any], depth: int) -> Part:
    if "items" not in node:
        return []
    item = _node(node["items"], depth + 1)
    return None if item is None else [_items_check(item)]


def _any_part(node: dict[str, Any], depth: int) -> Part:
    if "anyOf" not in node:
        return []
    branches = node["anyOf"]
    if type(branches) is not list or not branches:
        return None
    alternatives = []
    for branch in branches:
        alternative = _node(branch, depth + 1)
        if alternative is None:
            return None
        alternatives.append(alternative)
    return [_any_check(alternatives)]


def _all_check(checks: tuple[Check, ...]) -> Check:
    def check(value: Any) -> bool:
        charge(1)
        if type(value) not in _JSON_TYPES:
            return False  # not a value json.loads makes (a tuple, a subclass): the full way
        return all(one(value) for one in checks)

    return check


def _type_check(declared: Any) -> Check | None:
    if type(declared) is str:
        return _TYPES.get(declared)
    if type(declared) is not list or not declared:
        return None
    kinds = [_TYPES.get(name) if type(name) is str else None for name in declared]
    found = tuple(kind for kind in kinds if kind is not None)
    if len(found) < len(kinds):
        return None
    return lambda value: any(kind(value) for kind in found)


def _enum_check(members: Any) -> Check | None:
    """The check of an enum of strings (and null): one of those strings, or a listed null.

    JSON Schema's equality tells true from 1, and no string equals anything but a string.
    """
    if type(members) is not list or not members:
        return None
    if not all(member is None or type(member) is str for member in members):
        return None
    strings = frozenset(member for member in members if member is not None)
    null = None in members
    return lambda value: (type(value) is str and value in strings) or (null and value is None)


def _bound_check(keyword: str, bound: Any, applies: Check) -> Check | None:
    if not _is_number(bound):
        return None
    if keyword in ("minLength", "maxLength", "minItems", "maxItems"):
        if type(bound) is not int:
            return None
        if keyword.startswith("min"):
            return lambda value: not applies(value) or len(value) >= bound
        return lambda value: not applies(value) or len(value) <= bound
    compare: Check = {
        "minimum": lambda value: value >= bound,
        "maximum": lambda value: value <= bound,
        "exclusiveMinimum": lambda value: value > bound,
        "exclusiveMaximum": lambda value: value < bound,
    }[keyword]
    return lambda value: not applies(value) or compare(value)


def _object_check(node: dict[str, Any], depth: int) -> Check | None:
    properties = node.get("properties", {})
    required = node.get("required", [])
    if type(properties) is not dict or type(required) is not list:
        return None
    if not all(type(name) is str for name in required):
        return None
    fields: dict[str, Check] = {}
    for name, sub in properties.items():
        field = _node(sub, depth + 1)
        if field is None:
            return None
        fields[name] = field
    other = _node(node.get("additionalProperties", True), depth + 1)
    if other is None:
        return None
    return _fields_check(fields, tuple(required), None if other is _yes else other)


def _fields_check(fields: dict[str, Check], needed: tuple[str, ...], other: Check | None) -> Check:
    """``properties``, ``required`` and ``additionalProperties`` (None: any)."""

    def check(value: Any) -> bool:
        if type(value) is not dict:
            return True  # these keywords apply to objects only
        for name in needed:
            if name not in value:
                return False
        for name, item in value.items():
            sub = fields.get(name, other)
            if sub is not None and not sub(item):
                return False
        return True

    return check


def _items_check(item: Check) -> Check:
    def check(value: Any) -> bool:
        if type(value) is not list:
            return True  # items applies to arrays only
        return all(item(one) for one in value)

    return check


def _any_check(alternatives: list[Check]) -> Check:
    found = tuple(alternatives)
    return lambda value: any(alternative(value) for alternative in found)
