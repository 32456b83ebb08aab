"""The fixed, seeded task set shared by bench/efficacy.py (simulator) and bench/real_model.py.

Every task carries: a task text (with a ``[[sim ...]]`` directive that fixes the expected
answer and the failure mode of the first answer), the input text, a JSON Schema, the
declarative semantic validators (reprompt's ``JobSpec.validators``), and the expected answer.

Three families, chosen so that the semantic validators can catch a wrong value in *every*
leaf the simulator's ``semantic`` mode may change:

- ``invoice``: ``{vendor, lines: [{sku, amount}], total}``; the amounts must add up to the
  total, the vendor must be the one in the document, every SKU must look like ``SKU-123``;
- ``contact``: ``{name, age, email, subscribed}``; each field is checked against the source
  record (a grounding check);
- ``stats``: ``{values: [int], count, total}``; values add up to total, count is checked.

The same validators are used by every system: reprompt gets them as ``JobSpec.validators``;
instructor and the single-shot baseline run the very same functions
(``app.core.answer.validators.build``) inside a pydantic validator / after ``jsonschema``, so the
diagnosis text each system can feed back is identical.
"""

from __future__ import annotations

import json
import random
from dataclasses import dataclass
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationInfo, model_validator

from app.core.answer.validators import build
from app.core.schema.validation import json_type
from app.core.wire.spec import ValidatorSpec

# the failure mode of the first answer; "ok" tasks are the control group
MODES = (
    "ok",
    "broken_json",
    "missing_comma",
    "trailing_comma",
    "python_literals",
    "code_fence",
    "prose",
    "wrong_type",
    "missing_field",
    "truncation",
    "semantic",
)
FAMILIES = ("invoice", "contact", "stats")
TASK_SEED = 20261122

INVOICE_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "vendor": {"type": "string"},
        "lines": {
            "type": "array",
            "minItems": 1,
            "items": {
                "type": "object",
                "properties": {"sku": {"type": "string"}, "amount": {"type": "number"}},
                "required": ["sku", "amount"],
                "additionalProperties": False,
            },
        },
        "total": {"type": "number"},
    },
    "required": ["vendor", "lines", "total"],
    "additionalProperties": False,
}
CONTACT_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "name": {"type": "string"},
        "age": {"type": "integer"},
        "email": {"type": "string"},
        "subscribed": {"type": "boolean"},
    },
    "required": ["name", "age", "email", "subscribed"],
    "additionalProperties": False,
}
STATS_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "values": {"type": "array", "minItems": 1, "items": {"type": "integer"}},
        "count": {"type": "integer"},
        "total": {"type": "integer"},
    },
    "required": ["values", "count", "total"],
    "additionalProperties": False,
}
PERSON_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {"name": {"type": "string"}, "age": {"type": "integer"}},
    "required": ["name", "age"],
    "additionalProperties": False,
}
SCHEMAS = {
    "invoice": INVOICE_SCHEMA,
    "contact": CONTACT_SCHEMA,
    "stats": STATS_SCHEMA,
    "person": PERSON_SCHEMA,
}

VENDORS = ["ACME", "Globex", "Initech", "Umbrella", "Hooli", "Stark", "Wayne", "Tyrell"]
NAMES = ["Alice Moreau", "Bob Chen", "Carla Diaz", "Dev Patel", "Eva Novak", "Femi Ade"]


@dataclass(frozen=True)
class Task:
    id: str
    family: str
    mode: str
    task: str  # instruction, with the [[sim]] directive when for_sim
    input: str  # the source text
    schema: dict[str, Any]
    validators: list[dict[str, Any]]
    expect: dict[str, Any]
    # The job's input is ``{input_key: input}`` (one text field) when set, else the string.
    input_key: str | None = None

    @property
    def job_input(self) -> Any:
        return self.input if self.input_key is None else {self.input_key: self.input}

    def user_message(self) -> str:
        """What instructor and the single-shot baseline send as the user turn."""
        return f"{self.task}\n\n{self.input}"


def _invoice(rnd: random.Random) -> tuple[str, dict[str, Any], list[dict[str, Any]]]:
    vendor = rnd.choice(VENDORS)
    lines: list[dict[str, Any]] = [
        {"sku": f"SKU-{rnd.randint(100, 999)}", "amount": round(rnd.randint(100, 9999) / 100, 2)}
        for _ in range(rnd.randint(1, 3))
    ]
    total = round(sum(line["amount"] for line in lines), 2)
    text = f"Invoice from {vendor}: " + ", ".join(
        f"{line['sku']} {line['amount']:.2f}" for line in lines
    )
    text += f". Total {total:.2f}."
    validators: list[dict[str, Any]] = [
        {"kind": "sum", "items": "$.lines[*].amount", "equals": "$.total", "tolerance": 0.01},
        {"kind": "compare", "left": "$.vendor", "op": "==", "right": json.dumps(vendor)},
        {"kind": "regex", "path": "$.lines[*].sku", "pattern": "^SKU-[0-9]{3}$"},
    ]
    return text, {"vendor": vendor, "lines": lines, "total": total}, validators


def _contact(rnd: random.Random) -> tuple[str, dict[str, Any], list[dict[str, Any]]]:
    name = rnd.choice(NAMES)
    age = rnd.randint(18, 90)
    email = name.split()[0].lower() + f"{rnd.randint(1, 99)}@example.com"
    subscribed = rnd.random() < 0.5
    text = f"{name}, {age} years old, email {email}, " + (
        "subscribed to the newsletter." if subscribed else "not subscribed to the newsletter."
    )
    expect = {"name": name, "age": age, "email": email, "subscribed": subscribed}
    validators = [
        {"kind": "compare", "left": f"$.{k}", "op": "==", "right": json.dumps(v)}
        for k, v in expect.items()
    ]
    return text, expect, validators


def _stats(rnd: random.Random) -> tuple[str, dict[str, Any], list[dict[str, Any]]]:
    values = [rnd.randint(1, 50) for _ in range(rnd.randint(2, 5))]
    text = "Readings: " + ", ".join(str(v) for v in values) + "."
    expect = {"values": values, "count": len(values), "total": sum(values)}
    validators = [
        {"kind": "sum", "items": "$.values[*]", "equals": "$.total"},
        {"kind": "compare", "left": "$.count", "op": "==", "right": str(len(values))},
    ]
    return text, expect, validators


def _person(rnd: random.Random) -> tuple[str, dict[str, Any], list[dict[str, Any]]]:
    name = rnd.choice(["Tom", "Ana", "Omar", "Eva", "Sam", "Lena"])
    age = rnd.randint(18, 90)
    expect = {"name": name, "age": age}
    validators = [
        {"kind": "compare", "left": f"$.{k}", "op": "==", "right": json.dumps(v)}
        for k, v in expect.items()
    ]
    return f"{name} is {age} years old.", expect, validators


_MAKERS = {"invoice": _invoice, "contact": _contact, "stats": _stats, "person": _person}
_INSTRUCTIONS = {
    "invoice": "Extract the invoice: vendor, each line's SKU and amount, and the total.",
    "contact": "Extract the contact: name, age, email and whether they are subscribed.",
    "stats": "List the readings as integers, their count and their total.",
    "person": "Give the person's name and age.",
}


def sim_tasks(per_cell: int, seed: int = TASK_SEED) -> list[Task]:
    """``per_cell`` tasks for every (mode, family) pair; fully determined by ``seed``."""
    rnd = random.Random(seed)
    tasks: list[Task] = []
    for mode in MODES:
        for family in FAMILIES:
            for i in range(per_cell):
                text, expect, validators = _MAKERS[family](rnd)
                tid = f"{family}-{mode}-{i:03d}"
                directive = {"expect": expect, "fail": {} if mode == "ok" else {mode: 1.0}}
                task = f"{_INSTRUCTIONS[family]} (task {tid}) [[sim {json.dumps(directive)}]]"
                tasks.append(
                    Task(tid, family, mode, task, text, SCHEMAS[family], validators, expect)
                )
    return tasks


def real_tasks(n: int, easy: int = 0, seed: int = TASK_SEED) -> list[Task]:
    """Short extraction tasks for the real model (no directive).

    ``n`` from the three families, interleaved, then ``easy`` two-field ``person`` tasks on
    a seed stream of their own (``real_tasks(9)`` is the same nine whatever ``easy`` is).
    """
    rnd = random.Random(seed + 1)
    tasks: list[Task] = []
    for i in range(n):
        family = FAMILIES[i % len(FAMILIES)]
        text, expect, validators = _MAKERS[family](rnd)
        tasks.append(
            Task(
                f"{family}-{i:02d}",
                family,
                "real",
                _INSTRUCTIONS[family],
                text,
                SCHEMAS[family],
                validators,
                expect,
            )
        )
    rnd = random.Random(seed + 2)
    for i in range(easy):
        text, expect, validators = _person(rnd)
        tasks.append(
            Task(
                f"person-{n + i:02d}",
                "person",
                "real",
                _INSTRUCTIONS["person"],
                text,
                PERSON_SCHEMA,
                validators,
                expect,
            )
        )
    return tasks


# ---- grounded extraction (issue 13): the checks a client can write without the answer ----

# The extracted fields of each family: what the source text states. Derived values (a count,
# a sum) and booleans are not in the text, so grounding cannot check them.
GROUNDED_PATHS: dict[str, list[str]] = {
    "invoice": ["$.vendor", "$.lines[*].sku", "$.lines[*].amount", "$.total"],
    "contact": ["$.name", "$.email", "$.age"],
    "stats": ["$.values[*]"],
    "person": ["$.name", "$.age"],
}


def grounded_validators(task: Task) -> list[dict[str, Any]]:
    """One ``grounded`` validator over the family's extracted fields, numbers included."""
    paths = GROUNDED_PATHS.get(task.family) or [
        f"$.{k}" for k, v in task.expect.items() if not isinstance(v, bool)
    ]
    return [{"kind": "grounded", "paths": paths, "numbers": True}]


# ---- one semantic check for everyone: reprompt's own declarative validators ----


def semantic_diagnosis(task: Task, value: Any) -> str | None:
    """The first failing validator's diagnosis (the text reprompt would feed back)."""
    for index, spec in enumerate(task.validators):
        ok, diagnosis = build(ValidatorSpec.model_validate(spec), index)(value)  # type: ignore[misc]
        if not ok:
            return diagnosis or "the answer failed a validation check"
    return None


def is_correct(task: Task, value: Any) -> bool:
    """Equal to the expected answer (numbers compared to the cent)."""

    def norm(v: Any) -> Any:
        if isinstance(v, bool) or v is None or isinstance(v, str):
            return v
        if isinstance(v, int | float):
            return round(float(v), 2)
        if isinstance(v, list):
            return [norm(x) for x in v]
        if isinstance(v, dict):
            return {k: norm(x) for k, x in v.items()}
        return v

    return bool(norm(value) == norm(task.expect))


# ---- pydantic models equivalent to the schemas (for instructor) ----


class _Checked(BaseModel):
    model_config = ConfigDict(extra="forbid")

    @model_validator(mode="after")
    def _semantic(self, info: ValidationInfo) -> _Checked:
        task = (info.context or {}).get("task")
        if task is not None:
            diagnosis = semantic_diagnosis(task, self.model_dump())
            if diagnosis:
                raise ValueError(diagnosis)
        return self


class Line(BaseModel):
    model_config = ConfigDict(extra="forbid")
    sku: str
    amount: float


class Invoice(_Checked):
    vendor: str
    lines: list[Line] = Field(min_length=1)
    total: float


class Contact(_Checked):
    name: str
    age: int
    email: str
    subscribed: bool


class Stats(_Checked):
    values: list[int] = Field(min_length=1)
    count: int
    total: int


class Person(_Checked):
    name: str
    age: int


MODELS: dict[str, type[_Checked]] = {
    "invoice": Invoice,
    "contact": Contact,
    "stats": Stats,
    "person": Person,
}


# ---- one-sentence extractions (issue 14, part 0): what a plain one-line prompt gets right ----

# (task instruction, sentence, expected answer, JSON type of each field in order). Two or three
# flat fields, no validators: the set measures the prompt, not the re-asks. Every other task
# sends its sentence as ``{"text": ...}`` (one text field), the rest as a plain string.
_SIMPLE: tuple[tuple[str, str, dict[str, Any]], ...] = (
    (
        "Extract the person and their favourite colour.",
        "Emma's favourite colour is red.",
        {"name": "Emma", "colour": "red"},
    ),
    (
        "Extract the buyer, the item and the price.",
        "Liam bought a bicycle for 120 dollars.",
        {"buyer": "Liam", "item": "bicycle", "price": 120},
    ),
    (
        "Extract the student and the score.",
        "The student Priya scored 92 on the exam.",
        {"student": "Priya", "score": 92},
    ),
    (
        "Extract the city and the country.",
        "Paris is the capital of France.",
        {"city": "Paris", "country": "France"},
    ),
    (
        "Extract the person's name, age and city.",
        "Noah is 27 years old and lives in Berlin.",
        {"name": "Noah", "age": 27, "city": "Berlin"},
    ),
    (
        "Extract who the meeting is with and the day.",
        "The meeting with Sara is on Monday.",
        {"person": "Sara", "day": "Monday"},
    ),
    (
        "Extract the owner and how many cats they have.",
        "Olivia has 3 cats.",
        {"owner": "Olivia", "cats": 3},
    ),
    (
        "Extract the destination and the platform.",
        "The train to Madrid leaves from platform 4.",
        {"destination": "Madrid", "platform": 4},
    ),
    (
        "Extract the driver, the car's colour and its brand.",
        "Kenji drives a blue Toyota.",
        {"driver": "Kenji", "colour": "blue", "brand": "Toyota"},
    ),
    (
        "Extract the person's name, job and city.",
        "Maria works as a nurse in Lisbon.",
        {"name": "Maria", "job": "nurse", "city": "Lisbon"},
    ),
    (
        "Extract the item and its weight in kilograms.",
        "The package weighs 12 kilograms.",
        {"item": "package", "weight": 12},
    ),
    (
        "Extract the person and the year they were born.",
        "Ahmed was born in 1990.",
        {"name": "Ahmed", "year": 1990},
    ),
    (
        "Extract the book's title and author.",
        "The book Dune was written by Frank Herbert.",
        {"title": "Dune", "author": "Frank Herbert"},
    ),
    (
        "Extract the customer and how many pizzas they ordered.",
        "Lucas ordered 2 pizzas.",
        {"customer": "Lucas", "pizzas": 2},
    ),
    (
        "Extract the city and the temperature.",
        "The temperature in Oslo is 5 degrees.",
        {"city": "Oslo", "temperature": 5},
    ),
    (
        "Extract the person and the language they speak.",
        "Chloe speaks Spanish.",
        {"name": "Chloe", "language": "Spanish"},
    ),
    (
        "Extract the person and their phone number.",
        "Ivan's phone number is 555-0142.",
        {"name": "Ivan", "phone": "555-0142"},
    ),
    (
        "Extract the event and the ticket price.",
        "A ticket for the concert costs 45 euros.",
        {"event": "concert", "price": 45},
    ),
    (
        "Extract the person and whether they are a vegetarian.",
        "Zoe is a vegetarian.",
        {"name": "Zoe", "vegetarian": True},
    ),
    (
        "Extract the person and whether they are married.",
        "Mark is not married.",
        {"name": "Mark", "married": False},
    ),
)


def simple_tasks() -> list[Task]:
    """The 20 one-sentence extractions (2-3 flat fields each), no validators."""
    tasks = []
    for i, (instruction, sentence, expect) in enumerate(_SIMPLE):
        schema = {
            "type": "object",
            "properties": {k: {"type": json_type(v)} for k, v in expect.items()},
            "required": list(expect),
            "additionalProperties": False,
        }
        tasks.append(
            Task(
                f"simple-{i:02d}",
                "simple",
                "real",
                instruction,
                sentence,
                schema,
                [],
                expect,
                input_key="text" if i % 2 else None,
            )
        )
    return tasks


def field_list(schema: dict[str, Any]) -> str:
    """``name (string), age (integer)``: the plain one-line prompt's description of the fields."""
    props = schema.get("properties", {})
    return ", ".join(f"{k} ({_type_words(v)})" for k, v in props.items())


def _type_words(schema: dict[str, Any]) -> str:
    if schema.get("type") == "array":
        return f"list of {_type_words(schema.get('items', {}))}"
    if schema.get("type") == "object":
        return "object with " + field_list(schema)
    return str(schema.get("type", "value"))


def plain_prompt(task: Task) -> str:
    """The plain one-line prompt of issue 14: the fields, the text, 'Return only the JSON'."""
    return (
        f"Extract these fields as a JSON object: {field_list(task.schema)}. "
        f"Text: {task.input} Return only the JSON object."
    )
