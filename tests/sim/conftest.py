from __future__ import annotations

from collections.abc import Iterator

import httpx
import pytest

from reprompt_sim.server import SimConfig, serve_in_background


@pytest.fixture(scope="module")
def sim_url() -> Iterator[str]:
    """A perfect simulator (no random failures) shared by a module; scripts drive it."""
    with serve_in_background(SimConfig(seed=1)) as url:
        yield url


@pytest.fixture
def client(sim_url: str) -> Iterator[httpx.Client]:
    with httpx.Client(base_url=sim_url, timeout=10) as http:
        yield http
