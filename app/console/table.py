"""The jobs table: a filtered page of jobs across the viewer's tenants, newest first.

    filters = Filters.parse(request.query_params)
    rows, cursor = await page(store, ("acme",), filters, cursor=None)

The store lists one tenant's jobs by id (ids sort by creation time), status aside; the
other filters (model, error code, created time, metadata, tenant) are applied here to
what it reads, over at most ``SCAN_CAP`` jobs a page, so a rare match costs a bounded
read and the page says where to go on.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Final

from app.store import STATUSES, JobStore, JobView
from app.store.listing import cursor_after

PAGE: Final = 25
SCAN_CAP: Final = 1000
_BATCH: Final = 100
MAX_FILTER_CHARS: Final = 200


@dataclass(frozen=True, slots=True)
class Filters:
    """What the table shows; empty strings mean "any"."""

    status: str = ""
    model: str = ""
    error: str = ""
    since: str = ""  # a datetime-local value (UTC): created at or after
    until: str = ""  # created before
    meta: str = ""  # key=value
    tenant: str = ""

    @classmethod
    def parse(cls, query: Mapping[str, str]) -> Filters:
        """The filters of a query string, each cut to a bounded length; an unknown status
        is dropped (the select offers only known ones)."""

        def get(name: str) -> str:
            return query.get(name, "").strip()[:MAX_FILTER_CHARS]

        status = get("status")
        return cls(
            status=status if status in STATUSES else "",
            model=get("model"),
            error=get("error"),
            since=_moment(get("since")),
            until=_moment(get("until")),
            meta=get("meta"),
            tenant=get("tenant"),
        )

    def query(self) -> dict[str, str]:
        """The filters that are set, as query parameters."""
        return {name: value for name in _FIELDS if (value := getattr(self, name))}

    def matches(self, job: JobView) -> bool:
        if self.status and job.status != self.status:
            return False
        if self.model and self.model not in (job.model, _model_of(job)):
            return False
        if self.error and not _has_error(job, self.error):
            return False
        if self.until and job.created_at[:16] >= self.until:
            return False
        if self.meta:
            key, _, value = self.meta.partition("=")
            if job.metadata.get(key.strip()) != value.strip():
                return False
        return True

    def too_old(self, job: JobView) -> bool:
        """Whether ``job`` and every job after it (older) is before ``since``."""
        return bool(self.since) and job.created_at[:16] < self.since


_FIELDS: Final = ("status", "model", "error", "since", "until", "meta", "tenant")


def _moment(value: str) -> str:
    """``YYYY-MM-DDTHH:MM`` (what a datetime-local input sends), or "" if it is not one."""
    try:
        return datetime.strptime(value[:16], "%Y-%m-%dT%H:%M").strftime("%Y-%m-%dT%H:%M")
    except ValueError:
        return ""


def _model_of(job: JobView) -> str | None:
    execution = job.result.execution
    return execution.model if execution is not None else None


def _has_error(job: JobView, code: str) -> bool:
    return job.result.error == code or any(turn.error_code == code for turn in job.turns)


def visible(tenants: Sequence[str], filters: Filters) -> tuple[str, ...]:
    """The tenants a page reads: the tenant filter, when the viewer may see it."""
    if filters.tenant:
        return (filters.tenant,) if filters.tenant in tenants else ()
    return tuple(tenants)


async def page(
    store: JobStore,
    tenants: Sequence[str],
    filters: Filters,
    cursor: str | None,
    limit: int = PAGE,
) -> tuple[list[JobView], str | None]:
    """Up to ``limit`` jobs of ``tenants`` that match, newest first; the next page's cursor.

    Each tenant's list is read in batches and merged; a job is shown only once every
    tenant's list has been read past it (its ``frontier``), so no job is skipped.
    """
    shown: list[JobView] = []
    below = cursor
    scanned = 0
    # Unfiltered, one page's worth (and one more) is all a tenant's list needs to give.
    reads = limit + 1 if not filters.query() else _BATCH
    while tenants:
        batch: list[JobView] = []
        frontier: str | None = None
        for tenant in tenants:
            jobs, more = await store.list(tenant=tenant, cursor=below, limit=reads)
            batch.extend(jobs)
            if more is not None and jobs and (frontier is None or jobs[-1].id > frontier):
                frontier = jobs[-1].id
        batch.sort(key=lambda job: job.id, reverse=True)
        safe = [job for job in batch if frontier is None or job.id >= frontier]
        for position, job in enumerate(safe):
            if filters.too_old(job):
                return shown, None
            if filters.matches(job):
                shown.append(job)
                if len(shown) == limit:
                    rest = position < len(safe) - 1 or frontier is not None
                    return shown, cursor_after(job.id) if rest else None
        scanned += len(safe)
        if frontier is None:
            return shown, None
        below = cursor_after(frontier)
        if scanned >= SCAN_CAP:
            return shown, below
    return shown, None


def started(iso: str) -> datetime:
    return datetime.strptime(iso[:19], "%Y-%m-%dT%H:%M:%S").replace(tzinfo=UTC)
