"""The caps on a job's dimensions: a signature's compiled schema is measured once per text
and held to each service's own caps; depth counts JSON nesting."""

from __future__ import annotations

from typing import Any

import httpx
from hypothesis import given
from hypothesis import strategies as st

from app.core.admission.caps import depth
from tests.service import CAPS, StartApi, assert_problem, client

# 60 fields: its compiled schema is over the test service's 2048 bytes, far under 64 KiB.
WIDE_SIGNATURE = "{" + ", ".join(f"field_number_{i} :string" for i in range(60)) + "}"


def test_a_signature_whose_schema_is_over_the_cap_is_a_422_every_time_on_every_server(
    alice: httpx.Client, start_api: StartApi
) -> None:
    body = {"task": "Fill the fields.", "signature": WIDE_SIGNATURE}
    roomy = start_api(max_schema_bytes=65_536)
    with client(roomy) as other:
        for _ in range(2):  # measured the first time, the measures kept the second
            problem = assert_problem(alice.post("/v1/jobs", json=body), 422, "invalid-input")
            assert problem["errors"][0]["field"] == "signature"
            assert f"at most {CAPS['max_schema_bytes']}" in problem["detail"]
            # The same text within another service's larger cap: accepted there.
            assert other.post("/v1/jobs", json=body).status_code == 202


def reference_depth(value: Any) -> int:
    if isinstance(value, dict):
        return 1 + max((reference_depth(v) for v in value.values()), default=0)
    if isinstance(value, list):
        return 1 + max((reference_depth(v) for v in value), default=0)
    return 0


JSON = st.recursive(
    st.none() | st.booleans() | st.integers() | st.text(max_size=3),
    lambda inner: (
        st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=2), inner, max_size=3)
    ),
    max_leaves=30,
)


@given(JSON)
def test_depth_counts_nesting_levels(value: Any) -> None:
    assert depth(value) == reference_depth(value)


def test_depth_of_a_deep_value_needs_no_recursion() -> None:
    value: Any = "x"
    for _ in range(5000):
        value = [value]
    assert depth(value) == 5000
