"""Auto-pipelining: the commands a process issues in one turn of its event loop go to Redis
together, in one round trip, instead of one round trip (and one pooled connection) each::

    batcher = Batcher(redis)
    reply = await batcher.call("EVALSHA", sha, 2, key1, key2, arg)  # joins this turn's batch

Under load a process issues many commands at once (each finished model call commits its
job, each request submits or reads one), and most of what a command costs both sides is
its round trip rather than its work: redis-py's pool and retry bookkeeping, a ``send``
that wakes the other process, a read. A batch of n costs one of each. A command alone
(no other in the same turn) is sent as it is, at the cost of one extra turn of the loop.

The caller's command runs whether or not the caller is still waiting (a cancelled caller
gets no reply, as when a reply is lost on the way). Errors stay per command: a command
that fails raises in its caller only; a connection error fails the whole batch. Not for a
cluster client (a batch would span nodes) nor for blocking commands.
"""

from __future__ import annotations

import asyncio
from typing import Any, Final

from redis.asyncio import Redis

# The most commands one round trip carries; a longer queue goes as several batches.
MAX_BATCH: Final = 64


class Batcher:
    """Sends the commands queued in one turn of the event loop as one pipeline."""

    def __init__(self, redis: Redis) -> None:
        self._redis = redis
        self._queue: list[tuple[tuple[Any, ...], asyncio.Future[Any]]] = []
        self._sending: set[asyncio.Task[None]] = set()

    async def call(self, *args: Any) -> Any:
        """The reply to command ``args`` (``"HMGET", key, field, ...``), sent with the other
        commands of this turn."""
        loop = asyncio.get_running_loop()
        future: asyncio.Future[Any] = loop.create_future()
        self._queue.append((args, future))
        if len(self._queue) == 1:
            loop.call_soon(self._flush)
        return await future

    async def aclose(self) -> None:
        """Wait for the batches on their way (their callers are owed a reply)."""
        while self._sending:
            await asyncio.gather(*self._sending, return_exceptions=True)

    def _flush(self) -> None:
        queued, self._queue = self._queue, []
        for start in range(0, len(queued), MAX_BATCH):
            task = asyncio.ensure_future(self._send(queued[start : start + MAX_BATCH]))
            self._sending.add(task)
            task.add_done_callback(self._sending.discard)

    async def _send(self, batch: list[tuple[tuple[Any, ...], asyncio.Future[Any]]]) -> None:
        try:
            if len(batch) == 1:
                replies = [await self._redis.execute_command(*batch[0][0])]  # type: ignore[no-untyped-call]
            else:
                async with self._redis.pipeline(transaction=False) as pipe:
                    for args, _ in batch:
                        pipe.execute_command(*args)
                    replies = await pipe.execute(raise_on_error=False)
        except BaseException as exc:  # the round trip failed: every command of it did
            for _, future in batch:
                if future.done():
                    continue
                if isinstance(exc, asyncio.CancelledError):
                    future.cancel()
                else:
                    future.set_exception(exc)
            if not isinstance(exc, Exception):
                raise  # a cancellation (the loop shutting down): no reply came
            return
        for (_, future), reply in zip(batch, replies, strict=True):
            if future.done():
                continue  # its caller stopped waiting
            if isinstance(reply, Exception):
                future.set_exception(reply)
            else:
                future.set_result(reply)
