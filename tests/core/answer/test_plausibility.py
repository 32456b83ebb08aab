"""The default checks for what a schema cannot see (app.core.answer.plausibility)."""

from __future__ import annotations

from decimal import Decimal
from typing import Any

import pytest

from app.core.answer.plausibility import Plausibility, significant_digits
from app.core.text.number_words import word_numbers

SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "count": {"type": "integer", "minimum": 10, "description": "how many people came"},
        "weight": {"type": "number"},
        "city": {"type": "string"},
        "mood": {"type": "string", "enum": ["calm", "angry"]},
    },
}


def check(job_input: Any, value: Any, task: str = "Extract the visit.") -> str | None:
    return Plausibility.of(job_input=job_input, schema=SCHEMA, task=task).diagnosis(value)


@pytest.mark.parametrize(
    ("number", "digits"),
    [(Decimal("2000"), 1), (Decimal("45.5"), 3), (Decimal("1205.8924563229766"), 17),
     (Decimal("0.05"), 1), (Decimal("0"), 1)],
)  # fmt: skip
def test_significant_digits(number: Decimal, digits: int) -> None:
    assert significant_digits(number) == digits


def test_a_runaway_number_is_rejected_and_named() -> None:
    problem = check("The parcel weighs 45.5 kg, sent from Leeds.", {"weight": 45.88639742302659})
    assert problem is not None
    assert problem.startswith("$.weight: 45.88639742302659 occurs nowhere in the input")
    assert "at most 3" in problem


def test_numbers_the_input_states_pass_in_any_written_form() -> None:
    text = "Twelve thousand three hundred forty-five visitors; total 1,234.50 EUR."
    assert check(text, {"count": 12345, "weight": 1234.5}) is None


def test_small_numbers_and_sums_are_never_questioned() -> None:
    assert check("Three chairs at 3.50 and a table at 4.00.", {"weight": 7.5, "count": 999}) is None


def test_digits_that_ran_on_as_zeros_are_rejected_when_the_input_has_numbers() -> None:
    problem = check("In 2016 the club had three coaches.", {"count": 3000000000})
    assert problem is not None
    assert "10 digits before the point" in problem
    assert check("In 2016 the club had three coaches.", {"count": 30000}) is None
    assert check("Name the capital of Chad.", {"count": 1500000}) is None  # no number to compare


def test_a_number_with_no_more_digits_than_the_input_passes() -> None:
    assert check("Order 123456 shipped.", {"count": 654321}) is None
    assert check("Order 123456 shipped.", {"count": 6543210987}) is not None


def test_a_copied_constraint_or_field_name_is_rejected() -> None:
    problem = check("Alice lives in Paris.", {"city": ">=10"})
    assert problem is not None
    assert "prompt's own wording" in problem
    assert check("Alice lives in Paris.", {"city": "city"}) is not None
    assert check("Alice lives in Paris.", {"city": "string"}) is not None


def test_a_copied_description_or_task_is_rejected() -> None:
    problem = check("Alice lives in Paris.", {"city": "How many people came"})
    assert problem is not None
    assert "copies the instructions" in problem
    assert check("Alice lives in Paris.", {"city": "extract the visit."}) is not None


def test_input_text_and_enum_values_pass_even_when_they_are_schema_words() -> None:
    assert check("The city of Paris, population string.", {"city": "string"}) is None
    assert check("Alice lives in Paris.", {"city": "Paris", "mood": "calm"}) is None


def test_a_json_input_is_searched_as_json() -> None:
    assert check({"pages": ["Weight: 1205.89 kg"]}, {"weight": 1205.89}) is None


def test_word_numbers() -> None:
    found = word_numbers("a dozen eggs, two thousand and six, forty-five, one hundred")
    assert {Decimal(12), Decimal(2006), Decimal(45), Decimal(100), Decimal(2)} <= found
