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

Before them, a runaway number that is a number of the input with more decimals run on
(``45.88639742302659`` where the input states ``45.88``) is trimmed back to that number
(``Plausibility.repaired``, with a warning); the caller checks the trimmed answer against
the schema again. A model that ran on once writes the same digits when re-asked.

A job turns them off with ``"checks": {"plausibility": false}``. Pure and bounded: the
input is read once (``Plausibility.of``), every answer value is looked at once.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator, Mapping, Set
from dataclasses import dataclass, field
from decimal import Decimal
from typing import Any, Final

from app.core.answer.patch import pointer
from app.core.schema.steps import charge
from app.core.schema.validation import brief, compiled, json_path
from app.core.text.number_words import word_numbers
from app.core.text.numerals import numerals, value_of

Path = tuple[str | int, ...]

# Numbers with at most this many digits are never called runaway.
FREE_DIGITS: Final = 3
# A number this many integral digits wider than the input's widest is a runaway ...
WIDER_BY: Final = 2
# ... if it has more integral digits than this: a round number below a million (a
# population, 3 h in seconds) comes from knowledge or a conversion as often as not, while
# digits that ran on as zeros run to the grammar's bound (10 digits by default).
FREE_WIDTH: Final = 6
# A string of at least this many characters that is part of a description or the task is
# a copy of the prompt's text.
COPIED_CHARS: Final = 16
# Descriptions at least this long are looked for inside answer strings.
DESCRIPTION_CHARS: Final = 12
_INPUT_CHARS: Final = 1_000_000  # read at most this much of the input
# A re-ask after a repeated runaway number lists at most this many of the input's numbers.
STATED_NUMBERS: Final = 12
RAN_ON: Final = "the digits ran on past the number the input states"
# A re-ask shows the answer with its runaway numbers replaced when it is at most this long.
INSTEAD_CHARS: Final = 400
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
    stated: tuple[str, ...] = ()  # the input's numbers as it writes them (words as digits)
    stated_values: tuple[Decimal, ...] = ()  # their values, in the same order
    schema: Mapping[str, Any] = field(default_factory=dict)  # the job's output schema
    # The input's numerals by sign and whole part: their decimals as written ("45.80": "80").
    decimals: Mapping[tuple[bool, str], frozenset[str]] = field(default_factory=dict)

    @classmethod
    def of(cls, *, job_input: Any, schema: Mapping[str, Any], task: str) -> Plausibility:
        text = (
            job_input if isinstance(job_input, str) else json.dumps(job_input, ensure_ascii=False)
        )
        text = text[:_INPUT_CHARS]
        # A JSON input's strings as written, not JSON-escaped ('"' is not '\\"'): the
        # answer's strings are looked for in them.
        strings = "" if isinstance(job_input, str) else "\n".join(_strings(job_input))
        known: set[Decimal] = set()
        stated: dict[str, Decimal] = {}
        most = 0
        widest: int | None = None
        decimals: dict[tuple[bool, str], set[str]] = {}
        for numeral in numerals(text):
            known.update(numeral.values)
            for v in numeral.values:
                negative, whole, fraction = _parts(v)
                decimals.setdefault((negative, whole), set()).add(fraction)
            # "1,234" is 1234 or 1.234: the reading with the widest whole part.
            wide = max(numeral.values, key=lambda v: (integral_digits(v), v))
            stated.setdefault(text[numeral.start : numeral.end], wide)
            most = max(most, *(significant_digits(v) for v in numeral.values))
            widest = max(widest or 0, *(integral_digits(v) for v in numeral.values))
        words = word_numbers(text)
        known.update(words)
        for v in sorted(words):
            stated.setdefault(_num_text(v), v)
        exact, phrases, allowed = _prompt_text(schema)
        task_folded = _fold(task)
        return cls(
            input_text=_fold(text) + ("\n" + _fold(strings[:_INPUT_CHARS]) if strings else ""),
            known=frozenset(known),
            most_digits=most,
            widest=widest,
            exact=frozenset(exact),
            phrases=(*phrases, task_folded),
            allowed=frozenset(allowed),
            stated=tuple(stated)[: STATED_NUMBERS + 1],
            stated_values=tuple(stated.values())[: STATED_NUMBERS + 1],
            schema=schema,
            decimals={k: frozenset(v) for k, v in decimals.items()},
        )

    def repaired(self, value: Any) -> tuple[Any, tuple[str, ...]]:
        """``value`` with every runaway number that is a number of the input with more
        decimals run on trimmed back to that number, and a warning for each.

        Only a number the checks would reject, only to a numeral the input writes with
        decimals, with the same sign and whole part and the input's decimals as the first
        of its own (``13.204567`` for ``13.2``). Never ``3000000000`` for ``3``, nor
        ``3.3333333`` for ``3`` (a quotient, perhaps), nor ``13.21234`` for ``13.2``.
        ``value`` itself and no warnings when nothing is trimmed. The caller checks the
        trimmed value against the schema.
        """
        notes: list[str] = []
        for path, leaf, exact in self._runaways(value):
            stated = self._stated_prefix(exact)
            if stated is None:
                continue
            value = _with(value, path, float(stated))
            notes.append(
                f"plausibility: {pointer(path) or 'the answer'} {brief(leaf)} trimmed to {stated}, "
                "the number the input states"
            )
        return value, tuple(notes)

    def _runaways(self, value: Any) -> Iterator[tuple[Path, Any, Decimal]]:
        """Each number of ``value`` the input does not state and the checks would reject."""
        for path, leaf in _leaves(value):
            charge(1)
            exact = value_of(leaf) if _is_number(leaf) else None
            if exact is None or exact in self.known or -exact in self.known:
                continue
            if self._runaway(exact) is not None:
                yield path, leaf, exact

    def _stated_prefix(self, exact: Decimal) -> str | None:
        """The input's numeral (as written, signed) whose digits ``exact`` begins with and
        runs on from, past its decimals (it has some); the one with the most. None: none."""
        negative, whole, fraction = _parts(exact)
        found = [
            f
            for f in self.decimals.get((negative, whole), ())
            if f and len(fraction) > len(f) and fraction.startswith(f)
        ]
        if not found:
            return None
        return ("-" if negative else "") + whole + "." + max(found, key=len)

    def diagnosis(self, value: Any, again: Set[Decimal] = frozenset()) -> str | None:
        """None when every value is plausible; else what is wrong, and what to do instead."""
        found = self.check(value, again)
        return None if found is None else found.diagnosis

    def check(self, value: Any, again: Set[Decimal] = frozenset()) -> Implausible | None:
        """The first implausible value: its diagnosis, and the number when it is one.

        ``again``: numbers rejected in earlier answers of the job. A model that gives one of
        them again is told more: the input's own numbers, to pick one of.
        """
        for path, leaf in _leaves(value):
            charge(1)
            number: Decimal | None = None
            problem: str | None = None
            if _is_number(leaf):
                number = value_of(leaf)
                problem = self._number(leaf, number, again)
            elif isinstance(leaf, str):
                problem = self._string(leaf)
            if problem is not None:
                instead = self._instead(value, path) if number is not None else None
                if instead is not None:
                    # Not the runaway number: shown it, the model writes it again.
                    problem = f"{RAN_ON}. Answer {instead}"
                return Implausible(f"{json_path(path)}: {problem}", number)
        return None

    def _instead(self, value: Any, rejected: Path) -> str | None:
        """The answer with each runaway number replaced by the input's number its digits
        begin with (``3000000000`` -> ``3`` for "three"), as JSON; None when the rejected
        one at ``rejected`` has no such number, the result does not fit the schema, or it
        is long."""
        replaced = False
        for path, leaf, exact in self._runaways(value):
            at = self._begun_at(exact)
            if at is None:
                continue
            stated = self.stated_values[at]
            integral = stated == stated.to_integral_value()
            if isinstance(leaf, int) and not integral:
                continue
            value = _with(value, path, int(stated) if integral else float(stated))
            replaced = replaced or path == rejected
        if not replaced or not compiled(self.schema).is_valid(value):
            return None
        shown = json.dumps(value, ensure_ascii=False)
        return shown if len(shown) <= INSTEAD_CHARS else None

    def _number(
        self, number: int | float, exact: Decimal | None, again: Set[Decimal]
    ) -> str | None:
        if exact is None or exact in self.known or -exact in self.known:
            return None
        if exact in again and self._runaway(exact):
            return self._repeated(number)
        return self._runaway(exact, number)

    def _repeated(self, number: int | float) -> str:
        """The diagnosis of a runaway number given again: the input's numbers to pick from."""
        if not self.stated:
            return (
                f"{brief(number)} again, and the input states no number; give a number with "
                f"at most {FREE_DIGITS} significant digits"
            )
        listed = ", ".join(self.stated[:STATED_NUMBERS])
        more = ", ..." if len(self.stated) > STATED_NUMBERS else ""
        return (
            f"{brief(number)} again, and the input does not state it. The numbers the input "
            f"states are {listed}{more}: give the one it states for this field, with exactly "
            "its digits"
        )

    def _runaway(self, exact: Decimal, number: Any = None) -> str | None:
        """Why ``exact`` (not in the input) is a runaway number, or None (``number``: the
        answer's own, for the diagnosis)."""
        number = exact if number is None else number
        digits = significant_digits(exact)
        if digits > max(self.most_digits, FREE_DIGITS):
            return (
                f"{brief(number)} occurs nowhere in the input and has {digits} significant "
                f"digits, more than any number there (at most {self.most_digits}); "
                f"give the number as the input states it{self._begun(exact)}"
            )
        # Digits that ran on as zeros (3 -> 3000000000): far wider than any number the
        # input holds (an input without numbers says nothing about widths).
        width = integral_digits(exact)
        if self.widest is not None and width > max(self.widest + WIDER_BY, FREE_WIDTH):
            return (
                f"{brief(number)} occurs nowhere in the input and has {width} digits before "
                f"the point, far more than any number there (at most {self.widest}); "
                f"give the number as the input states it{self._begun(exact)}"
            )
        return None

    def _begun(self, exact: Decimal) -> str:
        """``" (it states 45.88)"`` when the number's digits begin with those of a number of
        the input (45.88639742302659, 3000000000 for "three"): the one the digits ran on
        from, most likely. The longest such number; "" when there is none."""
        at = self._begun_at(exact)
        return "" if at is None else f" (it states {self.stated[at]})"

    def _begun_at(self, exact: Decimal) -> int | None:
        """Where in ``stated`` the longest input number is whose digits ``exact``'s begin with."""
        digits = _digits(exact)
        begun = [
            (len(d), -i)
            for i, s in enumerate(self.stated)
            if (d := _digits_of(s)) and digits.startswith(d)
        ]
        return -max(begun)[1] if begun else None

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


@dataclass(frozen=True, slots=True)
class Implausible:
    """One rejected value: the diagnosis fed back, and the number when it is a number."""

    diagnosis: str
    number: Decimal | None


def _parts(number: Decimal) -> tuple[bool, str, str]:
    """A number's sign, whole digits and decimals as written: -13.20 -> (True, "13", "20")."""
    text = format(number, "f")
    negative = text.startswith("-")
    whole, _, fraction = text.lstrip("-").partition(".")
    return negative, whole, fraction


def _with(value: Any, path: Path, leaf: Any) -> Any:
    """A copy of ``value`` with ``leaf`` at ``path`` (only the containers on the path copied)."""
    if not path:
        return leaf
    step, rest = path[0], path[1:]
    copied: Any = dict(value) if isinstance(value, Mapping) else list(value)
    copied[step] = _with(value[step], rest, leaf)
    return copied


def _digits(number: Decimal) -> str:
    """A number's digits, without sign, point or leading zeros (0.05 -> "5")."""
    return "".join(str(d) for d in number.as_tuple().digits).lstrip("0")


def _digits_of(written: str) -> str:
    return "".join(c for c in written if "0" <= c <= "9").lstrip("0")


def _num_text(value: Decimal) -> str:
    return str(int(value)) if value == value.to_integral_value() else str(value)


def _is_number(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


def _strings(value: Any) -> Iterator[str]:
    """Every key and string value of a JSON value, each once."""
    stack = [value]
    while stack:
        node = stack.pop()
        if isinstance(node, Mapping):
            for key, child in node.items():
                yield str(key)
                stack.append(child)
        elif isinstance(node, list):
            stack.extend(node)
        elif isinstance(node, str):
            yield node


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
