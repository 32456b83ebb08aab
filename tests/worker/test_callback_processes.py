"""Completion callbacks survive their worker: real ``reprompt worker`` processes, a real
redis-server, a real receiver on loopback (allowlisted), SIGKILL.

The outbox entry is written by the commit's own script, so a worker killed after the
commit and before the send loses nothing: another worker sends it. A worker killed while
sending holds a lease that runs out, and another worker sends it again (at least once, the
same ``webhook-id``).
"""

from __future__ import annotations

import asyncio
import signal
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from app.core.wire.callback import Delivery
from tests.both import Store
from tests.outbound.receiver import Receiver, Reply
from tests.worker.harness import TENANT, WorkerProcess, eventually, finished, job, submit

pytestmark = pytest.mark.slow

Spawn = Callable[..., WorkerProcess]
# Loopback allowed (the receiver); retries without real waits; a short outbound timeout,
# so a sender's lease (the timeout plus 5 s) runs out soon after it is lost.
SENDER: dict[str, Any] = {
    "outbound_allow": "127.0.0.1",
    "callback_backoff_ms": 20,
    "outbound_timeout_ms": 2000,
}


@pytest.fixture
def receiver() -> Iterator[Receiver]:
    with Receiver() as running:
        yield running


async def delivered(store: Store, job_id: str) -> Delivery:
    async def check() -> Delivery | None:
        view = await store.get(job_id, tenant=TENANT)
        assert view is not None
        assert view.callback is not None
        found = [d for d in view.callback.deliveries if d.state == "delivered"]
        return found[0] if found else None

    return await eventually(check, what=f"the callback of {job_id} to be delivered")


async def test_a_worker_killed_between_the_commit_and_the_send_loses_no_callback(
    store: Store, spawn: Spawn, receiver: Receiver
) -> None:
    # The first worker sends no callbacks (callback_concurrency 0): its commit writes the
    # delivery, and the kill lands before any send, deterministically.
    first = await spawn(**SENDER, callback_concurrency=0).ready()
    job_id = await submit(store, job(name="cb-kill") | {"callback": {"url": receiver.url}})
    assert (await finished(store, job_id)).status == "succeeded"
    await first.wait_log(rf"job {job_id} succeeded")
    first.send(signal.SIGKILL)
    assert await first.exit_code() == -signal.SIGKILL
    view = await store.get(job_id, tenant=TENANT)
    assert view is not None
    assert view.callback is not None
    (pending,) = view.callback.deliveries
    assert (pending.state, pending.attempts) == ("pending", 0)
    assert receiver.seen == []

    second = spawn(**SENDER)
    done = await delivered(store, job_id)
    assert done.attempts == 1
    (seen,) = receiver.seen
    assert seen.headers["webhook-id"] == done.webhook_id
    await second.wait_log(rf"job {job_id}: succeeded callback delivered")


async def test_a_worker_killed_while_sending_leaves_the_callback_to_another(
    store: Store, spawn: Spawn, receiver: Receiver
) -> None:
    # The first request is held by the receiver: its sender is killed while it waits.
    receiver.script(Reply(200, delay_s=10), Reply(200))
    first = await spawn(**SENDER).ready()
    job_id = await submit(store, job(name="cb-mid") | {"callback": {"url": receiver.url}})

    async def arrived() -> bool:
        await asyncio.sleep(0)
        return len(receiver.seen) == 1

    await eventually(arrived, what="the first worker's request to arrive")
    first.send(signal.SIGKILL)
    assert await first.exit_code() == -signal.SIGKILL

    spawn(**SENDER)
    done = await delivered(store, job_id)
    assert len(receiver.seen) == 2
    assert {s.headers["webhook-id"] for s in receiver.seen} == {done.webhook_id}
    assert done.attempts == 1  # the lost sender recorded nothing
