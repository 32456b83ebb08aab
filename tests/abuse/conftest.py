"""Hostile input, one test per way it was seen to hurt the service (issue #10).

Each test states what the service does with the hostile thing (a 4xx naming the field, a
rejected answer, a check stopped by its work budget), never how long it takes: the minutes
that backtracking took meet pytest-timeout, and bench/hostile_inputs.py measures the
milliseconds (docs/benchmarks/hostile-inputs.md). Fixtures live in the modules that need
them.
"""

from collections.abc import Iterator

import pytest

from app.providers.retry import set_testing


@pytest.fixture
def no_sleeping() -> Iterator[None]:
    """Provider retry waits are computed and recorded, never slept (the modules that call
    providers use it: ``pytestmark = pytest.mark.usefixtures("no_sleeping")``)."""
    set_testing(True)
    try:
        yield
    finally:
        set_testing(False)
