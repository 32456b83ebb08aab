"""Every Prometheus metric reprompt exports, in one place. Labels stay bounded: provider,
model, turn type, outcome, status, error code — never a job id, tenant or prompt text.

    metrics.record_turn(event.data)      # from the loop's turn_end trace event
    metrics.record_job(envelope_dict, duration_s=..., attempts=...)
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from prometheus_client import (
    CONTENT_TYPE_LATEST,
    CollectorRegistry,
    Counter,
    Gauge,
    Histogram,
    generate_latest,
    start_http_server,
)

REGISTRY = CollectorRegistry(auto_describe=True)
P = "reprompt_"

JOBS_SUBMITTED = Counter(f"{P}jobs_submitted", "Jobs accepted by the API.", registry=REGISTRY)
JOBS_FINISHED = Counter(
    f"{P}jobs_finished",
    "Jobs that reached a terminal state, by status and error code ('' on success).",
    ["status", "error"],
    registry=REGISTRY,
)
TURNS = Counter(
    f"{P}turns",
    "Model calls made by the turn loop, by turn type and outcome.",
    ["type", "outcome"],
    registry=REGISTRY,
)
REASKS = Counter(
    f"{P}reasks",
    "Model re-asks after a rejected answer (validation retries), by the rejection's error code.",
    ["error"],
    registry=REGISTRY,
)
TRANSPORT_RETRIES = Counter(
    f"{P}transport_retries",
    "Transport-level retries inside one model call, by error code.",
    ["error"],
    registry=REGISTRY,
)
LLM_CALLS = Counter(
    f"{P}llm_calls", "Model calls, by provider and model.", ["provider", "model"], registry=REGISTRY
)
LLM_TOKENS = Counter(
    f"{P}llm_tokens",
    "Tokens reported by providers, by direction (input/output).",
    ["provider", "model", "direction"],
    registry=REGISTRY,
)
LLM_COST = Counter(
    f"{P}llm_cost_usd",
    "Spend in USD on calls with a known price.",
    ["provider", "model"],
    registry=REGISTRY,
)
WASTED_TOKENS = Counter(
    f"{P}wasted_tokens",
    "Tokens spent on answers that were rejected.",
    ["provider", "model"],
    registry=REGISTRY,
)
WASTED_COST = Counter(
    f"{P}wasted_cost_usd",
    "USD spent on answers that were rejected.",
    ["provider", "model"],
    registry=REGISTRY,
)
ATTEMPTS_TO_SUCCESS = Histogram(
    f"{P}attempts_to_success",
    "Model calls a successful job needed.",
    buckets=(1, 2, 3, 4, 5, 6, 8, 10, 15, 20),
    registry=REGISTRY,
)
JOB_DURATION = Histogram(
    f"{P}job_duration_seconds",
    "Time from a worker claiming a job to its end, by status.",
    ["status"],
    buckets=(0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300, 600),
    registry=REGISTRY,
)
QUEUE_WAIT = Histogram(
    f"{P}queue_wait_seconds",
    "Time from submission to a worker claiming the job.",
    buckets=(0.005, 0.01, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 300),
    registry=REGISTRY,
)
LLM_LATENCY = Histogram(
    f"{P}llm_request_duration_seconds",
    "Duration of one model call including its transport retries.",
    ["provider", "model"],
    buckets=(0.05, 0.1, 0.25, 0.5, 1, 2, 4, 8, 16, 32, 64, 128),
    registry=REGISTRY,
)
JOBS_IN_PROGRESS = Gauge(
    f"{P}jobs_in_progress", "Jobs this worker process is running now.", registry=REGISTRY
)
LEASES_EXPIRED = Counter(
    f"{P}leases_expired",
    "Jobs requeued because their worker stopped heartbeating.",
    registry=REGISTRY,
)
POISON_JOBS = Counter(
    f"{P}poison_jobs",
    "Jobs failed because their workers were lost too many times.",
    registry=REGISTRY,
)
STALE_COMMITS = Counter(
    f"{P}stale_commits_rejected",
    "Writes refused because the worker no longer held the job's lease.",
    registry=REGISTRY,
)

QUEUE_DEPTH = Gauge(f"{P}queue_depth", "Jobs waiting to be claimed.", registry=REGISTRY)
QUEUE_OLDEST_AGE = Gauge(
    f"{P}queue_oldest_age_seconds", "Age of the oldest queued job.", registry=REGISTRY
)
CIRCUIT_STATE = Gauge(
    f"{P}circuit_state",
    "Circuit breaker per provider/model: 0 closed, 1 half-open, 2 open.",
    ["target"],
    registry=REGISTRY,
)
_CIRCUIT = {"closed": 0, "half_open": 1, "half-open": 1, "open": 2}
_WASTED_OUTCOMES = {"invalid", "rejected", "truncated", "refusal", "explicit_fail"}


def record_turn(data: Mapping[str, Any]) -> None:
    """Count one model call from the loop's ``turn_end`` event."""
    outcome = str(data["result"])
    TURNS.labels(type=data["type"], outcome=outcome).inc()
    provider, model = data.get("provider"), data.get("model")
    if provider is None or model is None:
        return  # the call failed before any provider answered
    labels = {"provider": provider, "model": model}
    LLM_CALLS.labels(**labels).inc()
    tokens_in, tokens_out = int(data["inputTokens"]), int(data["outputTokens"])
    LLM_TOKENS.labels(**labels, direction="input").inc(tokens_in)
    LLM_TOKENS.labels(**labels, direction="output").inc(tokens_out)
    cost = data.get("costUsd")
    if cost is not None:
        LLM_COST.labels(**labels).inc(float(cost))
    LLM_LATENCY.labels(**labels).observe(int(data["latencyMs"]) / 1000)
    if outcome in _WASTED_OUTCOMES:
        WASTED_TOKENS.labels(**labels).inc(tokens_in + tokens_out)
        if cost is not None:
            WASTED_COST.labels(**labels).inc(float(cost))
    if outcome in {"invalid", "rejected", "truncated"} and int(data.get("callsLeft", 0)) > 0:
        REASKS.labels(error=str(data.get("errorCode") or "")).inc()


def record_job(envelope: Mapping[str, Any], *, status: str, duration_s: float) -> None:
    """Count a finished job from its envelope (``status``: the job's terminal state)."""
    JOBS_FINISHED.labels(status=status, error=str(envelope.get("error") or "")).inc()
    JOB_DURATION.labels(status=status).observe(duration_s)
    execution = envelope.get("execution") or {}
    if envelope.get("status") == "success" and execution.get("llmCalls"):
        ATTEMPTS_TO_SUCCESS.observe(int(execution["llmCalls"]))


def record_transport_retry(code: str, attempt: int, wait_s: float) -> None:
    """The provider router's ``on_retry`` hook."""
    TRANSPORT_RETRIES.labels(error=code).inc()


def record_state(
    *, queue: tuple[int, float] | None, circuits: Mapping[str, Mapping[str, Any]] | None
) -> None:
    """Scrape-time gauges: queue depth and oldest age (read once, by the API), circuits."""
    if queue is not None:
        QUEUE_DEPTH.set(queue[0])
        QUEUE_OLDEST_AGE.set(queue[1])
    if circuits is not None:
        for target, state in circuits.items():
            CIRCUIT_STATE.labels(target=target).set(_CIRCUIT.get(str(state.get("state")), 0))


def serve(host: str, port: int) -> Callable[[], None]:
    """Expose ``/metrics`` on ``host:port`` in a thread (a worker's port); returns its stop."""
    server, thread = start_http_server(port, addr=host, registry=REGISTRY)

    def stop() -> None:
        server.shutdown()
        server.server_close()
        thread.join(timeout=5)

    return stop


def exposition() -> tuple[bytes, str]:
    """The text format body and its content type, for ``GET /metrics``."""
    return generate_latest(REGISTRY), CONTENT_TYPE_LATEST
