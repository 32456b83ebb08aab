"""Waiting on the thing itself: a condition looked at until it holds, never a fixed sleep.

    await until(lambda: worker.logged("drained"), what="the worker to drain")
    job = await until(lambda: store.get(job_id), what="the job to be stored")  # async check
    spans = sync_until(exporter.get_finished_spans, what="a finished span")  # a sync test

The check is called every ``POLL_S`` (an async check is awaited); the first truthy value it
returns is the result. A test says what it waits on, and the wait has no deadline that a
slow machine could hit: a generous ``PATIENCE_S`` only turns a hang into a failure that
names what never came, before pytest-timeout (pyproject.toml) would stop the test blind.

To show that something did *not* happen, wait for a later event that proves the time
passed (the next heartbeat, a later job's end, the reaper's next pass), then look.
"""

from __future__ import annotations

import asyncio
import inspect
import time
from collections.abc import Awaitable, Callable
from typing import Any, Final, TypeVar, overload

import pytest

T = TypeVar("T")

# Between looks: short enough to add nothing a test would notice, long enough to let the
# thing being waited on run (a thread, a subprocess, the event loop's other tasks).
POLL_S: Final = 0.01
# Well under pytest-timeout's limit (pyproject.toml): a hang fails naming what it waited on.
PATIENCE_S: Final = 120.0


@overload
async def until(
    check: Callable[[], Awaitable[T | None]],
    *,
    what: str,
    every: float = POLL_S,
    patience: float = PATIENCE_S,
) -> T: ...


@overload
async def until(
    check: Callable[[], T | None],
    *,
    what: str,
    every: float = POLL_S,
    patience: float = PATIENCE_S,
) -> T: ...


async def until(
    check: Callable[[], Any],
    *,
    what: str,
    every: float = POLL_S,
    patience: float = PATIENCE_S,
) -> Any:
    """The first truthy value of ``check()`` (awaited when it is a coroutine function)."""
    gave_up = time.monotonic() + patience
    while True:
        value = check()
        if inspect.isawaitable(value):
            value = await value
        if value:
            return value
        if time.monotonic() > gave_up:
            pytest.fail(f"still waiting for {what} after {patience:.0f}s")
        await asyncio.sleep(every)


def sync_until(
    check: Callable[[], T | None],
    *,
    what: str,
    every: float = POLL_S,
    patience: float = PATIENCE_S,
) -> T:
    """``until`` for synchronous tests: blocks this thread between looks."""
    gave_up = time.monotonic() + patience
    while True:
        value = check()
        if value:
            return value
        if time.monotonic() > gave_up:
            pytest.fail(f"still waiting for {what} after {patience:.0f}s")
        time.sleep(every)


async def forever() -> None:
    """A fake server's reply that never comes (until its task is cancelled)."""
    await asyncio.Event().wait()


async def awaited(aw: Awaitable[T], *, what: str, patience: float = PATIENCE_S) -> T:
    """``await aw``, the event it waits on named: a hang fails saying what never came."""
    try:
        async with asyncio.timeout(patience):
            return await aw
    except TimeoutError:
        pytest.fail(f"still waiting for {what} after {patience:.0f}s")
