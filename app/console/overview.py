"""The overview: how the viewer's recent jobs went, and the service's state now.

    numbers = await overview(res, tenants)

Read from the service itself, so it works without Prometheus: the newest ``SAMPLE`` jobs
of the viewer's tenants (from Redis, as the jobs table reads them), the queue's depth and
oldest age (``JobStore.queue_stats``) and the circuits this process keeps.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Final

from app.api.resources import Resources
from app.console.shown import REJECTED
from app.console.shown import money as format_money
from app.console.table import Filters, page

SAMPLE: Final = 500


@dataclass(frozen=True, slots=True)
class Bar:
    """One bar of a chart: its label, value, shown value and width (0..100)."""

    label: str
    value: float
    shown: str
    width: float


@dataclass
class Overview:
    jobs: int = 0
    by_status: Counter[str] = field(default_factory=Counter)
    success_rate: float | None = None
    turns_to_success: list[Bar] = field(default_factory=list)
    reasks_by_code: list[Bar] = field(default_factory=list)
    cost_by_model: list[Bar] = field(default_factory=list)
    wasted_by_model: list[Bar] = field(default_factory=list)
    queue_depth: int | None = None
    oldest_s: float | None = None
    circuits: list[tuple[str, str, int]] = field(default_factory=list)
    global_queue: bool = False  # the queue's numbers are every tenant's


def bars(counts: dict[str, float], money: bool = False) -> list[Bar]:
    top = max(counts.values(), default=0) or 1
    ordered = sorted(counts.items(), key=lambda item: (-item[1], item[0]))[:12]
    return [
        Bar(
            label,
            value,
            format_money(value) if money else f"{value:g}",
            round(100 * value / top, 1),
        )
        for label, value in ordered
    ]


async def overview(res: Resources, tenants: Sequence[str], operator: bool) -> Overview:
    jobs, _ = await page(res.store, tenants, Filters(), None, limit=SAMPLE)
    out = Overview(jobs=len(jobs))
    turns_to_success: Counter[str] = Counter()
    reasks: Counter[str] = Counter()
    cost: dict[str, float] = {}
    wasted: dict[str, float] = {}
    for job in jobs:
        out.by_status[job.status] += 1
        for turn in job.turns:
            if turn.outcome in REJECTED and turn.error_code:
                reasks[turn.error_code] += 1
        if job.status == "succeeded":
            count = len(job.turns)
            turns_to_success[str(count) if count < 5 else "5+"] += 1
        execution = job.result.execution
        if execution is not None:
            model = execution.model or job.model or "?"
            cost[model] = cost.get(model, 0.0) + (execution.cost or 0.0)
            wasted[model] = wasted.get(model, 0.0) + (execution.wasted_cost or 0.0)
    ended = out.by_status["succeeded"] + out.by_status["failed"]
    out.success_rate = out.by_status["succeeded"] / ended if ended else None
    out.turns_to_success = bars(dict(sorted(turns_to_success.items())))
    out.reasks_by_code = bars(dict(reasks))
    out.cost_by_model = bars(cost, money=True)
    out.wasted_by_model = bars(wasted, money=True)
    if operator:  # the queue is every tenant's: an operator's number, not a tenant's
        out.global_queue = True
        out.queue_depth, out.oldest_s = await res.store.queue_stats()
    if res.router is not None:  # as GET /v1/models shows them to every caller
        for key, state in sorted(res.router.snapshot().items()):
            out.circuits.append((key, str(state["state"]), int(state["failures"])))
    return out
