"""The per-job metrics a worker records (``app.metrics``: ``record_turn``, ``record_job``,
``job_started``/``job_left``) publish exactly what prometheus_client's own ``inc`` and
``observe`` would: every sample of the exposition, buckets, sums and counts included."""

from __future__ import annotations

import math

import pytest
from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest

from app import metrics
from app.core.clock import SystemClock
from app.core.ledger import Ledger
from app.core.turn import TokenUsage, TurnRecord


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


# At, just above and below bucket bounds, zero, huge, and a NaN.
AMOUNTS = [0.0, 0.005, 0.0050001, 0.1, 0.25, 1.0, 2.5, 7.3, 60.0, 1e9, -1.0, math.nan]


def _samples(registry: CollectorRegistry) -> list[tuple[str, dict[str, str], float]]:
    out = []
    for family in registry.collect():
        for sample in family.samples:
            if sample.name.endswith("_created"):
                continue
            value = -42.0 if math.isnan(sample.value) else sample.value
            out.append((sample.name, dict(sample.labels), value))
    return out


def test_the_observer_fills_the_buckets_and_sum_observe_would() -> None:
    for buckets in (Histogram.DEFAULT_BUCKETS, (0.1, 0.25, 1.0, 5.0)):
        stock_registry, fast_registry = CollectorRegistry(), CollectorRegistry()
        stock = Histogram("h", "h", ["k"], buckets=buckets, registry=stock_registry)
        fast = Histogram("h", "h", ["k"], buckets=buckets, registry=fast_registry)
        observe = metrics._Observer(fast.labels("a"))
        for amount in AMOUNTS:
            stock.labels("a").observe(amount)
            observe(amount)
        assert _samples(fast_registry) == _samples(stock_registry)


def test_the_adders_count_what_inc_would_and_refuse_a_negative_amount() -> None:
    stock_registry, fast_registry = CollectorRegistry(), CollectorRegistry()
    counters = [Counter("c", "c", ["k"], registry=r) for r in (stock_registry, fast_registry)]
    gauges = [Gauge("g", "g", registry=r) for r in (stock_registry, fast_registry)]
    add, gauge = metrics._adder(counters[1].labels("a")), metrics._adder(gauges[1])
    for amount in (1, 2.5, 0, 1e6):
        counters[0].labels("a").inc(amount)
        metrics._add(add, amount)
    gauges[0].inc()
    gauges[0].inc()
    gauges[0].dec()
    gauge(1)
    gauge(1)
    gauge(-1)
    assert b'c_total{k="a"} 1.0000035e+06' in generate_latest(fast_registry)
    assert _samples(fast_registry) == _samples(stock_registry)
    with pytest.raises(ValueError, match="non-negative"):
        counters[0].labels("a").inc(-1)
    with pytest.raises(ValueError, match="non-negative"):
        metrics._add(add, -1)


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
