"""A field-level patch: ask again for only the parts of an answer that failed, then merge.

When an answer parsed as an object and only some of its paths failed (the schema's errors,
or the paths a declarative validator read), the next re-ask asks for just those parts,
keyed by JSON Pointer, under a sub-schema (constrained decoding where the provider has
it), and the answer is merged into the last candidate; the merged value is checked whole::

    patch = plan(candidate, paths, schema, mode="auto")   # None: re-ask for the whole answer
    patch.pointers                                          # ("/population",)
    patch.schema                                            # {"type": "object", "properties":
                                                            #   {"/population": {...}}, ...}
    merged = merge(patch, {"/population": 8})
    merged.value                                            # the candidate, fixed

Pure: no I/O; the schema work goes through ``app.core.schema.validation``.
"""

from __future__ import annotations

import copy
import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from functools import lru_cache
from typing import Any, Final

from app.core.schema.validation import Path, Schema, check_schema
from app.core.wire.errors import InvalidInput
from app.core.wire.spec import RetryMode

__all__ = [
    "MAX_PATCH_PATHS",
    "Merged",
    "Patch",
    "RetryMode",
    "merge",
    "plan",
    "pointer",
    "value_at",
]

# More failing parts than this and the answer is asked for whole: a patch that long is no
# smaller question.
MAX_PATCH_PATHS: Final = 8
# Past this many failing paths, they are not even sorted into parts (the answer is asked
# for whole): folding inner paths into outer ones is quadratic.
_PATHS_READ: Final = 64


@dataclass(frozen=True, slots=True)
class Patch:
    """What a patch re-ask asks for: the parts of ``base`` at ``paths``, under ``schema``."""

    base: Any
    paths: tuple[Path, ...]
    schema: dict[str, Any]

    @property
    def pointers(self) -> tuple[str, ...]:
        return tuple(pointer(p) for p in self.paths)


@dataclass(frozen=True, slots=True)
class Merged:
    """The candidate with the patch applied; ``ignored`` names the answer's keys that were
    not asked for, ``missing`` the pointers it did not answer (left as they were)."""

    value: Any
    ignored: tuple[str, ...]
    missing: tuple[str, ...]


def pointer(path: Sequence[str | int]) -> str:
    """RFC 6901: ``("lines", 2, "a/b")`` → ``"/lines/2/a~1b"``; the root is ``""``."""
    return "".join("/" + str(step).replace("~", "~0").replace("/", "~1") for step in path)


def plan(
    value: Any, paths: Sequence[Path] | None, schema: Mapping[str, Any], *, mode: RetryMode
) -> Patch | None:
    """The patch for a rejected ``value`` whose failing ``paths`` are known; None: whole.

    Whole for mode ``whole``, no paths, a root-level failure, a value that is not an
    object, too many paths, a part whose subschema cannot stand alone, and under ``auto``
    paths that leave no field of the answer untouched.
    """
    if mode == "whole" or not paths or not isinstance(value, dict):
        return None
    if len(paths) > _PATHS_READ:
        return None
    chosen = _outermost(paths)
    if any(not p for p in chosen) or len(chosen) > MAX_PATCH_PATHS:
        return None
    if mode == "auto" and not _leaves_untouched(value, chosen):
        return None
    compiled = Schema(schema)
    parts: dict[str, Any] = {}
    defs: dict[str, Any] = {}
    for path in chosen:
        part = compiled.schema_at(path)
        if part is None:
            return None
        defs.update(part.pop("$defs", {}) or {})
        parts[pointer(path)] = part
    patch_schema: dict[str, Any] = {
        "type": "object",
        "properties": parts,
        "required": list(parts),
        "additionalProperties": False,
    }
    if defs:
        patch_schema["$defs"] = defs
    if not _usable(json.dumps(patch_schema, sort_keys=True, ensure_ascii=False)):
        return None
    return Patch(base=value, paths=chosen, schema=patch_schema)


@lru_cache(maxsize=1024)
def _usable(text: str) -> bool:
    """Whether a patch schema (as canonical JSON) passes ``check_schema``: once per text.

    Every item of a batch, and every job of one schema, plans the same few patch schemas;
    the meta-schema check was half the CPU of a batch item's replay (docs/benchmarks/
    batches.md)."""
    try:
        check_schema(json.loads(text))
    except InvalidInput:
        return False
    return True


def merge(patch: Patch, answer: Any) -> Merged:
    """``patch.base`` with each asked-for part taken from ``answer``.

    ``answer`` is the object keyed by pointer that was asked for. A model that answered
    the whole object instead is understood too: the parts are then read at their paths.
    Keys not asked for are ignored (and named); the base is never modified.
    """
    value = copy.deepcopy(patch.base)
    asked = patch.pointers
    ignored: list[str] = []
    missing: list[str] = []
    by_pointer = isinstance(answer, Mapping) and any(key in answer for key in asked)
    if isinstance(answer, Mapping):
        if by_pointer:
            ignored = [str(key) for key in answer if key not in asked]
        else:
            top = {p[0] for p in patch.paths}
            ignored = [str(key) for key in answer if key not in top]
    for path, key in zip(patch.paths, asked, strict=True):
        if by_pointer:
            assert isinstance(answer, Mapping)
            if key not in answer:
                missing.append(key)
                continue
            part = answer[key]
        else:
            found, part = value_at(answer, path)
            if not found:
                missing.append(key)
                continue
        if not _put(value, path, copy.deepcopy(part)):
            missing.append(key)
    return Merged(value=value, ignored=tuple(ignored), missing=tuple(missing))


def _outermost(paths: Sequence[Path]) -> tuple[Path, ...]:
    """The distinct paths, without those inside another one (the outer part is asked whole)."""
    unique = list(dict.fromkeys(tuple(p) for p in paths))
    return tuple(p for p in unique if not any(q != p and p[: len(q)] == q for q in unique))


def _leaves_untouched(value: Any, paths: Sequence[Path]) -> bool:
    """Whether some leaf of ``value`` (a scalar, or an empty object or array) lies outside
    every path: the failing parts are then a strict subset of the answer."""
    stack: list[tuple[Path, Any]] = [((), value)]
    while stack:
        at, node = stack.pop()
        if at and any(at[: len(p)] == p for p in paths):
            continue
        if isinstance(node, dict) and node:
            stack.extend(((*at, k), v) for k, v in node.items())
        elif isinstance(node, list) and node:
            stack.extend(((*at, i), v) for i, v in enumerate(node))
        elif at:
            return True
    return False


def value_at(value: Any, path: Path) -> tuple[bool, Any]:
    """Whether ``path`` reaches a value inside ``value``, and that value."""
    node = value
    for step in path:
        in_object = isinstance(node, Mapping) and isinstance(step, str) and step in node
        in_array = isinstance(node, list) and isinstance(step, int) and 0 <= step < len(node)
        if not (in_object or in_array):
            return False, None
        node = node[step]
    return True, node


def _put(value: Any, path: Path, part: Any) -> bool:
    """Set ``part`` at ``path`` inside ``value`` (a new key on an object is fine; a missing
    parent or an index past the end is not)."""
    found, parent = value_at(value, path[:-1])
    last = path[-1]
    if not found:
        return False
    if isinstance(parent, dict) and isinstance(last, str):
        parent[last] = part
        return True
    if isinstance(parent, list) and isinstance(last, int) and 0 <= last < len(parent):
        parent[last] = part
        return True
    return False
