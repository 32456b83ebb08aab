from __future__ import annotations

import pytest
from redis.asyncio import Redis

from app.core.wire.errors import InvalidInput
from tests.both import Store
from tests.store.helpers import claim, submit


async def test_list_pages_newest_first_with_a_cursor(store: Store) -> None:
    ids = [(await submit(store)).id for _ in range(5)]

    first, cursor = await store.list(tenant="acme", limit=2)
    second, cursor2 = await store.list(tenant="acme", limit=2, cursor=cursor)
    third, cursor3 = await store.list(tenant="acme", limit=2, cursor=cursor2)

    assert [job.id for job in first + second + third] == ids[::-1]
    assert cursor is not None
    assert cursor2 is not None
    assert cursor3 is None


async def test_a_page_that_ends_exactly_at_the_last_job_has_no_cursor(store: Store) -> None:
    for _ in range(3):
        await submit(store)

    page, cursor = await store.list(tenant="acme", limit=3)

    assert len(page) == 3
    assert cursor is None


async def test_list_filters_by_status(store: Store) -> None:
    queued = [(await submit(store)).id for _ in range(3)]
    running = await claim(store)
    cancelled = await submit(store)
    await store.cancel(cancelled.id, tenant="acme")

    in_progress, _ = await store.list(tenant="acme", status="in_progress")
    still_queued, _ = await store.list(tenant="acme", status="queued")
    page, cursor = await store.list(tenant="acme", status="queued", limit=1)
    rest, _ = await store.list(tenant="acme", status="queued", limit=5, cursor=cursor)
    done, _ = await store.list(tenant="acme", status="cancelled")

    assert [job.id for job in in_progress] == [running.job_id]
    assert [job.id for job in still_queued] == queued[:0:-1]
    assert [job.id for job in page + rest] == queued[:0:-1]
    assert [job.id for job in done] == [cancelled.id]


async def test_list_shows_only_the_tenants_own_jobs(store: Store) -> None:
    mine = await submit(store, tenant="acme")
    await submit(store, tenant="globex")

    page, _ = await store.list(tenant="acme")

    assert [job.id for job in page] == [mine.id]


async def test_list_skips_and_forgets_expired_jobs(redis: Redis, store: Store) -> None:
    ids = [(await submit(store)).id for _ in range(4)]
    for gone in ids[1:3]:  # as retention would
        await redis.delete(store.shard_of(gone).job(gone))

    page, cursor = await store.list(tenant="acme", limit=2)

    assert [job.id for job in page] == [ids[3], ids[0]]
    assert cursor is None
    index = store.keys.shard(0).tenant_index("acme")
    kept = await redis.zrangebylex(index, "(job_00~", "+")  # the ids, not the window's mark
    assert sorted(kept) == sorted([ids[0].encode(), ids[3].encode()])


@pytest.mark.parametrize(
    ("options", "field"),
    [
        ({"cursor": "not-a-cursor"}, "cursor"),
        ({"status": "done"}, "status"),
        ({"limit": 0}, "limit"),
    ],
)
async def test_bad_list_parameters_are_a_422_naming_the_field(
    store: Store, options: dict[str, object], field: str
) -> None:
    with pytest.raises(InvalidInput) as caught:
        await store.list(tenant="acme", **options)  # type: ignore[arg-type]

    assert caught.value.field == field
