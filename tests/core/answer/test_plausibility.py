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


def test_a_round_number_below_a_million_is_not_questioned_for_its_width() -> None:
    assert check("The film runs 3 hours.", {"count": 10800}) is None  # in seconds
    assert check({"id": 1, "city": "Oslo"}, {"count": 700000}) is None  # its population
    assert check({"id": 1, "city": "Oslo"}, {"count": 7000000}) is not None


def test_a_number_with_no_more_digits_than_the_input_passes() -> None:
    assert check("Order 123456 shipped.", {"count": 654321}) is None
    assert check("Order 123456 shipped.", {"count": 6543210987}) is not None


def test_a_copied_constraint_or_field_name_is_rejected() -> None:
    problem = check("Alice lives in Paris.", {"city": ">=10"})
    assert problem is not None
    assert "prompt's own wording" in problem
    assert check("Alice lives in Paris.", {"city": "city"}) is not None
    assert check("Alice lives in Paris.", {"city": "string"}) is not None


def test_a_string_of_a_json_input_is_found_as_written_not_json_escaped() -> None:
    quoted = 'He said "no" <b class="x">'
    task = f"Copy the note: {quoted}"
    assert check({"note": quoted}, {"city": quoted}, task=task) is None
    assert check({"note": "other"}, {"city": quoted}, task=task) is not None  # the task's


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


def test_a_runaway_number_given_again_is_answered_with_the_input_s_numbers() -> None:
    text = "In 2016 the club had twelve coaches and 3.5 fields."
    check_ = Plausibility.of(job_input=text, schema=SCHEMA, task="Extract the visit.")
    first = check_.check({"count": 12000000000})
    assert first is not None
    assert first.number == Decimal(12000000000)
    assert "occurs nowhere in the input" in first.diagnosis
    again = check_.check({"count": 12000000000}, again={first.number})
    assert again is not None
    assert again.diagnosis == (
        "$.count: 12000000000 again, and the input does not state it. The numbers the input "
        "states are 2016, 3.5, 12: give the one it states for this field, with exactly its digits"
    )
    assert check_.check({"count": 12}, again={first.number}) is None  # one of them: accepted


def test_a_repeated_runaway_number_without_numbers_in_the_input_asks_for_few_digits() -> None:
    problem = check("Alice moved to Lyon.", {"weight": 45.88639742302659})
    assert problem is not None
    again = Plausibility.of(job_input="Alice moved to Lyon.", schema=SCHEMA, task="t").diagnosis(
        {"weight": 45.88639742302659}, again={Decimal("45.88639742302659")}
    )
    assert again is not None
    assert "the input states no number" in again


@pytest.mark.parametrize(
    ("text", "number", "hint"),
    [("In 2019 the club had three coaches.", 3000000000, "(it states 3)"),
     ("It took 1 hours and 45 minutes.", 4560000000, "(it states 45)"),
     ("A blender for 723.82 euros.", 723.820496, "(it states 723.82)")],
)  # fmt: skip
def test_a_runaway_number_names_the_input_number_its_digits_ran_on_from(
    text: str, number: float, hint: str
) -> None:
    problem = check(text, {"weight": number})
    assert problem is not None
    assert problem.endswith(f"give the number as the input states it {hint}")
