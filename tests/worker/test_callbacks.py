"""The callback sender in-process: a real redis-server, a real receiver on loopback, the
sender's own loop (``app/worker/callbacks.py``). Jobs are ended through the store directly: the
sender does not care who ended them.
"""

from __future__ import annotations

import asyncio
import random
import threading
import time
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import pytest

from app.assembly import open_outbound
from app.core.wire.envelope import Envelope
from app.outbound import OutboundFailed, OutboundRefused
from app.outbound.kit import Outbound
from app.store import Leased
from app.worker.callbacks import Backoff, CallbackSender, judge
from tests.both import Store
from tests.outbound.receiver import Receiver, Reply, Seen
from tests.worker.harness import TENANT, eventually, worker_settings

SPEC: dict[str, Any] = {"task": "Say hi", "signature": "{greeting :string}"}


@pytest.fixture
def receiver() -> Iterator[Receiver]:
    with Receiver() as running:
        yield running


@pytest.fixture
async def outbound(tmp_path: Path) -> AsyncIterator[Outbound]:
    settings = worker_settings(outbound_allow=["127.0.0.1"], data_dir=tmp_path)
    async with open_outbound(settings) as built:
        yield built


async def ended(store: Store, url: str, count: int = 1, tenant: str = TENANT) -> list[str]:
    """``count`` jobs with a callback to ``url``, each claimed and committed."""
    ids = []
    for _ in range(count):
        view, _ = await store.submit(tenant=tenant, spec=SPEC | {"callback": {"url": url}})
        (claim,) = await store.claim("w", 1)
        assert claim.job_id == view.id
        ok = await store.complete(
            claim, envelope=Envelope.success({"greeting": "hi"}), history=(), transcript=()
        )
        assert ok
        ids.append(view.id)
    return ids


async def states(store: Store, ids: list[str], tenant: str = TENANT) -> list[str]:
    out: list[str] = []
    for job_id in ids:
        view = await store.get(job_id, tenant=tenant)
        assert view is not None
        assert view.callback is not None
        out += [d.state for d in view.callback.deliveries]
    return out


async def test_the_sender_keeps_to_its_concurrency(
    store: Store, outbound: Outbound, receiver: Receiver
) -> None:
    lock = threading.Lock()
    in_flight, most = 0, 0

    def slow(seen: Seen) -> Reply:
        nonlocal in_flight, most
        with lock:
            in_flight += 1
            most = max(most, in_flight)
        time.sleep(0.2)
        with lock:
            in_flight -= 1
        return Reply(200)

    receiver.script(slow)
    # Two tenants: each may hold its share (one of two slots); both run at once.
    ids = await ended(store, receiver.url, count=3)
    others = await ended(store, receiver.url, count=3, tenant="other")
    sender = CallbackSender(store, outbound, worker_settings(callback_concurrency=2))
    stop = asyncio.Event()
    task = asyncio.create_task(sender.run(stop))
    try:

        async def all_delivered() -> bool:
            mine = await states(store, ids)
            theirs = await states(store, others, "other")
            return mine + theirs == ["delivered"] * 6

        await eventually(all_delivered, what="every callback to be delivered")
    finally:
        stop.set()
        await task
    assert len(receiver.seen) == 6
    assert most == 2


async def test_a_stopped_sender_gives_back_what_it_could_not_finish(
    store: Store, outbound: Outbound, receiver: Receiver, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr("app.worker.callbacks.GRACE_S", 0.1)
    receiver.script(Reply(200, delay_s=5), Reply(200))
    (job_id,) = await ended(store, receiver.url)
    sender = CallbackSender(store, outbound, worker_settings())
    stop = asyncio.Event()
    task = asyncio.create_task(sender.run(stop))

    async def arrived() -> bool:
        await asyncio.sleep(0)
        return len(receiver.seen) == 1

    await eventually(arrived, what="the request to arrive")
    stop.set()
    await task
    # Released: due again at once, no attempt counted; the next sender sends it.
    leased, _ = await store.outbox.lease(10, lease_ms=10_000)
    assert [(d.job_id, d.attempts) for d in leased] == [(job_id, 0)]


def test_the_backoff_doubles_with_jitter_up_to_its_cap() -> None:
    backoff = Backoff(10.0, 3600.0, random.Random(7))
    for failed, full in [(1, 10.0), (2, 20.0), (3, 40.0), (9, 2560.0), (10, 3600.0), (500, 3600)]:
        for _ in range(20):
            assert full / 2 <= backoff.wait_s(failed) <= full


def _failed(reason: Any, status: int | None = None, **extra: Any) -> OutboundFailed:
    return OutboundFailed("x", reason=reason, retryable=False, status=status, **extra)


@pytest.mark.parametrize(
    ("failure", "outcome"),
    [
        (_failed("unavailable", 500), "retry"),
        (_failed("unavailable", 503, retry_after_s=30.0), "retry"),
        (_failed("http_error", 501), "retry"),
        (_failed("unavailable", 408), "retry"),
        (_failed("unavailable", 429), "retry"),
        (_failed("timeout"), "retry"),
        (_failed("unavailable"), "retry"),  # no connection, TLS, a name that does not resolve
        (_failed("http_error", 400), "failed"),
        (_failed("http_error", 401), "failed"),
        (_failed("http_error", 404), "failed"),
        (_failed("http_error", 410), "failed"),
        (_failed("redirect", 302), "failed"),
        (_failed("too_large"), "failed"),
        (OutboundRefused("hooks.example.com resolves to a private address"), "failed"),
    ],
)
def test_only_failures_that_may_pass_are_retried(
    failure: OutboundFailed | OutboundRefused, outcome: str
) -> None:
    attempt = judge(failure, timeout_s=10)
    assert attempt.outcome == outcome
    if isinstance(failure, OutboundFailed) and failure.retry_after_s:
        assert attempt.retry_after_s == failure.retry_after_s


def test_the_webhook_id_is_one_per_job_and_event() -> None:
    def leased(event: Any, pause: int = 0, attempts: int = 0) -> Leased:
        return Leased("job_1", event, "t", "https://h/", attempts, pause, "tok")

    assert leased("succeeded").webhook_id == leased("succeeded", attempts=3).webhook_id
    assert leased("succeeded").webhook_id != leased("failed").webhook_id
    assert leased("requires_action", 1).webhook_id != leased("requires_action", 2).webhook_id


async def test_a_pause_answered_before_its_callback_went_out_is_not_sent(
    store: Store, outbound: Outbound, receiver: Receiver
) -> None:
    from app.core.turn.checkpoint import RequiredAction, ToolOutput
    from app.core.wire.envelope import Progress
    from tests.store.test_requires_action import SPEC as TOOLS_SPEC
    from tests.store.test_requires_action import checkpoint

    callback = {"url": receiver.url, "events": ["requires_action"]}
    view, _ = await store.submit(tenant=TENANT, spec=TOOLS_SPEC | {"callback": callback})
    (claim,) = await store.claim("w", 1)
    state = await checkpoint()
    paused = await store.pause(
        claim,
        state=state,
        action=RequiredAction.of(state, "2030-01-01T00:00:00.000Z"),
        expires_ms=int(time.time() * 1000) + 60_000,
        progress=Progress(phase="requires_action"),
    )
    assert paused
    outputs = [ToolOutput(tool_call_id="c1", output=1), ToolOutput(tool_call_id="c2", output=2)]
    await store.submit_outputs(view.id, tenant=TENANT, outputs=outputs)
    sender = CallbackSender(store, outbound, worker_settings())
    stop = asyncio.Event()
    task = asyncio.create_task(sender.run(stop))
    try:

        async def settled() -> bool:
            return await states(store, [view.id]) == ["superseded"]

        await eventually(settled, what="the requires_action callback to be superseded")
    finally:
        stop.set()
        await task
    assert receiver.seen == []
