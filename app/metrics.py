"""Every Prometheus metric reprompt exports, in one place. Labels stay bounded: provider,
model, turn type, outcome, status, error code — never a job id, tenant or prompt text.

    metrics.record_turn(event.record, calls_left=event.calls_left)   # the loop's TurnEnded
    metrics.record_job(envelope, duration_s=...)
"""

from __future__ import annotations

import errno
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any, Generic, TypeVar

from prometheus_client import (
    CONTENT_TYPE_LATEST,
    CollectorRegistry,
    Counter,
    Gauge,
    Histogram,
    generate_latest,
    start_http_server,
)

from app.core.wire.envelope import Envelope
from app.core.wire.record import REJECTED, ToolCallRecord, TurnRecord

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
    "Tokens reported by providers, by direction: input (all prompt tokens), output, and "
    "of the input, cached_input (read from the provider's prompt cache) and cache_write "
    "(written to it).",
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
HEARTBEAT_AT = Gauge(
    f"{P}worker_heartbeat_timestamp_seconds",
    "When this worker's heartbeat loop last ran (unix time), jobs or none: a worker whose "
    "loop is stuck stops moving it while its /metrics still answer.",
    registry=REGISTRY,
)
LEASE_RENEWALS = Counter(
    f"{P}lease_renewals",
    "Leases this worker's heartbeats renewed (renewed), found gone (lost), or could not "
    "renew because Redis did not answer (failed).",
    ["outcome"],
    registry=REGISTRY,
)
for _outcome in ("renewed", "lost", "failed"):
    LEASE_RENEWALS.labels(_outcome)  # every series from the start, at 0
IDLE_WAITS = Counter(
    f"{P}worker_idle_waits",
    "An idle worker's waits for work, by how they ended: handoff (a submit handed this "
    "worker a job, claimed for it), woken (a wake-up came: a submit chose this worker, or "
    "a requeue told every worker) or timeout (its once-a-second look at the queue).",
    ["ended"],
    registry=REGISTRY,
)
for _ended in ("handoff", "woken", "timeout"):
    IDLE_WAITS.labels(_ended)
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
PATCH_REASKS = Counter(
    f"{P}patch_reasks",
    "Field-level re-asks (only the failing parts asked for again and merged into the last "
    "answer), by the outcome of the merged answer.",
    ["outcome"],
    registry=REGISTRY,
)
CANDIDATE_CALLS = Counter(
    f"{P}candidate_calls",
    "Best-of-N calls (several answers to one question), by outcome: success when one of "
    "the answers was kept.",
    ["outcome"],
    registry=REGISTRY,
)
CANDIDATE_ANSWERS = Counter(
    f"{P}candidate_answers",
    "Answers the best-of-N calls returned, every one paid for (their tokens are in "
    "reprompt_llm_tokens_total).",
    registry=REGISTRY,
)
REPEATED_ANSWERS = Counter(
    f"{P}repeated_answers",
    "Rejected answers the same as an earlier rejected answer of the same job.",
    registry=REGISTRY,
)
TOOL_CALLS = Counter(
    f"{P}tool_calls",
    "Tool calls of work turns by who runs them (client, http, local) and how they ended.",
    ["mode", "outcome"],
    registry=REGISTRY,
)
JOBS_PAUSED = Counter(
    f"{P}jobs_requires_action",
    "Times a job paused in requires_action for its client's tool outputs.",
    registry=REGISTRY,
)
TOOL_WAIT = Histogram(
    f"{P}requires_action_wait_seconds",
    "Time a job waited in requires_action, from the pause to the outputs (or the timeout).",
    buckets=(0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 300, 900, 3600),
    registry=REGISTRY,
)
STALE_COMMITS = Counter(
    f"{P}stale_commits_rejected",
    "Writes refused because the worker no longer held the job's lease.",
    registry=REGISTRY,
)

CALLBACK_DELIVERIES = Counter(
    f"{P}callback_deliveries",
    "Completion callback attempts by outcome: delivered (2xx), retrying, failed (final: a "
    "4xx other than 408/429, a redirect, or the retry window ended), superseded, deferred "
    "(the receiver host is backed off: not sent, no attempt counted).",
    ["outcome"],
    registry=REGISTRY,
)
CALLBACK_ATTEMPT_DURATION = Histogram(
    f"{P}callback_attempt_duration_seconds",
    "Duration of one completion callback request, by outcome.",
    ["outcome"],
    buckets=(0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60),
    registry=REGISTRY,
)

# Streamed partials (#31): how soon a streaming job shows something, and how much it sends.
STREAM_FIRST_PARTIAL = Histogram(
    f"{P}stream_first_partial_seconds",
    "Time from a model call's start to its first partial written to the job's events.",
    ["model"],
    buckets=(0.05, 0.1, 0.25, 0.5, 1, 2, 4, 8, 16, 32, 64),
    registry=REGISTRY,
)
STREAM_FIRST_FIELD = Histogram(
    f"{P}stream_first_field_seconds",
    "Time from a model call's start to the first complete value that passed its checks.",
    ["model"],
    buckets=(0.05, 0.1, 0.25, 0.5, 1, 2, 4, 8, 16, 32, 64),
    registry=REGISTRY,
)
STREAM_PARTIALS = Counter(
    f"{P}stream_partials",
    "Partial events of streaming jobs: sent (partial) and discarded (partial_discarded).",
    ["event"],
    registry=REGISTRY,
)

QUEUE_DEPTH = Gauge(f"{P}queue_depth", "Jobs waiting to be claimed.", registry=REGISTRY)
QUEUE_OLDEST_AGE = Gauge(
    f"{P}queue_oldest_age_seconds", "Age of the oldest queued job.", registry=REGISTRY
)
CALLBACK_OUTBOX_DEPTH = Gauge(
    f"{P}callback_outbox_depth",
    "Completion callback deliveries not settled yet (due, waiting to retry, or being sent).",
    registry=REGISTRY,
)
CIRCUIT_STATE = Gauge(
    f"{P}circuit_state",
    "Circuit breaker per provider/model: 0 closed, 1 half-open, 2 open.",
    ["target"],
    registry=REGISTRY,
)
_CIRCUIT = {"closed": 0, "half_open": 1, "half-open": 1, "open": 2}


@dataclass(frozen=True, slots=True)
class _ModelSeries:
    """The series one provider and model's calls count in, bound once.

    ``labels`` would look its label values up on every call.
    """

    calls: Counter
    tokens_in: Counter
    tokens_out: Counter
    latency: Histogram

    @classmethod
    def of(cls, provider: str, model: str) -> _ModelSeries:
        return cls(
            LLM_CALLS.labels(provider, model),
            LLM_TOKENS.labels(provider, model, "input"),
            LLM_TOKENS.labels(provider, model, "output"),
            LLM_LATENCY.labels(provider, model),
        )


M = TypeVar("M", Counter, Gauge, Histogram)


class _Bound(Generic[M]):
    """A labelled metric's series by label values, each looked up once."""

    __slots__ = ("_bound", "_metric")

    def __init__(self, metric: M) -> None:
        self._metric: M = metric
        self._bound: dict[tuple[str, ...], M] = {}

    def __call__(self, *values: str) -> M:
        bound = self._bound.get(values)
        if bound is None:
            bound = self._bound[values] = self._metric.labels(*values)
        return bound


_TURNS = _Bound(TURNS)
_FINISHED = _Bound(JOBS_FINISHED)
_DURATION = _Bound(JOB_DURATION)
_COST = _Bound(LLM_COST)
_BY_MODEL: dict[tuple[str, str], _ModelSeries] = {}


# -- Batches (#30): rounds, items by outcome, cost at the batch price; labels bounded --
BATCH_ROUNDS = Counter(
    f"{P}batch_rounds",
    "Batch rounds started, by how they travel (provider_batch, live, worker_pool).",
    ["via"],
    registry=REGISTRY,
)
BATCH_ITEMS = Counter(
    f"{P}batch_items",
    "Batch items that ended, by outcome (succeeded, failed).",
    ["outcome"],
    registry=REGISTRY,
)
BATCH_COST = Counter(
    f"{P}batch_cost_usd",
    "USD spent by batch items' calls (at the batch price for provider batches).",
    ["via"],
    registry=REGISTRY,
)


def record_batch_round(via: str) -> None:
    BATCH_ROUNDS.labels(via).inc()


def record_batch_items(outcome: str, count: int) -> None:
    if count:
        BATCH_ITEMS.labels(outcome).inc(count)


def record_batch_cost(via: str, usd: float) -> None:
    if usd > 0:
        BATCH_COST.labels(via).inc(usd)


def job_started(waited_s: float) -> None:
    """A worker starts a claimed job that waited ``waited_s`` in the queue.

    It counts as in progress until ``job_left``.
    """
    QUEUE_WAIT.observe(waited_s)
    JOBS_IN_PROGRESS.inc()


_IDLE_WAITS = _Bound(IDLE_WAITS)


def idle_wait(ended: str) -> None:
    """A worker's wait for work ended (``ended``: handoff, woken, timeout)."""
    _IDLE_WAITS(ended).inc()


def job_left() -> None:
    """A job ``job_started`` counted is no longer in progress here."""
    JOBS_IN_PROGRESS.dec()


# OpenAI-compatible front door (#34): POST /v1/chat/completions.
CHAT_COMPLETIONS = Counter(
    f"{P}chat_completions",
    "Requests to POST /v1/chat/completions, by outcome (ok, error).",
    ["outcome"],
    registry=REGISTRY,
)


def record_turn(record: TurnRecord, *, calls_left: int) -> None:
    """Count one model call from its turn record (``calls_left``: what the budget has left)."""
    _TURNS(record.type, record.outcome).inc()
    provider, model = record.provider, record.model
    if provider is None or model is None:
        return  # the call failed before any provider answered
    series = _BY_MODEL.get((provider, model))
    if series is None:
        series = _BY_MODEL[provider, model] = _ModelSeries.of(provider, model)
    labels = {"provider": provider, "model": model}
    series.calls.inc()
    usage = record.usage
    tokens_in, tokens_out = usage.input_tokens, usage.output_tokens
    series.tokens_in.inc(tokens_in)
    series.tokens_out.inc(tokens_out)
    # Only where a cache applied: most models never report one.
    if usage.cached_input_tokens:
        LLM_TOKENS.labels(**labels, direction="cached_input").inc(usage.cached_input_tokens)
    if usage.cache_write_tokens:
        LLM_TOKENS.labels(**labels, direction="cache_write").inc(usage.cache_write_tokens)
    cost = record.cost_usd
    if cost is not None:  # a model with no known price has no cost series at all
        _COST(provider, model).inc(cost)
    series.latency.observe(record.latency_ms / 1000)
    if record.wasted:
        WASTED_TOKENS.labels(**labels).inc(tokens_in + tokens_out)
        if cost is not None:
            WASTED_COST.labels(**labels).inc(cost)
    if record.outcome in REJECTED and calls_left > 0:
        REASKS.labels(error=record.error_code or "").inc()
    if record.repeat_of is not None:
        REPEATED_ANSWERS.inc()
    if record.patch is not None:
        PATCH_REASKS.labels(outcome=record.outcome).inc()
    if record.candidates is not None:
        CANDIDATE_CALLS.labels(outcome=record.outcome).inc()
        CANDIDATE_ANSWERS.inc(record.candidates)


def record_tool_calls(calls: Iterable[ToolCallRecord]) -> None:
    """Count tool calls once their outcome is known (a client's call when it is answered)."""
    for call in calls:
        TOOL_CALLS.labels(mode=call.mode, outcome=call.outcome).inc()


def record_job(envelope: Envelope, *, duration_s: float) -> None:
    """Count a finished job from its envelope."""
    status = envelope.job_status
    _FINISHED(status, envelope.error or "").inc()
    _DURATION(status).observe(duration_s)
    execution = envelope.execution
    if envelope.status == "success" and execution is not None and execution.llm_calls:
        ATTEMPTS_TO_SUCCESS.observe(execution.llm_calls)


def record_callback(outcome: str, duration_s: float) -> None:
    """Count one completion callback attempt by ``outcome``.

    ``outcome``: delivered, retrying, failed, superseded or deferred (its receiver host is
    backed off, #29).
    """
    CALLBACK_DELIVERIES.labels(outcome=outcome).inc()
    if outcome not in ("superseded", "deferred"):  # nothing was sent
        CALLBACK_ATTEMPT_DURATION.labels(outcome=outcome).observe(duration_s)


def record_transport_retry(code: str, attempt: int, wait_s: float) -> None:
    """The provider router's ``on_retry`` hook."""
    TRANSPORT_RETRIES.labels(error=code).inc()


def record_state(
    *,
    queue: tuple[int, float] | None,
    circuits: Mapping[str, Mapping[str, Any]] | None,
    outbox: int | None = None,
) -> None:
    """Scrape-time gauges: queue depth and oldest age, the callback outbox's depth, circuits.

    ``None`` leaves a gauge as it is: a worker passes only its circuits.
    """
    if queue is not None:
        QUEUE_DEPTH.set(queue[0])
        QUEUE_OLDEST_AGE.set(queue[1])
    if outbox is not None:
        CALLBACK_OUTBOX_DEPTH.set(outbox)
    if circuits is not None:
        for target, state in circuits.items():
            CIRCUIT_STATE.labels(target=target).set(_CIRCUIT.get(str(state.get("state")), 0))


def serve(host: str, port: int, *, span: int = 1) -> tuple[int, Callable[[], None]]:
    """Expose ``/metrics`` on ``host`` in a thread (a worker's port); ``(port, stop)``.

    The first free port of ``port`` .. ``port + span - 1`` is taken, so several workers on
    one host each get one; when all are taken, any free port (the caller logs which).
    Errors other than a taken port (a bad address) are raised.
    """
    last = min(port + max(span, 1), 65536)
    for candidate in [*range(port, last), 0]:
        try:
            server, thread = start_http_server(candidate, addr=host, registry=REGISTRY)
        except OSError as exc:
            if exc.errno == errno.EADDRINUSE and candidate != 0:
                continue
            raise
        break

    def stop() -> None:
        server.shutdown()
        server.server_close()
        thread.join(timeout=5)

    return int(server.server_address[1]), stop


def exposition() -> tuple[bytes, str]:
    """The text format body and its content type, for ``GET /metrics``."""
    return generate_latest(REGISTRY), CONTENT_TYPE_LATEST
