"""Jobs with known retries through the API, and the exact counters read back from /metrics."""

from __future__ import annotations

from typing import Any

import httpx
from prometheus_client.parser import text_string_to_metric_families

from tests.service import StartApi, finished, scripted
from tests.waiting import sync_until

Samples = dict[tuple[str, frozenset[tuple[str, str]]], float]


def scrape(http: httpx.Client) -> Samples:
    response = http.get("/metrics")
    assert response.status_code == 200
    assert response.headers["content-type"].startswith("text/plain")
    samples: Samples = {}
    for family in text_string_to_metric_families(response.text):
        for sample in family.samples:
            samples[(sample.name, frozenset(sample.labels.items()))] = sample.value
    return samples


def value(samples: Samples, name: str, **labels: str) -> float:
    return samples.get((name, frozenset(labels.items())), 0.0)


def delta(before: Samples, after: Samples, name: str, **labels: str) -> float:
    return value(after, name, **labels) - value(before, name, **labels)


def idle(http: httpx.Client) -> Samples:
    """Metrics once no job of an earlier test is still running on the worker."""

    def settled() -> Samples | None:
        samples = scrape(http)
        return samples if value(samples, "reprompt_jobs_in_progress") == 0 else None

    return sync_until(settled, what="the jobs of earlier tests to end")


def test_counters_match_the_jobs_that_ran(alice: httpx.Client) -> None:
    jobs: list[dict[str, Any]] = [
        # succeeded after one re-ask: must_return invalid, retry success
        scripted("Metrics one", ["broken_json", "ok"]),
        # succeeded after two re-asks
        scripted("Metrics two", ["missing_field", "broken_json", "ok"]),
        # failed: two invalid answers, the budget allows two calls
        scripted(
            "Metrics three",
            ["broken_json", "missing_field"],
            budget={"maxTurns": 1, "returnRetries": 1},
        ),
    ]
    before = idle(alice)
    ids = [alice.post("/v1/jobs", json=body).json()["id"] for body in jobs]
    done = [finished(alice, job_id) for job_id in ids]
    after = idle(alice)

    assert [job["status"] for job in done] == ["succeeded", "succeeded", "failed"]
    assert delta(before, after, "reprompt_jobs_submitted_total") == 3
    assert delta(before, after, "reprompt_jobs_finished_total", status="succeeded", error="") == 2
    assert (
        delta(
            before, after, "reprompt_jobs_finished_total", status="failed", error="budget-exhausted"
        )
        == 1
    )
    expected_turns = {
        ("must_return", "invalid"): 3,
        ("retry", "invalid"): 2,
        ("retry", "success"): 2,
    }
    for (turn_type, outcome), count in expected_turns.items():
        got = delta(before, after, "reprompt_turns_total", type=turn_type, outcome=outcome)
        assert got == count, (turn_type, outcome)
    # A re-ask follows every rejected answer that had calls left: 1 + 2 + 1.
    assert delta(before, after, "reprompt_reasks_total", error="llm-invalid-output") == 4
    sim = {"provider": "sim", "model": "sim-model"}
    assert delta(before, after, "reprompt_llm_calls_total", **sim) == 7
    assert delta(before, after, "reprompt_transport_retries_total", error="llm-rate-limit") == 0

    turns = [turn for job in done for turn in job["turns"]]
    tokens_in = sum(turn["usage"]["inputTokens"] for turn in turns)
    tokens_out = sum(turn["usage"]["outputTokens"] for turn in turns)
    assert delta(before, after, "reprompt_llm_tokens_total", **sim, direction="input") == tokens_in
    assert (
        delta(before, after, "reprompt_llm_tokens_total", **sim, direction="output") == tokens_out
    )
    wasted = sum(
        turn["usage"]["inputTokens"] + turn["usage"]["outputTokens"]
        for turn in turns
        if turn["outcome"] != "success"
    )
    assert delta(before, after, "reprompt_wasted_tokens_total", **sim) == wasted
    assert delta(before, after, "reprompt_attempts_to_success_count") == 2
    assert delta(before, after, "reprompt_attempts_to_success_sum") == 2 + 3
    assert delta(before, after, "reprompt_job_duration_seconds_count", status="succeeded") == 2
    assert delta(before, after, "reprompt_queue_wait_seconds_count") == 3


def test_queue_depth_and_oldest_age_are_read_at_scrape_time(start_api: StartApi) -> None:
    url = start_api()  # no worker: what is submitted stays queued
    with httpx.Client(base_url=url, timeout=30) as http:
        assert value(scrape(http), "reprompt_queue_depth") == 0
        for i in range(3):
            http.post("/v1/jobs", json=scripted(f"Queued {i}", ["ok"]))

        # The oldest job's age, read at each scrape: above 0 once Redis's clock has moved.
        def aged() -> Samples | None:
            samples = scrape(http)
            return samples if value(samples, "reprompt_queue_oldest_age_seconds") else None

        samples = sync_until(aged, what="the oldest job to have an age")
    assert value(samples, "reprompt_queue_depth") == 3
    assert value(samples, "reprompt_queue_oldest_age_seconds") > 0


def test_circuit_state_is_exported_per_model(alice: httpx.Client) -> None:
    samples = scrape(alice)
    key = ("reprompt_circuit_state", frozenset({("target", "sim/sim-model")}))
    assert samples[key] == 0  # closed
