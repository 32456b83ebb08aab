"""The worker's waits that end early: on a stop event, or a semaphore's free slot now."""

from __future__ import annotations

import asyncio
import contextlib
from typing import Any


async def before_stop(
    future: asyncio.Future[Any], stop: asyncio.Event, stopped: asyncio.Future[Any] | None = None
) -> bool:
    """Wait for ``future`` or ``stop``; True if ``future`` finished, else it is cancelled.

    ``stopped``: a standing wait for ``stop`` to share (else one is made for this wait).
    """
    own = stopped is None
    if stopped is None:
        stopped = asyncio.ensure_future(stop.wait())
    try:
        await asyncio.wait({future, stopped}, return_when=asyncio.FIRST_COMPLETED)
    finally:
        if own:
            stopped.cancel()
        if not future.done():
            future.cancel()
    if future.done():
        return True
    await asyncio.wait({future})  # let it unwind; an outer cancel still gets through
    if not future.cancelled():
        future.exception()  # retrieved, so it is not reported as lost
    return False


async def wait(event: asyncio.Event, timeout_s: float) -> None:
    """Sleep ``timeout_s`` or until ``event`` is set."""
    with contextlib.suppress(TimeoutError):
        await asyncio.wait_for(event.wait(), timeout_s)


def take_free(slots: asyncio.Semaphore) -> bool:
    """Take a slot of ``slots`` now if one is free, without a pass of the event loop.

    ``acquire`` returns without a wait then, so its coroutine ends at its first step.
    """
    if slots.locked():
        return False
    acquire = slots.acquire()
    try:
        acquire.send(None)
    except StopIteration:
        return True
    acquire.close()  # pragma: no cover - a free slot is taken at once
    raise AssertionError("a free slot was not taken at once")  # pragma: no cover
