"""What was wrong with the model's previous answer, and whether the feedback says so.

::

    diagnosis = examine(previous_turn, expected=..., schema=..., structured=True)
    diagnosis.defect          # "schema"
    diagnosis.names           # ("qty", "items[0].qty", "/items/0/qty")
    diagnosis.named_in("items[0].qty: '12 units' is not of type 'integer'")   # True
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from typing import Any, Final, Literal

from reprompt_sim import schema as js
from reprompt_sim.conversation import Turn

REFUSAL_TEXT: Final = "I'm sorry, but I can't help with that request."

# Matched at the start of a word, so "parse" also finds "parsed" and "unparseable" does not.
SYNTAX_WORDS: Final = (
    "json", "syntax", "pars", "line", "column", "truncat", "incomplete", "cut off",
    "fence", "markdown", "backtick", "prose", "comma", "quote", "bracket", "brace",
    "delimiter", "literal", "decode",
)  # fmt: skip
REFUSAL_WORDS: Final = ("refus", "declin", "can't help", "cannot help")
INCOMPLETE_WORDS: Final = ("truncat", "incomplete", "cut off", "length", "max_tokens", "finish")
ROOT_WORDS: Final = ("type", "object", "array", "root")

_FENCED: Final = re.compile(r"```.*?(?:```|\Z)", re.DOTALL)

Defect = Literal["none", "refusal", "syntax", "schema", "semantic", "incomplete"]


@dataclass(frozen=True, slots=True)
class Diagnosis:
    """``words`` match at a word start; ``names`` (fields, paths) match as whole words."""

    defect: Defect
    words: tuple[str, ...] = ()
    names: tuple[str, ...] = ()

    def named_in(self, feedback: str) -> bool:
        """Whether ``feedback`` mentions this defect (case-insensitive).

        Fenced code (a quoted answer, an example, a schema) is not read: an example that
        lists every field names none of them.
        """
        prose = _FENCED.sub(" ", feedback)
        for word in self.words:
            if re.search(rf"(?<![\w]){re.escape(word)}", prose, re.IGNORECASE):
                return True
        for name in self.names:
            if re.search(rf"(?<![\w]){re.escape(name)}(?![\w])", prose, re.IGNORECASE):
                return True
        return False


def examine(turn: Turn, *, expected: Any, schema: js.Schema | None, structured: bool) -> Diagnosis:
    """Re-read ``turn`` (an assistant answer) against what a correct answer would have been."""
    text = turn.answer
    if turn.refused or not text.strip() or text.strip() == REFUSAL_TEXT:
        return Diagnosis("refusal", REFUSAL_WORDS)
    if not structured:
        if isinstance(expected, str) and text.strip() != expected.strip():
            return Diagnosis("incomplete", INCOMPLETE_WORDS)
        return Diagnosis("none")
    try:
        value = json.loads(text)
    except ValueError:
        return Diagnosis("syntax", SYNTAX_WORDS)
    if schema is not None:
        errors = js.errors_of(schema, value)
        if errors:
            names: list[str] = []
            words: list[str] = []
            for error in errors:
                for path in _error_paths(error):
                    if path:
                        names.extend(_names(path))
                    else:
                        words.extend(ROOT_WORDS)
            return Diagnosis("schema", tuple(dict.fromkeys(words)), tuple(dict.fromkeys(names)))
    differences = _differences(value, expected)
    if not differences:
        return Diagnosis("none")
    names = [name for path in differences for name in _names(path)]
    return Diagnosis(
        "semantic", ROOT_WORDS if () in differences else (), tuple(dict.fromkeys(names))
    )


def _error_paths(error: Any) -> list[js.Path]:
    """Paths of the fields an error is about: the missing or unexpected ones, else its own."""
    path: js.Path = tuple(error.absolute_path)
    instance = error.instance
    if error.validator == "required" and isinstance(instance, dict):
        missing = [r for r in error.validator_value if r not in instance]
        return [(*path, m) for m in missing] or [path]
    if error.validator == "additionalProperties" and isinstance(instance, dict):
        known = error.schema.get("properties", {})
        extra = [k for k in instance if k not in known]
        return [(*path, k) for k in extra] or [path]
    return [path]


def _names(path: js.Path) -> list[str]:
    """The field name, the dotted path and the JSON pointer by which feedback may name a value."""
    field = next((str(step) for step in reversed(path) if isinstance(step, str)), None)
    names = [js.render_path(path), js.pointer(path)]
    if field is not None:
        names.insert(0, field)
    return names


def _differences(value: Any, expected: Any, path: js.Path = ()) -> list[js.Path]:
    if isinstance(value, dict) and isinstance(expected, dict):
        out: list[js.Path] = []
        for key in dict.fromkeys([*expected, *value]):
            if key not in value or key not in expected:
                out.append((*path, key))
            else:
                out.extend(_differences(value[key], expected[key], (*path, key)))
        return out
    if isinstance(value, list) and isinstance(expected, list) and len(value) == len(expected):
        return [d for i, (v, e) in enumerate(zip(value, expected, strict=True))
                for d in _differences(v, e, (*path, i))]  # fmt: skip
    same = value == expected and type(value) is type(expected)
    return [] if same else [path]
