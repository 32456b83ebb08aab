"""Hostile input, one test per way it was seen to hurt the service (issue #10).

Each test states a wall-clock bound on what the service does with the hostile thing (a
hostile request is answered in well under a second, a hostile answer is rejected in
milliseconds); the bounds are generous for a busy 2-core machine and still catch the
minutes that backtracking took. Fixtures live in the modules that need them.
"""

import gc
from collections.abc import Iterator

import pytest

from app.providers.retry import set_testing
from tests.service import data_dir, providers, redis_url, sim_url, start_api

__all__ = ["data_dir", "providers", "redis_url", "sim_url", "start_api"]


@pytest.fixture(autouse=True)
def _no_collector_in_cpu_bounds() -> Iterator[None]:
    """The CPU bounds measure the checks, not Python's cycle collector: a full collection
    of the suite's heap (100+ ms) landing inside a timed check made these tests flaky on a
    loaded machine. Collected before, and kept off during, each test."""
    gc.collect()
    gc.disable()
    try:
        yield
    finally:
        gc.enable()


@pytest.fixture
def no_sleeping() -> Iterator[None]:
    """Provider retry waits are computed and recorded, never slept (the modules that call
    providers use it: ``pytestmark = pytest.mark.usefixtures("no_sleeping")``)."""
    set_testing(True)
    try:
        yield
    finally:
        set_testing(False)
