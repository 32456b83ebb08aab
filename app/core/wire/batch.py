"""A batch on the wire: what a client submits (``BatchSpec``, items apart) and what
``GET /v1/batches/{id}`` shows (``Batch``).

A batch is many jobs sharing one template: each item gives its ``input`` (and may
override a few fields); its job is the template with them, run by the same loop.
"""

from __future__ import annotations

import json
from datetime import UTC, datetime
from typing import Any, Final, Literal

from pydantic import Field, StrictBool, StrictFloat, StrictInt, StrictStr, field_validator

from app.core.wire.base import Wire
from app.core.wire.callback import DeliveryState
from app.core.wire.spec import Budget, FallbackSpec, JobSpec, _Wire, listed_once

CUSTOM_ID_PATTERN: Final = r"^[A-Za-z0-9_.:-]{1,64}$"
MAX_BATCH_DEADLINE_MS: Final = 7 * 24 * 3600 * 1000
DEFAULT_BATCH_DEADLINE_MS: Final = 24 * 3600 * 1000
# The validators a batch item cannot have: they call out (a webhook) or call a model (a
# judge) each time the item's turns are replayed (app.core.batch.replay).
CALLING_VALIDATORS: Final = frozenset(("webhook", "judge"))

ReaskPolicy = Literal["auto", "batch", "live"]
BatchStatus = Literal["running", "completed", "cancelled", "failed"]
ItemStatus = Literal["pending", "succeeded", "failed"]
BatchEvent = Literal["completed", "cancelled", "failed"]
BATCH_EVENTS: Final[tuple[BatchEvent, ...]] = ("completed", "cancelled", "failed")


class ItemOverride(_Wire):
    """What one item may change of the template (the rest is shared by every item)."""

    task: StrictStr | None = Field(default=None, min_length=1)
    budget: Budget | None = None
    fallback: FallbackSpec | None = None
    metadata: dict[StrictStr, StrictStr] | None = Field(default=None, max_length=64)
    temperature: StrictFloat | StrictInt | None = Field(default=None, ge=0, le=2)
    seed: StrictInt | None = None
    max_output_tokens: StrictInt | None = Field(default=None, ge=16, le=200_000)


class BatchItem(_Wire):
    """One item: its id (unique in the batch), its input, and what it overrides."""

    custom_id: StrictStr = Field(
        pattern=CUSTOM_ID_PATTERN,
        description="Unique in the batch: 1 to 64 of A-Z a-z 0-9 _ . : -",
    )
    input: Any = Field(default=None, description="This item's data for the task.")
    override: ItemOverride | None = None


class BatchCallbackSpec(_Wire):
    """Where the service POSTs the batch's summary, signed, when it ends in one of
    ``events`` (docs/batches.md#callback): at least once, like a job's callback."""

    url: StrictStr = Field(max_length=2048, description="HTTPS endpoint the service calls.")
    events: list[BatchEvent] = Field(
        default_factory=lambda: list(BATCH_EVENTS),
        min_length=1,
        max_length=len(BATCH_EVENTS),
        description="The end states that are sent (default: all of them).",
    )

    _once_each = field_validator("events")(listed_once)


class BatchOptions(_Wire):
    """Everything a batch has but its items: the template and how rounds go."""

    template: JobSpec = Field(description="The job every item runs (its input apart).")
    reask: ReaskPolicy = Field(
        default="auto",
        description="How re-asks travel: 'batch' (another provider batch, half price), "
        "'live' (calls on the worker pool, at once), 'auto' (batches while more than "
        "liveBelow items are left, then live).",
    )
    live_below: StrictInt = Field(default=20, ge=0, le=10_000)
    max_cost_usd: StrictFloat | StrictInt | None = Field(
        default=None, gt=0, description="The whole batch's cost cap (USD)."
    )
    deadline_ms: StrictInt = Field(
        default=DEFAULT_BATCH_DEADLINE_MS,
        ge=1_000,
        le=MAX_BATCH_DEADLINE_MS,
        description="Items without an answer by then fail with deadline_exceeded.",
    )
    metadata: dict[StrictStr, StrictStr] = Field(default_factory=dict, max_length=64)
    callback: BatchCallbackSpec | None = Field(
        default=None, description="Called once the batch ends (docs/batches.md#callback)."
    )

    @field_validator("template")
    @classmethod
    def _batchable(cls, template: JobSpec) -> JobSpec:
        if template.tools:
            raise ValueError("tools: a batch item cannot use tools")
        if template.callback is not None:
            raise ValueError("callback: items have no callback of their own (the batch has)")
        if template.candidates is not None and template.candidates.n > 1:
            raise ValueError("candidates: a batch item gives one answer per call")
        if template.budget.deadline_ms is not None:
            raise ValueError("budget.deadlineMs: a batch has one deadline (deadlineMs)")
        kinds = sorted({v.kind for v in template.validators} & CALLING_VALIDATORS)
        if kinds:
            raise ValueError(f"validators: {', '.join(kinds)} cannot run in a batch")
        return template


class BatchSpec(BatchOptions):
    """``POST /v1/batches`` as JSON: the options and the items inline."""

    items: list[BatchItem] = Field(min_length=1)


def item_spec(template: dict[str, Any], item: BatchItem) -> JobSpec:
    """The job of ``item``: the template (as its JSON by alias) with the item's fields."""
    body = dict(template)
    body["input"] = item.input
    if item.override is not None:
        body.update(item.override.model_dump(by_alias=True, exclude_none=True))
    return JobSpec.model_validate(body)


class ItemCounts(Wire):
    pending: int
    succeeded: int
    failed: int


class BatchDelivery(Wire):
    """How the batch's callback went (one delivery: the batch ends once)."""

    event: BatchEvent
    state: DeliveryState
    webhook_id: str = Field(description="The same for every attempt: de-duplicate on it.")
    attempts: int
    created_at: str
    last_attempt_at: str | None = None
    last_status: int | None = None
    last_error: str | None = None
    next_attempt_at: str | None = None
    delivered_at: str | None = None


class BatchCallback(Wire):
    url: str
    events: tuple[BatchEvent, ...]
    deliveries: tuple[BatchDelivery, ...] = ()


class Batch(Wire):
    """A batch as ``GET /v1/batches/{id}`` shows it."""

    id: str
    status: BatchStatus
    provider: str | None = Field(description="The provider whose batch API runs the rounds.")
    mode: Literal["provider_batch", "worker_pool"]
    total: int
    counts: ItemCounts
    round: int = Field(description="Rounds started so far (1: every item's first call).")
    phase: str
    provider_batch_id: str | None
    input_tokens: int
    output_tokens: int
    cost_usd: float = Field(description="At the batch price, every call so far.")
    wasted_cost_usd: float = Field(description="Spent on answers that were rejected.")
    estimate_left_usd: float | None = Field(
        description="About what the pending items may still cost (their average so far)."
    )
    created_at: str
    ended_at: str | None
    deadline_at: str
    cancel_requested: StrictBool
    error: str | None = None
    metadata: dict[str, str]
    results_url: str = Field(description="Where its results stream from (JSONL).")
    callback: BatchCallback | None = None


class BatchResult(Wire):
    """One line of ``GET /v1/batches/{id}/results`` (and an entry of ``/items``)."""

    custom_id: str
    status: ItemStatus
    result: Any = Field(description="The item's envelope, as a job's; null while pending.")
    turns: list[Any] | None = Field(
        default=None, description="Its turn records (re-asks included); on /items only."
    )


def batch_of(meta: dict[str, str], deliveries: tuple[BatchDelivery, ...] = ()) -> Batch:
    """The public view of a batch's stored fields (and its callback's deliveries)."""
    total = int(meta["total"])
    succeeded, failed = int(meta.get("n_succeeded", 0)), int(meta.get("n_failed", 0))
    pending = max(total - succeeded - failed, 0)
    cost = float(meta.get("costUsd", 0))
    done = succeeded + failed
    options = json.loads(meta["options"])
    ended = meta.get("endedAt")
    status: BatchStatus = "running"
    if meta.get("status") in ("completed", "cancelled", "failed"):
        status = meta["status"]  # type: ignore[assignment]
    mode: Literal["provider_batch", "worker_pool"] = (
        "worker_pool" if meta.get("mode") == "worker_pool" else "provider_batch"
    )
    callback = options.get("callback")
    return Batch(
        id=meta["id"],
        status=status,
        provider=meta.get("provider"),
        mode=mode,
        total=total,
        counts=ItemCounts(pending=pending, succeeded=succeeded, failed=failed),
        round=int(meta.get("round", 0)),
        phase=meta.get("phase", "submit"),
        provider_batch_id=meta.get("providerBatchId"),
        input_tokens=int(meta.get("inputTokens", 0)),
        output_tokens=int(meta.get("outputTokens", 0)),
        cost_usd=round(cost, 9),
        wasted_cost_usd=round(float(meta.get("wastedCostUsd", 0)), 9),
        estimate_left_usd=None if done == 0 or pending == 0 else round(cost / done * pending, 9),
        created_at=iso(meta["createdAt"]),
        ended_at=None if ended is None else iso(ended),
        deadline_at=iso(meta["deadlineAt"]),
        cancel_requested=meta.get("cancelRequested") == "1",
        metadata=options.get("metadata") or {},
        results_url=f"/v1/batches/{meta['id']}/results",
        callback=None
        if not callback
        else BatchCallback(
            url=callback["url"], events=tuple(callback["events"]), deliveries=deliveries
        ),
    )


def iso(ms: str | int) -> str:
    """An epoch-ms moment as ``2026-11-22T05:39:58.790Z``."""
    moment = datetime.fromtimestamp(int(ms) / 1000, UTC)
    return moment.isoformat(timespec="milliseconds").replace("+00:00", "Z")
