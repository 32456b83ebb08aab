"""tests/batches: ``alice`` is the batch API's client (tests/batches/fixtures.py)."""

from __future__ import annotations

import httpx
import pytest


@pytest.fixture
def alice(batch_alice: httpx.Client) -> httpx.Client:
    return batch_alice
