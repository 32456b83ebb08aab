"""A GBNF grammar for a JSON Schema, with the digits of its numbers bounded.

For the embedded llama.cpp server (``ModelConfig.grammar``): under the grammar llama.cpp
makes from a schema, a number may run to 16 integral and 16 fractional digits, and a small
model keeps emitting digits (a count of two becomes ``2016``, a price of ``45.88`` becomes
``45.88639742302659``). The grammar sent instead is llama-cpp-python's own conversion of
the schema (``llama_cpp.llama_grammar.json_schema_to_gbnf``) with its two digit rules
bounded::

    bounded_grammar({"type": "object", "properties": {"n": {"type": "integer"}}})
    # '... integral-part ::= [0-9] | [1-9] ([0-9] (...)?)? ...': at most DEFAULT_INTEGER_DIGITS

The bounds come from the schema's own numeric bounds when every number in it has them
(``maximum: 500`` allows three integral digits; ``multipleOf: 0.01`` two fractional ones),
else the defaults. Only the grammar is bounded: the answer is still checked against the
job's own schema. ``None`` when llama-cpp-python is not installed, the schema has no
number, or the conversion fails: the caller then sends the schema as it would have.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Iterator, Mapping
from decimal import Decimal
from typing import Any, Final

DEFAULT_INTEGER_DIGITS: Final = 10
DEFAULT_FRACTION_DIGITS: Final = 6
_RULE: Final = re.compile(r"^(integral-part|decimal-part) ::= .*$", re.MULTILINE)
_EXPONENT: Final = " ([eE] [-+]? integral-part)?"
_BOUNDS: Final = ("minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum")


def bounded_grammar(schema: Mapping[str, Any]) -> str | None:
    """The grammar (see the module docstring), or ``None`` to send the schema instead."""
    try:
        from llama_cpp.llama_grammar import json_schema_to_gbnf
    except ImportError:
        return None
    try:
        grammar = json_schema_to_gbnf(json.dumps(schema))
    except Exception:  # its converter asserts on schemas it cannot read
        return None
    if not _RULE.search(grammar):
        return None
    integer, fraction = digit_bounds(schema)

    def bounded(match: re.Match[str]) -> str:
        if match[1] == "integral-part":
            return f"integral-part ::= [0-9] | [1-9] {_up_to('[0-9]', integer - 1)}".rstrip()
        return f"decimal-part ::= [0-9] {_up_to('[0-9]', fraction - 1)}".rstrip()

    # No exponent: under it a bounded number still runs away (``723.82e-1500000000``).
    return _RULE.sub(bounded, grammar).replace(_EXPONENT, "")


def digit_bounds(schema: Mapping[str, Any]) -> tuple[int, int]:
    """The most integral and fractional digits a number of ``schema`` needs."""
    integer = fraction = 0
    bounded_all = fractions_all = True
    for node in _number_nodes(schema):
        limits = [node[k] for k in _BOUNDS if _is_number(node.get(k))]
        if limits:
            integer = max(integer, *(_integral_digits(v) for v in limits))
        else:
            bounded_all = False
        step: Any = node.get("multipleOf")
        if node.get("type") == "integer":
            continue
        if _is_number(step) and step > 0:
            fraction = max(fraction, _fraction_digits(float(step)))
        else:
            fractions_all = False
    return (
        max(integer, 1) if bounded_all and integer else DEFAULT_INTEGER_DIGITS,
        max(fraction, 1) if fractions_all and fraction else DEFAULT_FRACTION_DIGITS,
    )


def _up_to(item: str, count: int) -> str:
    """``count`` optional ``item``s, nested as llama.cpp's own rules are."""
    text = ""
    for _ in range(max(count, 0)):
        text = f"({item} {text})?" if text else f"({item})?"
    return text


def _is_number(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value)


def _integral_digits(value: float) -> int:
    return len(str(int(abs(value))))


def _fraction_digits(value: float) -> int:
    exponent = Decimal(repr(value)).normalize().as_tuple().exponent
    return max(-exponent, 0) if isinstance(exponent, int) else DEFAULT_FRACTION_DIGITS


def _number_nodes(schema: Any) -> Iterator[Mapping[str, Any]]:
    stack = [schema]
    while stack:
        node = stack.pop()
        if isinstance(node, list):
            stack.extend(node)
        elif isinstance(node, Mapping):
            kind = node.get("type")
            kinds = {kind} if isinstance(kind, str) else set(kind or [])
            if kinds & {"integer", "number"}:
                yield node
            stack.extend(v for k, v in node.items() if k not in ("enum", "const", "default"))
