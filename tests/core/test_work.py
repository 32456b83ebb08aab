"""The work budget: a shortcut tried first costs the budget only when it is taken."""

from __future__ import annotations

import pytest

from app.core.work import TooMuchWork, charge, tentatively, work_budget


def spend(steps: int, answer: bool) -> bool:
    charge(steps)
    return answer


def test_a_check_that_says_yes_is_charged_to_the_budget_in_force() -> None:
    with work_budget(100):
        assert tentatively(lambda: spend(60, True))
        with pytest.raises(TooMuchWork):
            charge(41)


def test_a_check_that_says_no_costs_the_budget_nothing() -> None:
    with work_budget(100):
        assert not tentatively(lambda: spend(60, False))
        charge(100)  # all of it is still there
        with pytest.raises(TooMuchWork):
            charge(1)


def test_a_check_gets_only_what_is_left_and_running_out_is_a_no() -> None:
    with work_budget(100):
        charge(50)
        assert not tentatively(lambda: spend(51, True))
        charge(50)  # the check that ran out cost nothing
        with pytest.raises(TooMuchWork) as raised:
            charge(1)
        assert raised.value.limit == 100  # the budget in force, not the check's


def test_without_a_budget_a_check_gets_the_base_one() -> None:
    assert tentatively(lambda: spend(4_000, True))
    assert not tentatively(lambda: spend(6_000, True))
