"""A page of a tenant's jobs, newest first, with a cursor to the next (``JobStore.list``).

    jobs, cursor = await store.list(tenant="acme", status="failed", limit=50)

Each shard keeps a tenant's ids in a sorted set (its index, written by lua/submit.lua);
ids sort by creation time, so a page is a lexicographic range below the cursor.
"""

from __future__ import annotations

import base64
import binascii
from typing import Final

from app.core.wire.errors import InvalidInput
from app.store.connection import Role
from app.store.errors import edge
from app.store.ids import is_job_id
from app.store.records import JobView, text
from app.store.submitting import INDEX_MARK

STATUSES: Final[frozenset[str]] = frozenset(
    {"queued", "in_progress", "requires_action", "succeeded", "failed", "cancelled"}
)
# With a status filter, ids looked at per call before a (possibly short) page is returned.
_LIST_SCAN_CAP: Final = 1000
_MAX_LIST_LIMIT: Final = 1000
_INDEX_IDS: Final = "(" + INDEX_MARK + "~"  # above every window mark ("~" sorts after [0-9a-z])


class Listing(Role):
    """The listing of ``JobStore``."""

    async def _newest(self, tenant: str, below: str | None, count: int) -> list[str]:
        """Up to ``count`` of the tenant's ids older than ``below``, newest first, all shards."""
        top = "+" if below is None else "(" + below
        found: list[str] = []
        for shard in self.keys.all_shards():
            raw = await self._redis.zrevrangebylex(
                shard.tenant_index(tenant), top, _INDEX_IDS, 0, count
            )
            found.extend(text(job_id) for job_id in raw)
        return sorted(found, reverse=True)[:count]

    async def _keep(self, ids: list[str], tenant: str, status: str | None) -> set[str]:
        """The ids still stored (expired ones leave the index) and in ``status``."""
        async with self._redis.pipeline(transaction=False) as pipe:
            for job_id in ids:
                pipe.hmget(self.shard_of(job_id).job(job_id), ["status", "tenant"])
            replies = await pipe.execute()
        gone = [job_id for job_id, (found, _) in zip(ids, replies, strict=True) if found is None]
        for job_id in gone:
            await self._redis.zrem(self.shard_of(job_id).tenant_index(tenant), job_id)
        return {
            job_id
            for job_id, (found, owner) in zip(ids, replies, strict=True)
            if found is not None
            and text(owner) == tenant
            and (status is None or text(found) == status)
        }

    async def _views(self, ids: list[str], tenant: str) -> list[JobView]:
        return [v for v in await self._read(ids) if v is not None and v.tenant == tenant]

    # The last method: inside the class body below it, ``list`` would name this method.
    @edge
    async def list(
        self,
        *,
        tenant: str,
        status: str | None = None,
        cursor: str | None = None,
        limit: int = 50,
    ) -> tuple[list[JobView], str | None]:
        """A page of the tenant's jobs, newest first, and the next page's cursor (None: no more).

        With a status filter a page may hold fewer than ``limit`` jobs and still have a
        cursor: the filter reads each job's status only. Expired ids leave the index here.
        """
        if status is not None and status not in STATUSES:
            raise InvalidInput(f"status must be one of {sorted(STATUSES)}", field="status")
        if not 1 <= limit <= _MAX_LIST_LIMIT:
            raise InvalidInput(f"limit must be 1..{_MAX_LIST_LIMIT}", field="limit")
        below = None if cursor is None else _decode_cursor(cursor)
        batch = limit + 1 if status is None else max(2 * limit, 50)
        page: list[str] = []
        scanned = 0
        while True:
            ids = await self._newest(tenant, below, batch)
            if not ids:
                return await self._views(page, tenant), None
            kept = await self._keep(ids, tenant, status)
            for position, job_id in enumerate(ids):
                if job_id not in kept:
                    continue
                page.append(job_id)
                if len(page) == limit:
                    more = position < len(ids) - 1 or bool(await self._newest(tenant, job_id, 1))
                    return await self._views(page, tenant), (
                        _encode_cursor(job_id) if more else None
                    )
            scanned += len(ids)
            if len(ids) < batch:
                return await self._views(page, tenant), None
            if scanned >= _LIST_SCAN_CAP:
                return await self._views(page, tenant), _encode_cursor(ids[-1])
            below = ids[-1]


def cursor_after(job_id: str) -> str:
    """The cursor of the page after ``job_id`` (a page across tenants: the console's)."""
    return _encode_cursor(job_id)


def _encode_cursor(job_id: str) -> str:
    return base64.urlsafe_b64encode(job_id.encode()).decode().rstrip("=")


def _decode_cursor(cursor: str) -> str:
    try:
        job_id = base64.urlsafe_b64decode(cursor + "=" * (-len(cursor) % 4)).decode()
    except (binascii.Error, UnicodeDecodeError, ValueError):
        job_id = ""
    if not is_job_id(job_id):
        raise InvalidInput("not a cursor returned by this API", field="cursor")
    return job_id
