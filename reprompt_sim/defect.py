"""The mistakes the simulated model writes into an otherwise correct answer.

::

    draft = inject("wrong_type", {"qty": 12}, schema, random.Random(1))
    draft.text    # '{\\n  "qty": "12 units"\\n}'
    draft.mode    # "wrong_type" (or the mode it fell back to when the schema left no room)

Refusal and truncation are not text edits; ``reprompt_sim.behaviour`` composes those.
"""

from __future__ import annotations

import copy
import json
import random
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Final

from reprompt_sim import schema as js
from reprompt_sim.instance import Generator

_NO_VALUE: Final = object()
_EXTRA_KEYS: Final = ("notes", "confidence", "comment", "source", "explanation")
_PROSE: Final = (
    ("Sure! Here is the JSON you asked for:\n\n", "\n\nLet me know if you need anything else!"),
    ("Of course. Based on the text, the result is:\n", "\nI hope this helps."),
    ("Here's the extracted data:\n\n", "\n\nFeel free to ask for changes."),
)

Leaf = tuple[js.Path, Any]


@dataclass(frozen=True, slots=True)
class Draft:
    """What the model writes. ``value`` is set when ``text`` is exactly that value's JSON."""

    text: str
    mode: str
    value: Any = _NO_VALUE

    @property
    def is_json(self) -> bool:
        return self.value is not _NO_VALUE


def dump(value: Any, *, compact: bool = False) -> str:
    if compact:
        return json.dumps(value, ensure_ascii=False)
    return json.dumps(value, indent=2, ensure_ascii=False)


def correct(value: Any, *, compact: bool = False) -> Draft:
    return Draft(dump(value, compact=compact), "ok", value)


def inject(
    mode: str, expected: Any, schema: js.Schema | None, rnd: random.Random, *, compact: bool = False
) -> Draft:
    """``expected`` written with the defect ``mode``; falls back to broken JSON when impossible."""
    structural = _STRUCTURAL.get(mode)
    if structural is not None:
        value = structural(expected, schema, rnd)
        if value is _NO_VALUE:
            return inject("broken_json", expected, schema, rnd, compact=compact)
        return Draft(dump(value, compact=compact), mode, value)
    text = dump(expected, compact=compact)
    if mode == "broken_json":
        return Draft(_break(text, rnd), mode)
    if mode == "missing_comma":
        dropped = _drop_comma(text, rnd)
        if dropped is None:  # one value, no comma to drop
            return Draft(_break(text, rnd), "broken_json")
        return Draft(dropped, mode)
    if mode == "prose":
        opener, closer = rnd.choice(_PROSE)
        written = f"{opener}{text}{closer}"
    elif mode == "code_fence":
        written = f"```json\n{text}\n```"
    elif mode == "python_literals":
        written = repr(expected)
    elif mode == "trailing_comma":
        written = _trailing_comma(text)
    else:
        raise ValueError(f"{mode!r} is not a text defect")
    if _parses(written):  # e.g. the repr of [1, 2] is valid JSON: no defect to show
        return Draft(_break(text, rnd), "broken_json")
    return Draft(written, mode)


def leaves(value: Any, path: js.Path = ()) -> list[Leaf]:
    """Every scalar in ``value`` with its path, depth first."""
    if isinstance(value, dict):
        return [leaf for k, v in value.items() for leaf in leaves(v, (*path, k))]
    if isinstance(value, list):
        return [leaf for i, v in enumerate(value) for leaf in leaves(v, (*path, i))]
    return [(path, value)]


def _wrong_type(expected: Any, schema: js.Schema | None, rnd: random.Random) -> Any:
    candidates = leaves(expected)
    rnd.shuffle(candidates)
    # Numbers written as text ("12 units") are the classic; booleans next, strings last.
    candidates.sort(key=lambda leaf: _type_rank(leaf[1]))
    for path, leaf in candidates:
        if not path:
            continue
        wrong = _mistype(leaf, rnd)
        if wrong is _NO_VALUE:
            continue
        value = _set(expected, path, wrong)
        if schema is None or not js.is_valid(schema, value):
            return value
    return _NO_VALUE


def _mistype(leaf: Any, rnd: random.Random) -> Any:
    if isinstance(leaf, bool):
        return "yes" if leaf else "no"
    if isinstance(leaf, int):
        return rnd.choice((f"{leaf} units", f"{leaf}.0"))
    if isinstance(leaf, float):
        return rnd.choice((f"{leaf} units", f"~{leaf}"))
    if isinstance(leaf, str):
        return rnd.randint(1, 99)
    return _NO_VALUE


def _type_rank(leaf: Any) -> int:
    if isinstance(leaf, bool):
        return 1
    if isinstance(leaf, int | float):
        return 0
    return 2


def _missing_field(expected: Any, schema: js.Schema | None, rnd: random.Random) -> Any:
    spots = [
        (path, key)
        for path, obj in _objects(expected)
        for key in obj
        if schema is None or key in js.required(js.at(schema, path))
    ]
    rnd.shuffle(spots)
    for path, key in spots:
        value = copy.deepcopy(expected)
        _get(value, path).pop(key)
        if schema is None or not js.is_valid(schema, value):
            return value
    return _NO_VALUE


def _extra_field(expected: Any, schema: js.Schema | None, rnd: random.Random) -> Any:
    spots = [path for path, _ in _objects(expected)]
    if not spots:
        return _NO_VALUE
    closed = [
        p
        for p in spots
        if schema is not None and js.at(schema, p).get("additionalProperties") is False
    ]
    path = rnd.choice(closed or spots)
    value = copy.deepcopy(expected)
    target = _get(value, path)
    key = next((k for k in _EXTRA_KEYS if k not in target), "extra")
    target[key] = rnd.choice(("double-checked against the source", 0.9, "high"))
    return value


def _semantic(expected: Any, schema: js.Schema | None, rnd: random.Random) -> Any:
    candidates = [leaf for leaf in leaves(expected) if leaf[0]]
    rnd.shuffle(candidates)
    for path, leaf in candidates:
        sub = js.at(schema, path) if schema is not None else {}
        for alternative in _alternatives(leaf, sub, schema or {}, rnd):
            value = _set(expected, path, alternative)
            if value != expected and (schema is None or js.is_valid(schema, value)):
                return value
    return _NO_VALUE


def _runaway_number(expected: Any, schema: js.Schema | None, rnd: random.Random) -> Any:
    """One number whose digits ran on, as a small model's under a grammar do (2 -> 2016,
    45.88 -> 45.88639742302659), where the schema still takes it."""
    candidates = [leaf for leaf in leaves(expected) if leaf[0]]
    rnd.shuffle(candidates)
    for path, leaf in candidates:
        if isinstance(leaf, bool) or not isinstance(leaf, int | float) or "e" in repr(leaf):
            continue
        tail = "".join(str(rnd.randrange(10)) for _ in range(12))
        if isinstance(leaf, int):
            grown: Any = int(f"{leaf}{tail}")
        else:
            grown = float(f"{leaf!r}{'' if '.' in repr(leaf) else '.'}{tail}1")
        value = _set(expected, path, grown)
        if schema is None or js.is_valid(schema, value):
            return value
    return _NO_VALUE


def _alternatives(leaf: Any, sub: dict[str, Any], root: js.Schema, rnd: random.Random) -> list[Any]:
    enum = sub.get("enum")
    if isinstance(enum, list):
        return [e for e in enum if e != leaf]
    if isinstance(leaf, bool):
        return [not leaf]
    if isinstance(leaf, int):
        return [leaf + 1, leaf - 1, leaf + 7]
    if isinstance(leaf, float):
        return [round(leaf + 1.5, 2), round(leaf - 0.5, 2)]
    if isinstance(leaf, str):
        generator = Generator(root, rnd)
        return [generator.value(sub) for _ in range(4)] + [leaf + "x", leaf[:-1]]
    return []


def _objects(value: Any, path: js.Path = ()) -> list[tuple[js.Path, dict[str, Any]]]:
    found: list[tuple[js.Path, dict[str, Any]]] = []
    if isinstance(value, dict):
        found.append((path, value))
        for k, v in value.items():
            found.extend(_objects(v, (*path, k)))
    elif isinstance(value, list):
        for i, v in enumerate(value):
            found.extend(_objects(v, (*path, i)))
    return found


def _get(value: Any, path: js.Path) -> Any:
    for step in path:
        value = value[step]
    return value


def _set(value: Any, path: js.Path, new: Any) -> Any:
    out = copy.deepcopy(value)
    _get(out, path[:-1])[path[-1]] = new
    return out


def _break(text: str, rnd: random.Random) -> str:
    """Drop one quote or the last closing bracket so the text no longer parses, and no
    lenient parser can tell what was meant (a dropped comma is ``missing_comma``)."""
    _, quotes = _structural_marks(text)
    closers = [i for i, c in enumerate(text) if c in "}]"][-1:]
    options = [group for group in (quotes, closers) if group]
    rnd.shuffle(options)
    for group in options:
        i = rnd.choice(group)
        broken = text[:i] + text[i + 1 :]
        if not _parses(broken):
            return broken
    return text[: max(1, len(text) // 2)] if text.startswith(("{", "[")) else "{" + text


def _drop_comma(text: str, rnd: random.Random) -> str | None:
    """Drop one comma between two values: the text no longer parses, but only one reading
    puts it back. ``None`` when there is no comma."""
    commas, _ = _structural_marks(text)
    if not commas:
        return None
    i = rnd.choice(commas)
    return text[:i] + text[i + 1 :]


def _parses(text: str) -> bool:
    try:
        json.loads(text)
    except ValueError:
        return False
    return True


def _structural_marks(text: str) -> tuple[list[int], list[int]]:
    commas: list[int] = []
    quotes: list[int] = []
    in_string = escaped = False
    for i, c in enumerate(text):
        if in_string:
            if escaped:
                escaped = False
            elif c == "\\":
                escaped = True
            elif c == '"':
                in_string = False
                quotes.append(i)
        elif c == '"':
            in_string = True
            quotes.append(i)
        elif c == ",":
            commas.append(i)
    return commas, quotes


def _trailing_comma(text: str) -> str:
    end = len(text.rstrip())
    if end == 0 or text[end - 1] not in "}]":
        return text + ","
    body = text[: end - 1].rstrip()
    if body.endswith(("{", "[")):
        return text
    return body + "," + text[len(body) :]


_STRUCTURAL: Final[dict[str, Callable[[Any, js.Schema | None, random.Random], Any]]] = {
    "wrong_type": _wrong_type,
    "missing_field": _missing_field,
    "extra_field": _extra_field,
    "semantic": _semantic,
    "runaway_number": _runaway_number,
}
