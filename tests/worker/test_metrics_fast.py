"""The per-job metrics a worker records (``app.metrics``: ``record_turn``, ``record_job``,
``job_started``/``job_left``) move the exported series: counts, sums and buckets."""

from __future__ import annotations

from app import metrics
from app.core.turn.clock import SystemClock
from app.core.turn.ledger import Ledger
from app.core.wire.record import TokenUsage, TurnRecord


def _record(*, latency_ms: int, cost: float | None, outcome: str = "success") -> TurnRecord:
    return TurnRecord(
        index=1,
        type="normal",
        outcome=outcome,  # type: ignore[arg-type]
        attempt=1,
        error_code=None,
        diagnosis=None,
        usage=TokenUsage(input_tokens=11, output_tokens=7),
        cost_usd=cost,
        latency_ms=latency_ms,
        provider="fast-test",
        model="m1",
        finish_reason="stop",
        max_output_tokens=100,
        prompt_tokens_estimate=10,
        message_count=2,
        tools_offered=0,
        tool_calls=(),
        transport_retries=0,
        transport_wait_ms=0,
        escalated=False,
        simplified=False,
        warnings=(),
        answer=None,
        started_at="2026-11-24T00:00:00.000Z",
    )


def test_a_turn_and_a_job_move_the_exported_series_as_before() -> None:
    def value(name: str, **labels: str) -> float:
        return metrics.REGISTRY.get_sample_value(name, labels) or 0.0

    model = {"provider": "fast-test", "model": "m1"}

    def snapshot() -> dict[str, float]:
        return {
            "turns": value("reprompt_turns_total", type="normal", outcome="success"),
            "calls": value("reprompt_llm_calls_total", **model),
            "input": value("reprompt_llm_tokens_total", **model, direction="input"),
            "output": value("reprompt_llm_tokens_total", **model, direction="output"),
            "cost": value("reprompt_llm_cost_usd_total", **model),
            "latency_sum": value("reprompt_llm_request_duration_seconds_sum", **model),
            "latency_le_1": value(
                "reprompt_llm_request_duration_seconds_bucket", **model, le="1.0"
            ),
            "finished": value("reprompt_jobs_finished_total", status="succeeded", error=""),
            "duration": value("reprompt_job_duration_seconds_count", status="succeeded"),
            "attempts": value("reprompt_attempts_to_success_count"),
            "waits": value("reprompt_queue_wait_seconds_count"),
            "in_progress": value("reprompt_jobs_in_progress"),
        }

    before = snapshot()
    metrics.job_started(0.2)
    during = value("reprompt_jobs_in_progress")
    metrics.record_turn(_record(latency_ms=300, cost=0.5), calls_left=0)
    ledger = Ledger(SystemClock())
    ledger.turns.append(_record(latency_ms=300, cost=0.5))
    envelope = ledger.success({"a": 1}, ())
    metrics.record_job(envelope, duration_s=0.4)
    metrics.job_left()
    after = snapshot()
    moved = {key: round(after[key] - before[key], 9) for key in before}
    assert moved == {
        "turns": 1,
        "calls": 1,
        "input": 11,
        "output": 7,
        "cost": 0.5,
        "latency_sum": 0.3,
        "latency_le_1": 1,
        "finished": 1,
        "duration": 1,
        "attempts": 1,
        "waits": 1,
        "in_progress": 0,
    }
    assert during == before["in_progress"] + 1
