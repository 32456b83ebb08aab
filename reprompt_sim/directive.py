"""The per-request override a prompt can carry: ``[[sim {...JSON...}]]``.

It is ordinary text the model sees; the simulator obeys the first one it finds in
the system, user and tool messages::

    [[sim {"script": ["rate_limit", "broken_json", "ok"], "expect": {"total": 12}}]]
    [[sim {"script": [{"call": [{"name": "lookup", "arguments": {"sku": "A1"}}]}, "ok"]}]]

    Directive.find(["... [[sim {\"fix\": 1.0}]] ..."]).fix_probability   # 1.0
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any, Final, Literal

from reprompt_sim.config import ANSWER_MODES, OK, SCRIPT_ENTRIES, TRANSPORT_MODES, check_rates
from reprompt_sim.errors import InvalidRequest

OPENER: Final = "[[sim"
_KEYS: Final = frozenset(
    {"script", "expect", "fix", "blind", "fail", "retry_after", "counter", "choices"}
)
_ENTRY_KEYS: Final = frozenset({"call", "force", "text"})
_CALL_KEYS: Final = frozenset({"name", "arguments", "rawArguments"})
_NOTHING: Final = object()

Counter = Literal["turns", "requests"]


class DirectiveError(InvalidRequest):
    """A ``[[sim ...]]`` directive that cannot be obeyed; the server answers 400 with it."""


@dataclass(frozen=True, slots=True)
class ScriptedCall:
    """A client tool call a script makes the model write, with its arguments exactly as given.

    ``arguments`` is the JSON value (``raw`` False) or, for ``rawArguments``, the text to send
    as it is, broken JSON included (``raw`` True).
    """

    name: str
    arguments: Any
    raw: bool = False


@dataclass(frozen=True, slots=True)
class Step:
    """One attempt of a script: transport faults served first, then the answer's outcome.

    A step with ``calls`` answers with those tool calls when the request lets the model call
    them (or ``force`` is set); otherwise its ``outcome`` ("ok") is the answer.
    """

    faults: tuple[str, ...]
    outcome: str
    calls: tuple[ScriptedCall, ...] = ()
    force: bool = False
    text: str | None = None


@dataclass(frozen=True, slots=True)
class Directive:
    steps: tuple[Step, ...] | None = None
    expect: Any = _NOTHING
    fix_probability: float | None = None
    blind_fix_probability: float | None = None
    failure_rates: Mapping[str, float] | None = None
    retry_after_s: float | None = None
    counter: Counter = "turns"
    # The outcome of each answer of a request that asks for several (OpenAI's ``n``).
    choices: tuple[str, ...] | None = None

    @property
    def has_expect(self) -> bool:
        return self.expect is not _NOTHING

    def step(self, attempt: int) -> Step | None:
        """The scripted step for 1-based ``attempt``; ``None`` when unscripted or past the end."""
        if self.steps is None or attempt > len(self.steps):
            return None
        return self.steps[attempt - 1]

    @classmethod
    def find(cls, texts: Iterable[str]) -> Directive | None:
        """The first directive in ``texts``; raises ``DirectiveError`` when it is malformed."""
        for text in texts:
            start = text.find(OPENER)
            while start != -1:
                found = _decode_at(text, start)
                if found is not None:
                    return cls.parse(found)
                start = text.find(OPENER, start + 1)
        return None

    @classmethod
    def parse(cls, raw: Mapping[str, Any]) -> Directive:
        unknown = set(raw) - _KEYS
        if unknown:
            raise DirectiveError(
                f"sim directive: unknown keys {sorted(unknown)}; known: {sorted(_KEYS)}"
            )
        counter = raw.get("counter", "turns")
        if counter not in ("turns", "requests"):
            raise DirectiveError('sim directive: "counter" must be "turns" or "requests"')
        rates = raw.get("fail")
        if rates is not None:
            if not isinstance(rates, dict):
                raise DirectiveError('sim directive: "fail" must be an object of mode: rate')
            try:
                check_rates(rates)
            except ValueError as exc:
                raise DirectiveError(f"sim directive: {exc}") from None
        return cls(
            steps=_steps(raw["script"]) if "script" in raw else None,
            expect=raw.get("expect", _NOTHING),
            fix_probability=_probability(raw, "fix"),
            blind_fix_probability=_probability(raw, "blind"),
            failure_rates=rates,
            retry_after_s=_seconds(raw, "retry_after"),
            counter=counter,
            choices=_choices(raw["choices"]) if "choices" in raw else None,
        )


def spans(text: str) -> list[tuple[int, int]]:
    """Where directives sit in ``text`` (start, end), so schema discovery can skip them."""
    found: list[tuple[int, int]] = []
    start = text.find(OPENER)
    while start != -1:
        brace = text.find("{", start)
        end = _end_at(text, brace) if brace != -1 else None
        if end is not None:
            found.append((start, end))
        start = text.find(OPENER, start + 1)
    return found


def _decode_at(text: str, start: int) -> dict[str, Any] | None:
    brace = start + len(OPENER)
    while brace < len(text) and text[brace].isspace():
        brace += 1
    if brace >= len(text) or text[brace] != "{":
        return None
    try:
        value, end = json.JSONDecoder().raw_decode(text, brace)
    except json.JSONDecodeError as exc:
        raise DirectiveError(f"sim directive is not valid JSON: {exc}") from None
    if not text[end:].lstrip().startswith("]]"):
        raise DirectiveError('sim directive: expected "]]" after the JSON object')
    return value if isinstance(value, dict) else None


def _end_at(text: str, brace: int) -> int | None:
    try:
        _, end = json.JSONDecoder().raw_decode(text, brace)
    except json.JSONDecodeError:
        return None
    close = text.find("]]", end)
    return close + 2 if close != -1 else None


def _choices(raw: Any) -> tuple[str, ...]:
    answers = (OK, *ANSWER_MODES)
    if not isinstance(raw, list) or not raw or not all(c in answers for c in raw):
        raise DirectiveError(
            f'sim directive: "choices" must be a non-empty list of {", ".join(answers)}'
        )
    return tuple(raw)


def _steps(script: Any) -> tuple[Step, ...]:
    if not isinstance(script, list) or not all(isinstance(s, str | dict) for s in script):
        raise DirectiveError(
            'sim directive: "script" must be a list of outcome names and {"call": [...]} objects'
        )
    steps: list[Step] = []
    faults: list[str] = []
    for index, entry in enumerate(script):
        if isinstance(entry, dict):
            steps.append(_call_step(index, entry, tuple(faults)))
            faults = []
            continue
        if entry not in SCRIPT_ENTRIES:
            raise DirectiveError(
                f"sim directive: unknown script entry {entry!r}; known: {', '.join(SCRIPT_ENTRIES)}"
            )
        if entry in TRANSPORT_MODES:
            faults.append(entry)
        else:
            assert entry == OK or entry in ANSWER_MODES
            steps.append(Step(tuple(faults), entry))
            faults = []
    if faults:
        steps.append(Step(tuple(faults), OK))
    return tuple(steps)


def _call_step(index: int, entry: Mapping[str, Any], faults: tuple[str, ...]) -> Step:
    where = f"sim directive: script[{index}]"
    unknown = set(entry) - _ENTRY_KEYS
    if unknown:
        raise DirectiveError(
            f"{where}: unknown keys {sorted(unknown)}; known: {sorted(_ENTRY_KEYS)}"
        )
    calls = entry.get("call")
    if not isinstance(calls, list) or not calls:
        raise DirectiveError(f'{where}: "call" must be a non-empty list of {{"name", "arguments"}}')
    force = entry.get("force", False)
    if not isinstance(force, bool):
        raise DirectiveError(f'{where}: "force" must be true or false')
    text = entry.get("text")
    if text is not None and not isinstance(text, str):
        raise DirectiveError(f'{where}: "text" must be a string')
    scripted = tuple(_call(f"{where}.call[{i}]", call) for i, call in enumerate(calls))
    return Step(faults, OK, scripted, force, text)


def _call(where: str, raw: object) -> ScriptedCall:
    if not isinstance(raw, dict):
        raise DirectiveError(f'{where}: must be an object {{"name", "arguments"}}')
    unknown = set(raw) - _CALL_KEYS
    if unknown:
        raise DirectiveError(
            f"{where}: unknown keys {sorted(unknown)}; known: {sorted(_CALL_KEYS)}"
        )
    name = raw.get("name")
    if not isinstance(name, str) or not name:
        raise DirectiveError(f'{where}: "name" must be a non-empty string')
    if "rawArguments" in raw:
        if "arguments" in raw:
            raise DirectiveError(f'{where}: give "arguments" or "rawArguments", not both')
        if not isinstance(raw["rawArguments"], str):
            raise DirectiveError(f'{where}: "rawArguments" must be a string')
        return ScriptedCall(name, raw["rawArguments"], raw=True)
    return ScriptedCall(name, raw.get("arguments", {}))


def _probability(raw: Mapping[str, Any], key: str) -> float | None:
    value = raw.get(key)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int | float) or not 0 <= value <= 1:
        raise DirectiveError(f'sim directive: "{key}" must be a probability between 0 and 1')
    return float(value)


def _seconds(raw: Mapping[str, Any], key: str) -> float | None:
    value = raw.get(key)
    if value is None:
        return None
    bad = isinstance(value, bool) or not isinstance(value, int | float)
    if bad or value < 0 or not math.isfinite(value):
        raise DirectiveError(f'sim directive: "{key}" must be a number of seconds >= 0')
    return float(value)
