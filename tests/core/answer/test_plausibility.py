"""The default checks for what a schema cannot see (app.core.answer.plausibility)."""

from __future__ import annotations

from decimal import Decimal
from typing import Any

import pytest

from app.core.answer.plausibility import Plausibility, significant_digits
from app.core.text.number_words import word_numbers
from app.core.turn.loop import Runtime, run_job
from app.core.wire.spec import JobSpec
from tests.core.fakes import ScriptedClient, answer

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
    first = check_.check({"count": 70000000000})
    assert first is not None
    assert first.number == Decimal(70000000000)
    assert "occurs nowhere in the input" in first.diagnosis
    again = check_.check({"count": 70000000000}, again={first.number})
    assert again is not None
    assert again.diagnosis == (
        "$.count: 70000000000 again, and the input does not state it. The numbers the input "
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
    ("text", "answer", "instead"),
    [("In 2019 the club had three coaches.", {"city": "Leeds", "weight": 3000000000},
      '{"city": "Leeds", "weight": 3}'),
     ("It took 1 hours and 45 minutes.", {"count": 12, "weight": 4560000000},
      '{"count": 12, "weight": 45}'),
     ("In 2016: 12 coaches, 45 kg.", {"count": 120000000000, "weight": 4500000000},
      '{"count": 12, "weight": 45}')],
)  # fmt: skip
def test_a_runaway_number_is_re_asked_with_the_answer_its_digits_ran_on_from(
    text: str, answer: dict[str, Any], instead: str
) -> None:
    # The runaway number is not quoted: shown it, a small model writes it again.
    problem = check(text, answer)
    assert problem is not None
    ran_on = "the digits ran on past the number the input states"
    assert problem.endswith(f": {ran_on}. Answer {instead}")


def test_a_runaway_number_names_the_input_number_when_that_does_not_fit_the_schema() -> None:
    problem = check("In 2019 the club had three coaches.", {"count": 3000000000})  # minimum 10
    assert problem is not None
    assert problem.endswith("give the number as the input states it (it states 3)")


def repaired(job_input: Any, value: Any) -> tuple[Any, tuple[str, ...]]:
    return Plausibility.of(job_input=job_input, schema=SCHEMA, task="t").repaired(value)


@pytest.mark.parametrize(
    ("text", "number", "trimmed", "written"),
    [("A blender for 723.82 euros.", 723.820496, 723.82, "723.82"),
     ("The parcel weighs 13.2 kg.", 13.204567, 13.2, "13.2"),
     ("A lamp for 45.80 euros.", 45.8012345, 45.8, "45.80"),
     ("Prices: 45.8 and 45.88 euros.", 45.88639742302659, 45.88, "45.88"),
     ("It was -2.5 degrees.", -2.5123456, -2.5, "-2.5"),
     ({"total": "1,234.50 EUR"}, 1234.5012345, 1234.5, "1234.50")],
)  # fmt: skip
def test_a_number_of_the_input_with_decimals_run_on_is_trimmed_back_to_it(
    text: Any, number: float, trimmed: float, written: str
) -> None:
    value, notes = repaired(text, {"city": "Leeds", "weight": number})
    assert value == {"city": "Leeds", "weight": trimmed}
    assert notes == (
        f"plausibility: /weight {number!r} trimmed to {written}, the number the input states",
    )


def test_a_trimmed_number_deep_in_the_answer_leaves_the_rest_as_it_was() -> None:
    answer = {"lines": [{"weight": 13.204567}, {"weight": 2}]}
    value, notes = repaired("13.2 kg and 2 kg", answer)
    assert value == {"lines": [{"weight": 13.2}, {"weight": 2}]}
    assert answer == {"lines": [{"weight": 13.204567}, {"weight": 2}]}  # not changed in place
    assert notes[0].startswith("plausibility: /lines/0/weight 13.204567 trimmed to 13.2")


@pytest.mark.parametrize(
    ("text", "number"),
    [("Alice moved to Lyon.", 45.88639742302659),  # the input states no number
     ("In 2019 the club had 3 coaches.", 3000000000),  # digits added to an integer
     ("In 2019 the club had three coaches.", 3000000000),  # said in words
     ("3 items for 10 euros.", 3.3333333),  # an integer of the input: a quotient, perhaps
     ("The parcel weighs 13.2 kg.", 13.31234),  # not the input's decimals
     ("The parcel weighs 13.20 kg.", 13.21234),  # not its decimals as written
     ("The parcel weighs 13.2 kg.", 14.204567),  # not its whole part
     ("The parcel weighs 13.2 kg.", -13.204567),  # not its sign
     ("The parcel weighs 1.5 kg.", 1.55),  # not a runaway: the checks let it through
     ("The parcel weighs 13.2 kg.", 13.2),  # the input's own
     ("The parcel weighs 0.5 kg.", 0.5)]
)  # fmt: skip
def test_a_number_is_not_trimmed_unless_the_input_states_the_digits_it_ran_on_from(
    text: str, number: float
) -> None:
    assert repaired(text, {"weight": number}) == ({"weight": number}, ())


def weight_job(schema: dict[str, Any]) -> JobSpec:
    return JobSpec.model_validate(
        {
            "task": "Extract the weight.",
            "input": "The parcel weighs 13.2 kg.",
            "schema": {"type": "object", "properties": {"weight": schema}, "required": ["weight"]},
            "budget": {"maxTurns": 1, "returnRetries": 1},
            "checks": {"plausibility": True},
        }
    )


async def test_a_trimmed_answer_is_accepted_with_a_warning_and_no_re_ask() -> None:
    client = ScriptedClient([answer({"weight": 13.204567})])
    result = await run_job(weight_job({"type": "number"}), Runtime(client=client))
    assert result.envelope.status == "success"
    assert result.envelope.data == {"weight": 13.2}
    assert len(result.turns) == 1
    assert (
        "plausibility: /weight 13.204567 trimmed to 13.2, the number the input states"
        in result.envelope.warnings
    )


async def test_a_trimmed_answer_the_schema_refuses_is_not_trimmed_but_re_asked() -> None:
    client = ScriptedClient([answer({"weight": 13.204567}), answer({"weight": 13.3})])
    result = await run_job(
        weight_job({"type": "number", "exclusiveMinimum": 13.2}), Runtime(client=client)
    )
    assert result.envelope.data == {"weight": 13.3}
    first = result.turns[0]
    assert first.outcome == "rejected"
    assert first.diagnosis is not None
    assert "the digits ran on past the number the input states" not in first.diagnosis
    assert "13.204567 occurs nowhere in the input" in first.diagnosis  # 13.2: not > 13.2
    assert not any("trimmed" in w for w in result.envelope.warnings)
