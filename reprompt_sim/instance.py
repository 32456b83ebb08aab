"""Deterministic example values that satisfy a JSON Schema: the simulator's "correct" answers.

::

    instance = valid_instance(schema, seed=7, task="Extract the order...")
    Generator(schema, random.Random(3)).value(schema)   # one candidate, not yet verified
"""

from __future__ import annotations

import math
import random
import uuid
from typing import Any, Final

from reprompt_sim import chance, pattern
from reprompt_sim.schema import Schema, is_valid, properties, required, resolve, types

_WORDS: Final = (
    "amber", "basalt", "cedar", "delta", "ember", "fjord", "garnet", "harbor", "indigo",
    "juniper", "kestrel", "lagoon", "meadow", "nickel", "orchid", "pebble", "quartz",
    "raven", "sierra", "tundra", "umber", "violet", "willow", "yarrow", "zephyr",
)  # fmt: skip
_MAX_DEPTH: Final = 6
_ATTEMPTS: Final = 12


def valid_instance(schema: Schema, *, seed: int, task: str) -> Any:
    """A value valid against ``schema``, fixed by ``seed`` and ``task``.

    Tries a few candidates; for a schema it cannot satisfy it returns the last one.
    """
    value: Any = None
    for attempt in range(_ATTEMPTS):
        value = Generator(schema, chance.rng(seed, "instance", task, attempt)).value(schema)
        if is_valid(schema, value):
            return value
    return value


class Generator:
    """Builds one candidate value for a (sub-)schema of ``root`` with ``rnd``."""

    def __init__(self, root: Schema, rnd: random.Random) -> None:
        self.root = root
        self.rnd = rnd

    def value(self, node: object, depth: int = 0) -> Any:
        if node is True or node == {}:
            return self.word()
        schema = resolve(node, self.root)
        if "const" in schema:
            return schema["const"]
        enum = schema.get("enum")
        if isinstance(enum, list) and enum:
            return self.rnd.choice(enum)
        for key in ("anyOf", "oneOf"):
            options = schema.get(key)
            if isinstance(options, list) and options:
                solid = [o for o in options if "null" not in types(resolve(o, self.root))]
                merged = {k: v for k, v in schema.items() if k != key}
                return self.value({**merged, **resolve((solid or options)[0], self.root)}, depth)
        kinds = types(schema)
        kind = next((k for k in kinds if k != "null"), kinds[0] if kinds else "string")
        if kind == "object":
            return self.object(schema, depth)
        if kind == "array":
            return self.array(schema, depth)
        if kind == "integer":
            return self.integer(schema)
        if kind == "number":
            return self.number(schema)
        if kind == "boolean":
            return self.rnd.random() < 0.5
        if kind == "null":
            return None
        return self.string(schema)

    def object(self, schema: Schema, depth: int) -> dict[str, Any]:
        props = properties(schema)
        needed = set(required(schema))
        names = list(props) if depth < _MAX_DEPTH else [n for n in props if n in needed]
        out = {name: self.value(props[name], depth + 1) for name in names}
        for name in needed - set(out):
            out[name] = self.word()
        return out

    def array(self, schema: Schema, depth: int) -> list[Any]:
        prefix = schema.get("prefixItems")
        items = schema.get("items", {})
        if isinstance(items, list):  # draft 4-7 tuple form
            prefix, items = items, schema.get("additionalItems", {})
        low = int(schema.get("minItems", 0))
        high = int(schema.get("maxItems", max(low, 3)))
        count = max(low, min(high, 2))
        head = [self.value(p, depth + 1) for p in prefix] if isinstance(prefix, list) else []
        out = head[: max(count, len(head))]
        unique = bool(schema.get("uniqueItems"))
        tries = 0
        while len(out) < count and tries < count * 10:
            tries += 1
            item = self.value(items if items is not False else {}, depth + 1)
            if not unique or item not in out:
                out.append(item)
        return out

    def integer(self, schema: Schema) -> int:
        low, high = _bounds(schema, integer=True)
        step = schema.get("multipleOf")
        if isinstance(step, int) and step > 0:
            first = math.ceil(low / step)
            last = max(first, math.floor(high / step))
            return int(self.rnd.randint(first, last) * step)
        return self.rnd.randint(int(low), int(max(low, high)))

    def number(self, schema: Schema) -> float | int:
        step = schema.get("multipleOf")
        if isinstance(step, int | float) and step > 0:
            low, high = _bounds(schema, integer=False)
            first = math.ceil(low / step)
            return self.rnd.randint(first, max(first, math.floor(high / step))) * step
        low, high = _bounds(schema, integer=False)
        value = round(self.rnd.uniform(low, high), 2)
        return min(max(value, low), high)

    def string(self, schema: Schema) -> str:
        fmt = schema.get("format")
        regex = schema.get("pattern")
        text: str | None = None
        if isinstance(regex, str):
            text = pattern.example(regex, self.rnd)
        if text is None:
            text = self._formatted(fmt) if isinstance(fmt, str) else None
        if text is None:
            text = f"{self.word()} {self.word()}"
        low = int(schema.get("minLength", 0))
        high = schema.get("maxLength")
        while len(text) < low:
            text += self.word()
        if isinstance(high, int) and len(text) > high:
            text = text[:high]
        return text

    def word(self) -> str:
        return self.rnd.choice(_WORDS)

    def _formatted(self, fmt: str) -> str | None:
        r = self.rnd
        if fmt == "date":
            return f"2024-{r.randint(1, 12):02d}-{r.randint(1, 28):02d}"
        if fmt == "date-time":
            return (
                f"2024-{r.randint(1, 12):02d}-{r.randint(1, 28):02d}T{r.randint(0, 23):02d}:00:00Z"
            )
        if fmt == "time":
            return f"{r.randint(0, 23):02d}:{r.randint(0, 59):02d}:00"
        if fmt == "email":
            return f"{self.word()}@example.com"
        if fmt in ("uri", "url", "iri"):
            return f"https://example.com/{self.word()}"
        if fmt == "uuid":
            return str(uuid.UUID(int=r.getrandbits(128), version=4))
        if fmt == "ipv4":
            return ".".join(str(r.randint(1, 254)) for _ in range(4))
        if fmt == "hostname":
            return f"{self.word()}.example.com"
        return None


def _bounds(schema: Schema, *, integer: bool) -> tuple[float, float]:
    """Inclusive bounds from (exclusive) minimum/maximum, defaulting to a friendly 1..100."""
    nudge = 1 if integer else 0.01
    low: float | None = _num(schema.get("minimum"))
    high: float | None = _num(schema.get("maximum"))
    ex_low, ex_high = schema.get("exclusiveMinimum"), schema.get("exclusiveMaximum")
    if ex_low is True and low is not None:  # draft 4 boolean form
        low += nudge
    elif (value := _num(ex_low)) is not None:
        low = value + nudge if low is None else max(low, value + nudge)
    if ex_high is True and high is not None:
        high -= nudge
    elif (value := _num(ex_high)) is not None:
        high = value - nudge if high is None else min(high, value - nudge)
    if integer:
        low = math.ceil(low) if low is not None else None
        high = math.floor(high) if high is not None else None
    if low is None and high is None:
        return 1, 100
    if low is None:
        assert high is not None
        return min(1, high), high
    if high is None:
        return low, max(low, 100) if low < 100 else low + 100
    return low, max(low, high)


def _num(value: object) -> float | None:
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    return value
