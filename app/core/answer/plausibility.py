"""Default checks for wrong answers a schema cannot see, for jobs with an ``input``.

    check = Plausibility.of(job_input="It weighs 45 kg.", schema=schema, task="Extract it.")
    check.diagnosis({"weight": 1205.8924563229766})
    # '$.weight: 1205.8924563229766 occurs nowhere in the input and has 17
    #  digits, more than any number there (at most 2); give the number as the input states it'
    check.diagnosis({"weight": 45})   # None

Two checks, each a rejection the model can act on (the loop re-asks with it):

- **runaway numbers**: a number that no numeral of the input means (``app.core.text.numerals``:
  "1,234.50" is 1234.5) nor its English words ("twelve", ``app.core.text.number_words``),
  and that carries more digits than any number in the input (and more than
  ``FREE_DIGITS``: small counts, scores and sums are never questioned). A grammar lets the
  digits of a small model run on ("2" becomes "2016", "45.88" becomes "45.88639742302659").
- **copied instructions**: a string that is not in the input but is the prompt's own text:
  a field name, a type word, a schema keyword or constraint (``">=10"``), or a field's
  description or the task (or a long part of one).

A job turns them off with ``"checks": {"plausibility": false}``. Pure and bounded: the
input is read once (``Plausibility.of``), every answer value is looked at once.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from decimal import Decimal
from typing import Any, Final

from app.core.schema.steps import charge
from app.core.schema.validation import brief, json_path
from app.core.text.number_words import word_numbers
from app.core.text.numerals import numerals, value_of

Path = tuple[str | int, ...]

# Numbers with at most this many digits are never called runaway.
FREE_DIGITS: Final = 3
# A number this many integral digits wider than the input's widest is a runaway.
WIDER_BY: Final = 2
# A string of at least this many characters that is part of a description or the task is
# a copy of the prompt's text.
COPIED_CHARS: Final = 16
# Descriptions at least this long are looked for inside answer strings.
DESCRIPTION_CHARS: Final = 12
_INPUT_CHARS: Final = 1_000_000  # read at most this much of the input
_WORDS: Final = {
    "string", "integer", "number", "boolean", "null", "object", "array", "float", "int",
    "str", "bool", "list", "value", "text", "name", "none", "n/a", "...", "…", "<string>",
    "<value>", "<number>", "<integer>", "todo", "example", "placeholder",
}  # fmt: skip
_KEYWORDS: Final = {
    "minimum", "maximum", "exclusiveminimum", "exclusivemaximum", "minlength", "maxlength",
    "pattern", "format", "enum", "const", "required", "properties", "items", "type",
    "description", "minitems", "maxitems", "multipleof",
}  # fmt: skip
_BOUND_SIGNS: Final = {
    "minimum": (">=", "≥"),
    "maximum": ("<=", "≤"),
    "exclusiveMinimum": (">",),
    "exclusiveMaximum": ("<",),
}
_SPACE: Final = re.compile(r"\s+")


def _fold(text: str) -> str:
    return _SPACE.sub(" ", text).strip().casefold()


def significant_digits(number: Decimal) -> int:
    """How many significant digits ``number`` carries (2000 has 1, 45.5 has 3, 0.05 has 1)."""
    digits = "".join(str(d) for d in number.as_tuple().digits).strip("0")
    return max(len(digits), 1)


def integral_digits(number: Decimal) -> int:
    """How many digits the whole part of ``number`` has (0.5 has 0, 3000000000 has 10)."""
    whole = abs(int(number))
    return len(str(whole)) if whole else 0


@dataclass(frozen=True, slots=True)
class Plausibility:
    """The checks for one job (see the module docstring); made once per job."""

    input_text: str  # folded
    known: frozenset[Decimal]  # every number the input states
    most_digits: int  # the most significant digits of a number in the input
    widest: int | None  # the most integral digits of a number in the input (None: no number)
    exact: frozenset[str]  # folded prompt words a value must not be
    phrases: tuple[str, ...]  # folded descriptions and the task
    allowed: frozenset[str]  # folded enum and const strings: the schema's own answers

    @classmethod
    def of(cls, *, job_input: Any, schema: Mapping[str, Any], task: str) -> Plausibility:
        text = (
            job_input if isinstance(job_input, str) else json.dumps(job_input, ensure_ascii=False)
        )
        text = text[:_INPUT_CHARS]
        known: set[Decimal] = set()
        most = 0
        widest: int | None = None
        for numeral in numerals(text):
            known.update(numeral.values)
            most = max(most, *(significant_digits(v) for v in numeral.values))
            widest = max(widest or 0, *(integral_digits(v) for v in numeral.values))
        known.update(word_numbers(text))
        exact, phrases, allowed = _prompt_text(schema)
        task_folded = _fold(task)
        return cls(
            input_text=_fold(text),
            known=frozenset(known),
            most_digits=most,
            widest=widest,
            exact=frozenset(exact),
            phrases=(*phrases, task_folded),
            allowed=frozenset(allowed),
        )

    def diagnosis(self, value: Any) -> str | None:
        """None when every value is plausible; else what is wrong, and what to do instead."""
        for path, leaf in _leaves(value):
            charge(1)
            problem = self._number(leaf) if _is_number(leaf) else None
            if isinstance(leaf, str):
                problem = self._string(leaf)
            if problem is not None:
                return f"{json_path(path)}: {problem}"
        return None

    def _number(self, number: int | float) -> str | None:
        exact = value_of(number)
        if exact is None or exact in self.known or -exact in self.known:
            return None
        digits = significant_digits(exact)
        if digits > max(self.most_digits, FREE_DIGITS):
            return (
                f"{brief(number)} occurs nowhere in the input and has {digits} significant "
                f"digits, more than any number there (at most {self.most_digits}); "
                "give the number as the input states it"
            )
        # Digits that ran on as zeros (3 -> 3000000000): far wider than any number the
        # input holds (an input without numbers says nothing about widths).
        width = integral_digits(exact)
        if self.widest is not None and width > max(self.widest + WIDER_BY, FREE_DIGITS):
            return (
                f"{brief(number)} occurs nowhere in the input and has {width} digits before "
                f"the point, far more than any number there (at most {self.widest}); "
                "give the number as the input states it"
            )
        return None

    def _string(self, text: str) -> str | None:
        folded = _fold(text)
        if not folded or folded in self.allowed or folded in self.input_text:
            return None
        if folded in self.exact:
            return (
                f"{brief(text)} is the prompt's own wording (a field name, type or constraint), "
                "not a value from the input; give the value the input states"
            )
        for phrase in self.phrases:
            charge(1 + len(phrase) // 256)
            copied = len(folded) >= COPIED_CHARS and folded in phrase
            if copied or (len(phrase) >= DESCRIPTION_CHARS and phrase in folded):
                return (
                    f"{brief(text)} copies the instructions (the task or a field's description), "
                    "not text from the input; give the value the input states"
                )
        return None


def _is_number(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


def _leaves(value: Any) -> Iterator[tuple[Path, Any]]:
    stack: list[tuple[Path, Any]] = [((), value)]
    while stack:
        path, node = stack.pop()
        if isinstance(node, Mapping):
            stack.extend(((*path, k), v) for k, v in reversed(list(node.items())))
        elif isinstance(node, list):
            stack.extend(((*path, i), v) for i, v in reversed(list(enumerate(node))))
        else:
            yield path, node


def _prompt_text(schema: Mapping[str, Any]) -> tuple[set[str], list[str], set[str]]:
    """Words a value must not be, phrases it must not copy, and strings the schema allows."""
    exact = set(_WORDS) | set(_KEYWORDS)
    phrases: list[str] = []
    allowed: set[str] = set()
    for node in _schema_nodes(schema):
        phrases.extend(
            _fold(node[key])
            for key in ("description", "title")
            if isinstance(node.get(key), str) and node[key].strip()
        )
        exact.update(_constraint_words(node))
        for choice in [*(node.get("enum") or []), node.get("const")]:
            if isinstance(choice, str):
                allowed.add(_fold(choice))
        for key in ("properties", "patternProperties"):
            if isinstance(node.get(key), Mapping):
                exact.update(_fold(str(name)) for name in node[key])
    exact.discard("")
    return exact, phrases, allowed


def _constraint_words(node: Mapping[str, Any]) -> Iterator[str]:
    """A node's bounds as a prompt writes them (``>=10``), its pattern and format name."""
    for key, signs in _BOUND_SIGNS.items():
        bound = node.get(key)
        if isinstance(bound, int | float) and not isinstance(bound, bool):
            for sign in signs:
                yield f"{sign}{_num(bound)}"
                yield f"{sign} {_num(bound)}"
    for key in ("pattern", "format"):
        if isinstance(node.get(key), str):
            yield _fold(node[key])


_NOT_SCHEMAS: Final = frozenset({"enum", "const", "default", "examples", "description", "title"})


def _schema_nodes(schema: Mapping[str, Any]) -> Iterator[Mapping[str, Any]]:
    """Every subschema of ``schema`` (data keywords such as ``enum`` are not walked)."""
    stack: list[Any] = [schema]
    while stack:
        node = stack.pop()
        if isinstance(node, list):
            stack.extend(node)
        elif isinstance(node, Mapping):
            yield node
            for key, child in node.items():
                if key in ("properties", "patternProperties", "$defs", "dependentSchemas"):
                    if isinstance(child, Mapping):
                        stack.extend(child.values())
                elif key not in _NOT_SCHEMAS:
                    stack.append(child)


def _num(value: int | float) -> str:
    return json.dumps(value)
