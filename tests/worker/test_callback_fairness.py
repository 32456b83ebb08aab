"""One tenant's hanging callback receiver must not delay another tenant's callbacks (#29).

Seen: 72 callbacks of tenant A to a receiver that never answers held all 16 sender slots
for the 10 s timeout each, and tenant B's one callback was sent 35 s after its job ended.
Now the lease takes tenants in turn, each at most its share of the slots, and a host that
keeps timing out is backed off (one attempt at a time, the rest deferred, none lost).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest

from app.assembly import open_outbound
from app.outbound.kit import Outbound
from app.worker.callbacks import CallbackSender
from app.worker.receivers import STRIKES
from tests.both import Store
from tests.outbound.receiver import Receiver, Reply
from tests.waiting import until
from tests.worker.harness import TENANT, eventually, worker_settings
from tests.worker.test_callbacks import ended, states


@pytest.fixture
def hanging() -> Iterator[Receiver]:
    with Receiver() as running:
        running.script(Reply(200, delay_s=60))  # never answers within the timeout
        yield running


@pytest.fixture
def healthy() -> Iterator[Receiver]:
    with Receiver(host="127.0.0.2") as running:
        yield running


@pytest.fixture
async def outbound(tmp_path: Path) -> AsyncIterator[Outbound]:
    settings = worker_settings(
        outbound_allow=["127.0.0.0/8"], data_dir=tmp_path, outbound_timeout_ms=3_000
    )
    async with open_outbound(settings) as built:
        yield built


async def details(store: Store, ids: list[str], tenant: str = TENANT) -> list[tuple[str, int]]:
    out: list[tuple[str, int]] = []
    for job_id in ids:
        view = await store.get(job_id, tenant=tenant)
        assert view is not None
        assert view.callback is not None
        out += [(d.state, d.attempts) for d in view.callback.deliveries]
    return out


async def test_a_tenant_whose_receiver_hangs_cannot_hold_every_slot(
    store: Store, outbound: Outbound, hanging: Receiver, healthy: Receiver
) -> None:
    flooding = await ended(store, hanging.url, count=12, tenant="flood")
    sender = CallbackSender(store, outbound, worker_settings(callback_concurrency=4))
    stop = asyncio.Event()
    task = asyncio.create_task(sender.run(stop))
    try:
        # The flooding tenant's callbacks are out and hanging...
        await until(lambda: len(hanging.seen) >= 2 or None, what="flood callbacks sent")
        quiet = await ended(store, healthy.url, count=1)
        # ...and the quiet tenant's callback goes out while every one of them still hangs.
        await eventually(lambda: _delivered(store, quiet), what="the quiet tenant's callback")
        assert all(attempts == 0 for _, attempts in await details(store, flooding, "flood"))
        assert len(hanging.seen) == 2  # its share of 4 slots with two tenants about
    finally:
        stop.set()
        await task


async def _delivered(store: Store, ids: list[str]) -> bool:
    return await states(store, ids) == ["delivered"]


async def test_a_host_that_keeps_timing_out_is_backed_off_and_nothing_is_lost(
    store: Store, outbound: Outbound, hanging: Receiver, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="app.delivery")
    ids = await ended(store, hanging.url, count=10)
    settings = worker_settings(
        callback_concurrency=8, callback_backoff_ms=200, callback_max_backoff_s=1
    )
    sender = CallbackSender(store, outbound, settings)
    stop = asyncio.Event()
    task = asyncio.create_task(sender.run(stop))
    try:
        await until(lambda: "keeps timing out" in caplog.text or None, what="a deferred callback")
        host = f"{TENANT} 127.0.0.1:{hanging.port}"
        assert sender.hosts.backed_off(host)
        seen = await details(store, ids)
        assert [state for state, _ in seen] == ["pending"] * 10  # none lost, none failed
        assert sum(attempts for _, attempts in seen) >= STRIKES
        # The receiver comes back: every callback is delivered, at least once each.
        hanging.script(Reply(200))
        await eventually(
            lambda: _all_delivered(store, ids), what="every callback delivered after recovery"
        )
        assert not sender.hosts.backed_off(host)
    finally:
        stop.set()
        await task


async def _all_delivered(store: Store, ids: list[str]) -> bool:
    return await states(store, ids) == ["delivered"] * len(ids)
