"""JSON Schema as the simulator needs it: validating, resolving local refs, walking paths.

jsonschema enters the simulator here::

    errors_of(schema, {"qty": "12 units"})     # [ValidationError at ("qty",)]
    at(schema, ("items", 2, "sku"))             # the sub-schema that governs that value
    render_path(("items", 2, "sku"))           # "items[2].sku"
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from jsonschema import Draft202012Validator, ValidationError, validators
from jsonschema.exceptions import SchemaError

Schema = Mapping[str, Any]
Path = tuple[str | int, ...]


def looks_like_schema(value: object) -> bool:
    """A JSON object with ``type`` and ``properties``, or a ``$schema`` key."""
    return isinstance(value, dict) and (
        "$schema" in value or ("type" in value and isinstance(value.get("properties"), dict))
    )


def problem(schema: Schema) -> str | None:
    """Why ``schema`` is not a usable JSON Schema, or ``None`` when it is."""
    if not isinstance(schema, dict):
        return "a JSON Schema must be an object"
    try:
        validators.validator_for(schema, default=Draft202012Validator).check_schema(schema)
    except SchemaError as exc:
        return f"invalid JSON Schema: {exc.message}"
    return None


def errors_of(schema: Schema, value: Any) -> list[ValidationError]:
    cls = validators.validator_for(schema, default=Draft202012Validator)
    return sorted(cls(schema).iter_errors(value), key=lambda e: list(map(str, e.absolute_path)))


def is_valid(schema: Schema, value: Any) -> bool:
    cls = validators.validator_for(schema, default=Draft202012Validator)
    return bool(cls(schema).is_valid(value))


def resolve(node: object, root: Schema) -> dict[str, Any]:
    """``node`` with local ``$ref`` chains followed and ``allOf`` merged; ``{}`` when opaque."""
    seen = 0
    while isinstance(node, dict) and "$ref" in node and seen < 32:
        target = _pointer(root, node["$ref"])
        if target is None:
            break
        extra = {k: v for k, v in node.items() if k != "$ref"}
        node = {**target, **extra} if isinstance(target, dict) else target
        seen += 1
    if not isinstance(node, dict):
        return {}
    if "allOf" in node and isinstance(node["allOf"], list):
        merged: dict[str, Any] = {k: v for k, v in node.items() if k != "allOf"}
        for part in node["allOf"]:
            part = resolve(part, root)
            props = {**merged.get("properties", {}), **part.get("properties", {})}
            required = [*merged.get("required", []), *part.get("required", [])]
            merged = {**part, **merged}
            if props:
                merged["properties"] = props
            if required:
                merged["required"] = list(dict.fromkeys(required))
        return merged
    return dict(node)


def at(root: Schema, path: Path) -> dict[str, Any]:
    """The sub-schema governing the value at ``path`` (``{}`` when the schema does not say)."""
    node = resolve(root, root)
    for step in path:
        node = resolve(_child(node, step, root), root)
    return node


def properties(node: Schema) -> dict[str, Any]:
    props = node.get("properties")
    return props if isinstance(props, dict) else {}


def required(node: Schema) -> list[str]:
    req = node.get("required")
    return [r for r in req if isinstance(r, str)] if isinstance(req, list) else []


def types(node: Schema) -> list[str]:
    """The declared types, inferred from keywords when ``type`` is absent."""
    declared = node.get("type")
    if isinstance(declared, str):
        return [declared]
    if isinstance(declared, list):
        return [t for t in declared if isinstance(t, str)]
    if "properties" in node or "required" in node:
        return ["object"]
    if "items" in node or "prefixItems" in node:
        return ["array"]
    return []


def render_path(path: Sequence[str | int]) -> str:
    """``("a", "b", 2, "c")`` → ``"a.b[2].c"``."""
    out = ""
    for step in path:
        if isinstance(step, int):
            out += f"[{step}]"
        else:
            out += f".{step}" if out else step
    return out


def pointer(path: Sequence[str | int]) -> str:
    """``("a", 2)`` → ``"/a/2"`` (JSON Pointer)."""
    return "".join(f"/{step}" for step in path)


def _child(node: Schema, step: str | int, root: Schema) -> object:
    if isinstance(step, int):
        prefix = node.get("prefixItems")
        if isinstance(prefix, list) and step < len(prefix):
            return prefix[step]
        items = node.get("items")
        if isinstance(items, list):
            return items[step] if step < len(items) else {}
        return items if isinstance(items, dict) else {}
    props = properties(node)
    if step in props:
        return props[step]
    extra = node.get("additionalProperties")
    if isinstance(extra, dict):
        return extra
    options = [
        o for key in ("anyOf", "oneOf") if isinstance(node.get(key), list) for o in node[key]
    ]
    for option in options:
        option = resolve(option, root)
        if step in properties(option):
            return properties(option)[step]
    return {}


def _pointer(root: Schema, ref: object) -> object:
    if not isinstance(ref, str) or not ref.startswith("#"):
        return None
    node: object = root
    for raw in ref[1:].split("/")[1:] if ref != "#" else []:
        key = raw.replace("~1", "/").replace("~0", "~")
        if isinstance(node, dict) and key in node:
            node = node[key]
        elif isinstance(node, list) and key.isdigit() and int(key) < len(node):
            node = node[int(key)]
        else:
            return None
    return node
