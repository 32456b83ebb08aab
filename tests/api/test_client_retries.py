"""The Python ``ApiClient`` retries 429 and 503 after ``Retry-After`` (bounded) and runs a job
that pauses for a client tool (#29, item 11). A real API on loopback whose tenant may make
one request a second, the simulator scripted to call a client tool, the in-process worker.
"""

from __future__ import annotations

from typing import Any

import pytest

from app.client import ApiClient, ApiError, retry_after_s
from tests.api.test_tools import calls, tool_job
from tests.service import KEYS, StartApi, api_keys


def test_a_rate_limited_client_waits_retry_after_and_runs_a_tool_job_to_its_end(
    start_api: StartApi,
) -> None:
    url = start_api(
        embedded_worker=True, api_keys=api_keys(), rate_per_tenant=1, burst_per_tenant=1
    )
    retries: list[tuple[int, float]] = []
    seen: list[dict[str, Any]] = []

    def lookup(args: dict[str, Any]) -> dict[str, Any]:
        seen.append(args)
        return {"price": 9.5}

    def stock(args: dict[str, Any]) -> dict[str, Any]:
        return {"available": 7}

    with ApiClient(
        url, key=KEYS["alice"], on_retry=lambda status, wait: retries.append((status, wait))
    ) as api:
        job = api.run(
            tool_job([calls("lookup", "stock"), "ok"]),
            tools={"lookup": lookup, "stock": stock},
            timeout_s=120,
        )
    assert job["status"] == "succeeded", job
    assert seen == [{"sku": "A1"}]
    # One request a second: the submit, the long-polls and the outputs met 429s and waited.
    assert retries
    assert {status for status, _ in retries} == {429}
    assert all(1.0 <= wait <= 30.0 for _, wait in retries)


def test_the_client_gives_up_after_its_attempts(start_api: StartApi) -> None:
    url = start_api(api_keys=api_keys(), rate_per_tenant=0.001, burst_per_tenant=1)
    retries: list[tuple[int, float]] = []
    with ApiClient(
        url,
        key=KEYS["bob"],
        max_attempts=2,
        max_wait_s=0.01,  # Retry-After says 1000 s: the client waits its own bound
        on_retry=lambda status, wait: retries.append((status, wait)),
    ) as api:
        with pytest.raises(ApiError) as first:
            api.get("job_00000000000000000000000000")  # 404: the one token, not retried
        assert first.value.status == 404
        with pytest.raises(ApiError) as refused:
            api.get("job_00000000000000000000000000")
    assert refused.value.status == 429
    assert retries == [(429, 0.01)]


@pytest.mark.parametrize(
    ("header", "seconds"), [(None, 1.0), ("3", 3.0), ("0", 0.0), ("soon", 1.0), ("-5", 0.0)]
)
def test_retry_after_is_read_as_seconds(header: str | None, seconds: float) -> None:
    assert retry_after_s(header) == seconds
