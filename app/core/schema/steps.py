"""The work budget of a check: how many steps checking one value may take.

Schema keywords, pattern matches, coercions and the semantic checks all ``charge`` the
budget in force; past it they raise ``TooMuchWork``, so no schema and value together can
keep a process busy for long, whatever they hold::

    with work_budget(steps_for(len(answer))):    # every check inside shares these steps
        Schema(schema).errors(value)              # TooMuchWork past them

A step is about a microsecond of CPU: one schema keyword evaluated, one subschema
visited, or the worst case of a pattern match (``app.core.schema.pattern.Pattern.cost``).
"""

from __future__ import annotations

from collections.abc import Callable
from contextvars import ContextVar, Token
from typing import Final

# A check gets a floor, plus a share per character of what it checks: a big value gets
# room in proportion, and a small hostile one is stopped within milliseconds.
BASE_STEPS: Final = 5_000
STEPS_PER_CHAR: Final = 8


class TooMuchWork(Exception):
    """A check passed its work budget of ``limit`` steps."""

    def __init__(self, limit: int) -> None:
        super().__init__(f"the check needed more than {limit} steps")
        self.limit = limit


class _Budget:
    __slots__ = ("left", "limit")

    def __init__(self, limit: int) -> None:
        self.left = limit
        self.limit = limit


_BUDGET: ContextVar[_Budget | None] = ContextVar("reprompt_work_budget", default=None)


def steps_for(chars: int) -> int:
    """The budget of checking a value written in ``chars`` characters of JSON."""
    return BASE_STEPS + STEPS_PER_CHAR * chars


class work_budget:  # noqa: N801 (used as a function: ``with work_budget(steps):``)
    """Every check inside shares ``steps``; an enclosing budget, if any, rules instead.

    A class rather than a ``@contextmanager`` generator: it is entered several times per
    answer checked, and a generator's context manager costs a few objects and calls more.
    """

    __slots__ = ("_steps", "_token")

    def __init__(self, steps: int) -> None:
        self._steps = steps
        self._token: Token[_Budget | None] | None = None

    def __enter__(self) -> None:
        if _BUDGET.get() is None:
            self._token = _BUDGET.set(_Budget(self._steps))

    def __exit__(self, *exc: object) -> None:
        token = self._token
        if token is not None:
            self._token = None
            _BUDGET.reset(token)


class own_budget(work_budget):  # noqa: N801 (used as a function, as ``work_budget``)
    """A budget of its own for a check inside another's (a judge's answer, read while the
    candidate's validators run): it neither spends nor is limited by the enclosing one."""

    __slots__ = ()

    def __enter__(self) -> None:
        self._token = _BUDGET.set(_Budget(self._steps))


class carried_budget:  # noqa: N801 (used as a function, as ``work_budget``)
    """One budget for checks made at different times, each inside ``with`` (a streaming
    answer's values, checked as they complete): what one spends, the next has less of.

        budget = carried_budget(steps_for(answer_limit))
        with budget:
            schema.is_valid(value)     # TooMuchWork once all of them together pass it
    """

    __slots__ = ("_budget", "_tokens")

    def __init__(self, steps: int) -> None:
        self._budget = _Budget(steps)
        self._tokens: list[Token[_Budget | None]] = []

    def __enter__(self) -> None:
        self._tokens.append(_BUDGET.set(self._budget))

    def __exit__(self, *exc: object) -> None:
        _BUDGET.reset(self._tokens.pop())


def grant(steps: int) -> None:
    """Give the budget in force ``steps`` more (none in force: nothing to give).

    For work that grows with more than the value checked: a grounded validator gets steps
    in proportion to the job's input, which it searches (``app.core.answer.grounding``).
    """
    budget = _BUDGET.get()
    if budget is not None:
        budget.left += steps
        budget.limit += steps


# ``tentatively`` gives its check this fraction of what is left (1/TRIAL_SHARE).
TRIAL_SHARE: Final = 4


def tentatively(check: Callable[[], bool]) -> bool:
    """Whether ``check()`` says yes within a quarter (``TRIAL_SHARE``) of the budget left.

    Only a yes is charged: after a no (or a check past its share) the caller does the work
    its full way, charged as always, so a shortcut never runs out where that would not::

        if tentatively(lambda: schema.is_valid(value)):   # the common case, at its own cost
            ...
        else:
            errors = schema.errors(coerce(value, schema))  # charged as if nothing came first
    """
    outer = _BUDGET.get()
    left = max(outer.left, 0) if outer is not None else BASE_STEPS
    # A share of it: a no that runs out (a hostile schema or answer) then costs the full
    # way's work and a quarter more, not twice it.
    trial = _Budget(left // TRIAL_SHARE)
    token = _BUDGET.set(trial)
    try:
        passed = check()
    except TooMuchWork:
        return False
    finally:
        _BUDGET.reset(token)
    if passed and outer is not None:
        outer.left -= trial.limit - trial.left
    return passed


def charge(steps: int) -> None:
    """Spend ``steps`` of the budget in force (none: free); ``TooMuchWork`` past it."""
    budget = _BUDGET.get()
    if budget is None:
        return
    budget.left -= steps
    if budget.left < 0:
        raise TooMuchWork(budget.limit)
