"""Auto-pipelining on redis-py's public API: the commands a process makes during one turn
of the event loop go to Redis together, as one pipeline::

    batcher = Batcher(redis)
    reply = await batcher.call("EVALSHA", sha, 2, key1, key2, arg)  # with this turn's others
    await batcher.aclose()                                          # waits for those sent

Most of what a command costs both sides is its round trip rather than its work: under
load a worker's commits, or an API's submits and reads, share one write, one wake-up of
Redis and one read this way. The commands of a turn (at most ``MAX_BATCH`` to one) go
as ``redis.pipeline(transaction=False)`` on a connection of the client's pool; a lone
command goes as itself. At most
``AT_ONCE`` pipelines are on their way: the commands made meanwhile go together as soon
as one is back (two connections of the pool serve a busy process, and under load the
pipelines grow instead of the connections).

The caller's command runs whether or not the caller is still waiting (a cancelled caller
gets no reply, as when a reply is lost on the way). Errors stay per command: an error
reply raises in its caller only (as redis-py's exception: ``NoScriptError``...). A lost
connection fails every command of its pipeline (``ConnectionError``: whether they ran is
unknown; the store's clients send a command once, no retry), and the next pipeline takes
another connection; a reply that does not come within the client's socket timeout fails
them with ``TimeoutError``. Not for a cluster client (a pipeline would span nodes).
"""

from __future__ import annotations

import asyncio
from typing import Any, Final

from redis.asyncio import Redis
from redis.exceptions import ResponseError

# The most commands one pipeline carries; more made in one turn go as several.
MAX_BATCH: Final = 64
# Pipelines on their way at once, per batcher: the commands made meanwhile wait for one
# to come back, and go together.
AT_ONCE: Final = 1

Pending = tuple[tuple[Any, ...], asyncio.Future[Any]]


class Batcher:
    """Sends the commands of each turn of the loop as one pipeline (see the module), with
    at most ``at_once`` pipelines on their way."""

    def __init__(self, redis: Redis, *, at_once: int = AT_ONCE) -> None:
        self._redis = redis
        self._at_once = at_once
        self._queue: list[Pending] = []
        self._flushing = False  # a flush is due at the end of this turn
        self._sending: set[asyncio.Task[None]] = set()

    async def call(self, *args: Any) -> Any:
        """The reply to command ``args`` (``"HMGET", key, field, ...``)."""
        loop = asyncio.get_running_loop()
        future: asyncio.Future[Any] = loop.create_future()
        self._queue.append((args, future))
        if not self._flushing:
            self._flushing = True
            loop.call_soon(self._flush)
        return await future

    async def aclose(self) -> None:
        """Wait for the commands made so far: their callers are owed replies."""
        self._flush()
        while self._sending:
            await asyncio.wait(tuple(self._sending))

    def _flush(self) -> None:
        self._flushing = False
        queue = self._queue
        while queue and len(self._sending) < self._at_once:
            batch, queue = queue[:MAX_BATCH], queue[MAX_BATCH:]
            task = asyncio.get_running_loop().create_task(self._send(batch))
            self._sending.add(task)
            task.add_done_callback(self._sent)
        self._queue = queue

    def _sent(self, task: asyncio.Task[None]) -> None:
        self._sending.discard(task)
        if self._queue and not self._flushing:  # made while it was on its way: now
            self._flush()

    async def _send(self, batch: list[Pending]) -> None:
        replies: list[Any]
        try:
            if len(batch) == 1:
                try:
                    command = self._redis.execute_command(*batch[0][0])  # type: ignore[no-untyped-call]  # untyped in redis-py
                    replies = [await command]
                except ResponseError as exc:
                    replies = [exc]
            else:
                pipe = self._redis.pipeline(transaction=False)
                for args, _ in batch:
                    pipe.execute_command(*args)
                replies = await pipe.execute(raise_on_error=False)
        except BaseException as exc:  # lost, timed out, pool exhausted; or cancelled
            for _, future in batch:
                if not future.done():
                    if isinstance(exc, asyncio.CancelledError):
                        future.cancel()
                    else:
                        future.set_exception(exc)
            if not isinstance(exc, Exception):
                raise
            return
        for (_, future), reply in zip(batch, replies, strict=True):
            if future.done():
                continue  # its caller stopped waiting
            if isinstance(reply, Exception):
                future.set_exception(reply)
            else:
                future.set_result(reply)
