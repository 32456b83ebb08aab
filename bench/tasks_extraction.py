"""A held-in set of 60 extraction and classification tasks of varied shapes (issue 33).

Written for this project, seeded and generated from templates so every expected answer is
known exactly: counts beside years, durations, prices with decimals, several people or
places in one text, dates and times, enums, nested lists. Each task is a ``Task`` of
``bench/tasks.py`` (no validators: the schema alone, as a user would send it)::

    tasks = extraction_tasks()          # 60 tasks, 10 of each shape
    tasks[0].input, tasks[0].expect     # 'In 2016 the club had 2 coaches...', {'coaches': 2}

Used by tests/bench/test_tasks_extraction.py (the default checks reject no expected answer
and do reject runaway and copied values) and meant for a real-model run through the API.
"""

from __future__ import annotations

import random
from collections.abc import Callable
from typing import Any

from bench.tasks import Task

SEED = 20261128
PER_SHAPE = 10

_NAMES = ["Alice", "Bruno", "Chen", "Dana", "Emeka", "Farah", "Goran", "Hana", "Ivan", "Julia"]
_CITIES = ["Lyon", "Porto", "Leeds", "Gdansk", "Turin", "Ghent", "Bergen", "Split", "Graz", "Cork"]
_WORDS = ["two", "three", "four", "five", "six", "seven", "eight", "nine", "ten", "twelve"]
_WORD_VALUES = [2, 3, 4, 5, 6, 7, 8, 9, 10, 12]
_ITEMS = ["lamp", "kettle", "chair", "backpack", "helmet", "blender", "monitor", "tent"]
_MOODS = ["positive", "negative", "neutral"]


def _obj(**fields: dict[str, Any]) -> dict[str, Any]:
    return {"type": "object", "properties": fields, "required": list(fields)}


def _count_beside_year(rnd: random.Random, i: int) -> Task:
    year = rnd.randint(1990, 2024)
    k = rnd.randrange(len(_WORDS))
    digits = rnd.random() < 0.5
    said = str(_WORD_VALUES[k]) if digits else _WORDS[k]
    text = f"In {year} the {rnd.choice(_CITIES)} club had {said} coaches and a new stadium."
    schema = _obj(coaches={"type": "integer"})
    return _task(f"count-{i}", "Extract how many coaches the club had.", text, schema,
                 {"coaches": _WORD_VALUES[k]})  # fmt: skip


def _duration(rnd: random.Random, i: int) -> Task:
    hours, minutes = rnd.randint(1, 9), rnd.choice([0, 15, 30, 45])
    text = (f"The ferry from {rnd.choice(_CITIES)} left at dawn; the crossing took {hours} "
            f"hours and {minutes} minutes in calm water.")  # fmt: skip
    schema = _obj(hours={"type": "integer"}, minutes={"type": "integer"})
    return _task(f"duration-{i}", "Extract the duration of the crossing.", text, schema,
                 {"hours": hours, "minutes": minutes})  # fmt: skip


def _price(rnd: random.Random, i: int) -> Task:
    item = rnd.choice(_ITEMS)
    price = round(rnd.randint(500, 99999) / 100, 2)
    text = f"{rnd.choice(_NAMES)} bought a {item} for {price:.2f} euros at the market."
    schema = _obj(item={"type": "string"}, price={"type": "number"})
    return _task(f"price-{i}", "Extract the item and its price.", text, schema,
                 {"item": item, "price": price})  # fmt: skip


def _people(rnd: random.Random, i: int) -> Task:
    a, b = rnd.sample(_NAMES, 2)
    x, y = rnd.sample(_CITIES, 2)
    text = f"{a} moved from {x} to {y} last spring, while {b} stayed in {x}."
    schema = _obj(person={"type": "string"}, origin={"type": "string"},
                  destination={"type": "string"})  # fmt: skip
    return _task(f"people-{i}", f"Where did {a} move from and to?", text, schema,
                 {"person": a, "origin": x, "destination": y})  # fmt: skip


def _date_time(rnd: random.Random, i: int) -> Task:
    month, day = rnd.randint(1, 12), rnd.randint(1, 28)
    hour, minute = rnd.randint(8, 20), rnd.choice([0, 15, 30, 45])
    text = (f"The meeting with {rnd.choice(_NAMES)} is on 2025-{month:02d}-{day:02d} at "
            f"{hour:02d}:{minute:02d} in {rnd.choice(_CITIES)}.")  # fmt: skip
    schema = _obj(date={"type": "string", "format": "date"},
                  time={"type": "string", "description": "HH:MM"})  # fmt: skip
    expect = {"date": f"2025-{month:02d}-{day:02d}", "time": f"{hour:02d}:{minute:02d}"}
    return _task(f"datetime-{i}", "Extract the date and the time of the meeting.", text, schema,
                 expect)  # fmt: skip


def _enum(rnd: random.Random, i: int) -> Task:
    mood = rnd.choice(_MOODS)
    lines = {"positive": "I loved the {x}, it works perfectly.",
             "negative": "The {x} broke after one day, I want a refund.",
             "neutral": "The {x} arrived on Tuesday in a brown box."}  # fmt: skip
    text = lines[mood].format(x=rnd.choice(_ITEMS))
    schema = _obj(sentiment={"type": "string", "enum": _MOODS})
    return _task(f"enum-{i}", "Classify the sentiment of the review.", text, schema,
                 {"sentiment": mood})  # fmt: skip


def _nested(rnd: random.Random, i: int) -> Task:
    items = rnd.sample(_ITEMS, 2)
    qty = [rnd.randint(1, 5) for _ in items]
    text = (f"Order {rnd.randint(100, 999)}: {qty[0]} x {items[0]} and {qty[1]} x {items[1]}, "
            f"for {rnd.choice(_NAMES)}.")  # fmt: skip
    line = _obj(item={"type": "string"}, quantity={"type": "integer"})
    schema = _obj(lines={"type": "array", "items": line})
    expect = {"lines": [{"item": t, "quantity": q} for t, q in zip(items, qty, strict=True)]}
    return _task(f"nested-{i}", "List the order lines.", text, schema, expect)


def _weight(rnd: random.Random, i: int) -> Task:
    weight = round(rnd.randint(15, 950) / 10, 1)
    text = (
        f"The parcel for {rnd.choice(_NAMES)} weighs {weight} kg and goes to {rnd.choice(_CITIES)}."
    )
    schema = _obj(weight_kg={"type": "number"})
    return _task(f"weight-{i}", "Extract the weight of the parcel.", text, schema,
                 {"weight_kg": weight})  # fmt: skip


_SHAPES: list[Callable[[random.Random, int], Task]] = [
    _count_beside_year, _duration, _price, _people, _date_time, _enum,
]  # fmt: skip
_EXTRA: list[Callable[[random.Random, int], Task]] = [_nested, _weight]


def _task(id_: str, task: str, text: str, schema: dict[str, Any], expect: Any) -> Task:
    return Task(id=id_, family=id_.split("-")[0], mode="ok", task=task, input=text,
                schema=schema, validators=[], expect=expect)  # fmt: skip


def extraction_tasks(per_shape: int = PER_SHAPE, seed: int = SEED) -> list[Task]:
    """``per_shape`` tasks of each of the six shapes plus nested lists and weights, interleaved
    (60 of the first six and 20 more by default: 80)."""
    rnd = random.Random(seed)
    found: list[Task] = []
    for i in range(per_shape):
        found.extend(make(rnd, i) for make in (*_SHAPES, *_EXTRA))
    return found
