"""The work budget: a shortcut tried first costs the budget only when it is taken."""

from __future__ import annotations

import pytest

from app.core.schema.steps import TooMuchWork, charge, tentatively, work_budget


def spend(steps: int, answer: bool) -> bool:
    charge(steps)
    return answer


def test_a_check_that_says_yes_is_charged_to_the_budget_in_force() -> None:
    with work_budget(400):
        assert tentatively(lambda: spend(60, True))
        charge(340)
        with pytest.raises(TooMuchWork):
            charge(1)


def test_a_check_that_says_no_costs_the_budget_nothing() -> None:
    with work_budget(100):
        assert not tentatively(lambda: spend(20, False))
        charge(100)  # all of it is still there
        with pytest.raises(TooMuchWork):
            charge(1)


def test_a_check_gets_a_quarter_of_what_is_left_and_running_out_is_a_no() -> None:
    """So a hostile value that runs a check out costs the full way's work and a quarter."""
    with work_budget(100):
        charge(20)
        assert tentatively(lambda: spend(20, True))
        assert not tentatively(lambda: spend(16, True))  # a quarter of the 60 left is 15
        charge(60)  # the check that ran out cost nothing
        with pytest.raises(TooMuchWork) as raised:
            charge(1)
        assert raised.value.limit == 100  # the budget in force, not the check's


def test_without_a_budget_a_check_gets_a_quarter_of_the_base_one() -> None:
    assert tentatively(lambda: spend(1_250, True))
    assert not tentatively(lambda: spend(1_251, True))
