"""What the pages show of a job: a table row, and its turns grouped by worker attempt.

Plain values for the templates (which escape every one of them): nothing here is HTML.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, Final

from app.core.wire.record import TurnRecord
from app.store import JobView

# Turn outcomes that are a rejected answer: the model is asked again with a diagnosis.
REJECTED: Final = frozenset({"invalid", "rejected", "truncated", "refusal", "explicit_fail"})
# A spec or a message longer than this is shown cut, with how much was left out.
MAX_SHOWN_CHARS: Final = 200_000


@dataclass(frozen=True, slots=True)
class Row:
    id: str
    tenant: str
    status: str
    created_at: str
    model: str
    turns: int
    retries: int
    tokens: int | None
    cost: float | None
    wasted: float | None
    duration_ms: int | None
    error: str | None


def row(job: JobView) -> Row:
    execution = job.result.execution
    return Row(
        id=job.id,
        tenant=job.tenant,
        status=job.status,
        created_at=job.created_at,
        model=(execution.model if execution and execution.model else job.model) or "",
        turns=len(job.turns),
        retries=execution.retry_count if execution else _rejected(job),
        tokens=execution.tokens_used if execution else None,
        cost=execution.cost if execution else None,
        wasted=execution.wasted_cost if execution else None,
        duration_ms=execution.duration_ms if execution else _elapsed_ms(job),
        error=job.result.error,
    )


def _rejected(job: JobView) -> int:
    return sum(1 for turn in job.turns if turn.outcome in REJECTED)


def _elapsed_ms(job: JobView) -> int | None:
    if job.started_at is None:
        return None
    end = job.finished_at
    stop = _moment(end) if end else datetime.now(tz=UTC)
    return int((stop - _moment(job.started_at)).total_seconds() * 1000)


def _moment(iso: str) -> datetime:
    return datetime.strptime(iso.rstrip("Z"), "%Y-%m-%dT%H:%M:%S.%f").replace(tzinfo=UTC)


@dataclass(frozen=True, slots=True)
class Attempt:
    """The turns one worker ran (``number``: the job's claim; more than one after a worker
    was lost)."""

    number: int
    turns: tuple[TurnRecord, ...]


def attempts(turns: tuple[TurnRecord, ...]) -> list[Attempt]:
    grouped: dict[int, list[TurnRecord]] = {}
    for turn in turns:
        grouped.setdefault(turn.job_attempt or 1, []).append(turn)
    return [Attempt(number, tuple(group)) for number, group in sorted(grouped.items())]


def cut(text: str | None, limit: int = MAX_SHOWN_CHARS) -> str:
    """``text`` up to ``limit`` characters, with a note of what was left out."""
    if text is None:
        return ""
    if len(text) <= limit:
        return text
    return f"{text[:limit]}\n… ({len(text) - limit:,} more characters not shown)"


def pretty(value: Any) -> str:
    """JSON of ``value``, indented, for a <pre> (escaped by the template)."""
    return json.dumps(value, indent=2, ensure_ascii=False, default=str)


def pretty_text(json_text: str) -> str:
    """A JSON text indented (as is, if it is not JSON)."""
    try:
        return pretty(json.loads(json_text))
    except ValueError:
        return json_text


def money(value: float | None) -> str:
    if value is None:
        return "—"
    return f"${value:.6f}" if value < 0.01 else f"${value:.4f}"


def duration(ms: int | None) -> str:
    if ms is None:
        return "—"
    return f"{ms} ms" if ms < 10_000 else f"{ms / 1000:.1f} s"
