"""The held-in extraction set (bench/tasks_extraction.py): every expected answer is valid and
passes the default checks (they reject no correct answer), and the two failure kinds the
checks are for are rejected on every task that has a number or a string to spoil."""

from __future__ import annotations

import json
from typing import Any

from app.core.answer.check import check_answer
from app.core.answer.plausibility import Plausibility
from app.core.schema.steps import work_budget
from app.core.schema.validation import check_schema
from bench.tasks import Task
from bench.tasks_extraction import extraction_tasks

TASKS = extraction_tasks()


def diagnosis(task: Task, value: Any) -> str | None:
    with work_budget(100_000):
        check = Plausibility.of(job_input=task.job_input, schema=task.schema, task=task.task)
        return check.diagnosis(value)


def spoiled(value: Any, kind: Any, change: Any) -> Any:
    """``value`` with its first leaf of ``kind`` changed (None when it has none)."""
    if isinstance(value, dict):
        for key, leaf in value.items():
            found = spoiled(leaf, kind, change)
            if found is not None:
                return {**value, key: found}
    elif isinstance(value, list):
        for i, leaf in enumerate(value):
            found = spoiled(leaf, kind, change)
            if found is not None:
                return [*value[:i], found, *value[i + 1 :]]
    elif isinstance(value, kind) and not isinstance(value, bool):
        return change(value)
    return None


def test_the_set_has_sixty_tasks_or_more_of_every_shape() -> None:
    assert len(TASKS) >= 60
    assert {t.family for t in TASKS} >= {"count", "duration", "price", "people", "datetime",
                                         "enum", "nested"}  # fmt: skip


def test_every_expected_answer_is_valid_and_passes_the_default_checks() -> None:
    for task in TASKS:
        check_schema(task.schema)
        assert check_answer(json.dumps(task.expect), task.schema).ok, task.id
        assert diagnosis(task, task.expect) is None, task.id


def test_runaway_numbers_and_copied_field_names_are_rejected() -> None:
    numbers = strings = 0
    for task in TASKS:
        runaway = spoiled(task.expect, int | float, lambda n: float(f"{n}7392045618"))
        if runaway is not None:
            numbers += 1
            assert diagnosis(task, runaway) is not None, (task.id, runaway)
        name = next(iter(task.schema["properties"]))
        copied = spoiled(task.expect, str, lambda _, name=name: name)
        if copied is not None and "enum" not in json.dumps(task.schema):
            strings += 1
            assert diagnosis(task, copied) is not None, (task.id, copied)
    assert numbers >= 40
    assert strings >= 30
