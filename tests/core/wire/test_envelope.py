"""The envelope and its constants (spec 001)."""

from __future__ import annotations

import pytest

from app.core.wire import codes
from app.core.wire.envelope import Envelope, Execution, Progress
from app.core.wire.record import Spend


def test_retryable_and_non_retryable_sets_partition_the_errors() -> None:
    assert {
        codes.LLM_TIMEOUT,
        codes.LLM_RATE_LIMIT,
        codes.LLM_UNAVAILABLE,
    } == codes.RETRYABLE_LLM_ERRORS
    assert {
        codes.LLM_REFUSAL,
        codes.LLM_INVALID_OUTPUT,
        codes.LLM_TOKEN_LIMIT,
    } <= codes.NON_RETRYABLE_LLM_ERRORS
    assert {codes.EVENT_TIMEOUT, codes.EVENT_UNAVAILABLE} == codes.RETRYABLE_EVENT_ERRORS
    assert codes.RETRYABLE_ERRORS.isdisjoint(codes.NON_RETRYABLE_ERRORS)
    assert codes.RETRYABLE_ERRORS | codes.NON_RETRYABLE_ERRORS == codes.ALL_ERRORS
    assert codes.is_retryable(codes.LLM_RATE_LIMIT)
    assert not codes.is_retryable(codes.BUDGET_EXHAUSTED)


@pytest.mark.parametrize(
    ("code", "attempt", "expected"),
    [
        (codes.LLM_RATE_LIMIT, 0, 5000),
        (codes.LLM_RATE_LIMIT, 1, 10000),
        (codes.LLM_TIMEOUT, 0, 1000),
        (codes.LLM_UNAVAILABLE, 0, 10000),
        (codes.LLM_UNAVAILABLE, 2, 30000),  # capped
        (codes.EVENT_TIMEOUT, 1, 4000),
        ("something-else", 0, 2000),  # default
    ],
)
def test_backoff_schedule_of_spec_001(code: str, attempt: int, expected: int) -> None:
    assert codes.backoff_delay_ms(code, attempt) == expected


def test_success_envelope_has_data_and_no_error() -> None:
    env = Envelope.success({"a": 1}, warnings=("repair: x",)).model_dump(mode="json")
    assert env == {"status": "success", "data": {"a": 1}, "warnings": ["repair: x"]}


def test_error_envelope_has_error_detail_and_cause() -> None:
    env = Envelope.failure(
        codes.BUDGET_EXHAUSTED, "no valid answer", cause=codes.LLM_INVALID_OUTPUT
    )
    assert env.model_dump(mode="json") == {
        "status": "error",
        "error": "budget-exhausted",
        "detail": "no valid answer",
        "cause": "llm-invalid-output",
        "warnings": [],
    }


def test_error_envelope_refuses_unknown_constants() -> None:
    with pytest.raises(ValueError, match="unknown error constant"):
        Envelope.failure("oops", "x")


def test_in_progress_envelope_carries_progress() -> None:
    env = Envelope.in_progress(Progress(phase="model-call", turn=2)).model_dump(mode="json")
    assert env == {
        "status": "in-progress",
        "progress": {"phase": "model-call", "turn": 2},
        "warnings": [],
    }


def test_null_data_is_still_data() -> None:
    assert Envelope.success(None).model_dump()["data"] is None


@pytest.mark.parametrize(
    ("envelope", "status"),
    [
        (Envelope.success(1), "succeeded"),
        (Envelope.failure(codes.BUDGET_EXHAUSTED, "x"), "failed"),
        (Envelope.failure(codes.CANCELLED, "x"), "cancelled"),
        (Envelope.in_progress(), "in_progress"),
    ],
)
def test_the_job_state_follows_from_the_envelope_in_one_place(
    envelope: Envelope, status: str
) -> None:
    assert envelope.job_status == status


def test_an_envelope_reads_back_from_its_own_json() -> None:
    env = Envelope.failure(codes.BUDGET_EXHAUSTED, "no", cause=codes.LLM_INVALID_OUTPUT)
    assert Envelope.model_validate_json(env.model_dump_json()) == env


def test_earlier_attempts_add_their_cached_tokens_to_the_execution() -> None:
    execution = Execution(
        duration_ms=5,
        tokens_used=1510,
        input_tokens=1500,
        output_tokens=10,
        cost=0.001,
        model="m",
        provider="p",
        retry_count=0,
        timestamp="2026-11-23T00:00:00.000Z",
        llm_calls=1,
        transport_retries=0,
        wasted_tokens=0,
        wasted_cost=0.0,
        cached_input_tokens=1280,
    )
    earlier = Spend(
        calls=1, input_tokens=1500, output_tokens=10, cost=0.002, cache_write_tokens=1400
    )
    envelope = Envelope.success({"x": 1}, execution=execution).with_earlier(earlier)
    assert envelope.execution is not None
    assert envelope.execution.input_tokens == 3000
    assert envelope.execution.cached_input_tokens == 1280
    assert envelope.execution.cache_write_tokens == 1400
