"""Strings that match a regular expression, for JSON Schema ``pattern``.

Walks the tree of the standard library's own regex parser::

    example("^[A-Z]{3}-\\d{4}$", random.Random(1))   # e.g. "QXT-0472"

Returns ``None`` for constructs it cannot honour (look-arounds, back-references);
the caller then falls back and lets validation decide.
"""

from __future__ import annotations

import importlib
import random
import re
import string
from typing import Any

# re._parser has no type stubs and sre_parse warns on import; reach it untyped.
_parser: Any = importlib.import_module("re._parser")

_CATEGORIES = {
    "CATEGORY_DIGIT": string.digits,
    "CATEGORY_NOT_DIGIT": string.ascii_letters,
    "CATEGORY_WORD": string.ascii_letters + string.digits + "_",
    "CATEGORY_NOT_WORD": " -.,;",
    "CATEGORY_SPACE": " ",
    "CATEGORY_NOT_SPACE": string.ascii_letters + string.digits,
}
_PRINTABLE = string.ascii_letters + string.digits
_UNBOUNDED_EXTRA = 3


class _Unsupported(Exception):
    pass


def example(pattern: str, rnd: random.Random) -> str | None:
    """A string that ``re.search(pattern, ...)`` accepts, or ``None`` if none was found."""
    try:
        candidate = _emit(_parser.parse(pattern), rnd)
        return candidate if re.search(pattern, candidate) else None
    except Exception:  # re.error, _Unsupported, or a tree shape this walker does not know
        return None


def _emit(items: Any, rnd: random.Random) -> str:
    return "".join(_emit_one(op.name, av, rnd) for op, av in items)


def _emit_one(op: str, av: Any, rnd: random.Random) -> str:
    if op == "LITERAL":
        return chr(av)
    if op == "NOT_LITERAL":
        return rnd.choice([c for c in _PRINTABLE if ord(c) != av])
    if op == "ANY":
        return rnd.choice(_PRINTABLE)
    if op == "IN":
        return _emit_class(av, rnd)
    if op in ("MAX_REPEAT", "MIN_REPEAT", "POSSESSIVE_REPEAT"):
        low, high, sub = av
        top = low + _UNBOUNDED_EXTRA if high == _parser.MAXREPEAT else high
        count = rnd.randint(low, max(low, min(top, low + _UNBOUNDED_EXTRA)))
        return "".join(_emit(sub, rnd) for _ in range(count))
    if op == "SUBPATTERN":
        return _emit(av[-1], rnd)
    if op == "ATOMIC_GROUP":
        return _emit(av, rnd)
    if op == "BRANCH":
        return _emit(rnd.choice(av[1]), rnd)
    if op == "AT":
        return ""
    raise _Unsupported(op)


def _emit_class(items: Any, rnd: random.Random) -> str:
    choices: list[str] = []
    negate = False
    for op, av in items:
        name = op.name
        if name == "NEGATE":
            negate = True
        elif name == "LITERAL":
            choices.append(chr(av))
        elif name == "RANGE":
            low, high = av
            choices.extend(chr(c) for c in range(low, min(high, low + 200) + 1))
        elif name == "CATEGORY":
            choices.extend(_CATEGORIES.get(av.name, ""))
        else:
            raise _Unsupported(name)
    if negate:
        excluded = set(choices)
        choices = [c for c in _PRINTABLE if c not in excluded]
    if not choices:
        raise _Unsupported("empty class")
    return rnd.choice(choices)
