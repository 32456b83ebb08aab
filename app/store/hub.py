"""Notifications through Redis pub/sub: one subscription per store role, waiters by key.

Long-polls, event streams, idle workers and cancellations all wait on the same small set
of channels instead of each holding a Redis connection in a blocking read::

    hub = Hub(redis, channels=["rp:done", "rp:events"])  # only what the role waits on
    async with hub.watch("rp:done", job_id) as watch:   # register before reading
        view = await read()
        if not view.terminal:
            await watch.wait(timeout_s=30)               # a message for job_id, or timeout

A hub subscribes only to the channels it is given (a role's ``HEARS``) and refuses a
watcher of any other, which would never wake. A message's data is the key it is about (a
job id; for ``work``, a shard), optionally followed by a newline and a payload (a finished
job's view, on ``done``): a watcher keeps the last payload it heard. While the
subscription is down (Redis restarting) every waiter is woken each time it reconnects, so
nobody sleeps through a message that was lost: callers re-read what they wait for.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections import defaultdict
from collections.abc import Callable, Sequence
from contextlib import AbstractAsyncContextManager
from typing import Any, Final

from redis.asyncio import Redis
from redis.asyncio.client import PubSub
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import RedisError
from redis.exceptions import TimeoutError as RedisTimeoutError

log = logging.getLogger(__name__)

ANY: Final = "*"  # watch every message of a channel
_POLL_S: Final = 10.0


class Watch:
    """One waiter: set when a message for its key (or any, for ``ANY``) arrives."""

    __slots__ = ("_keep", "_notified", "_waiters", "messages", "payload")

    def __init__(self, keep: int | None = None) -> None:
        self._notified = False  # a message came since the last wait
        # Each ``wait`` in progress (there is rarely more than one): an ``asyncio.Event``'s
        # waiters and an ``asyncio.timeout`` per wait, without their layers.
        self._waiters: list[asyncio.Future[None]] = []
        self._keep = keep  # the most messages held (None: all until drained)
        self.messages: list[str] = []
        self.payload: str | None = None  # what the last message carried after its key

    def notify(self, data: str, payload: str | None = None) -> None:
        """A message about this watcher's key arrived (``data``: the key, "" for a
        wake-up of every watcher): ``wait`` returns."""
        self.payload = payload
        self.messages.append(data)
        if self._keep is not None and len(self.messages) > self._keep:
            del self.messages[: -self._keep]
        self._notified = True
        for waiter in self._waiters:
            if not waiter.done():
                waiter.set_result(None)

    def reset(self) -> None:
        """Forget what arrived so far: the next ``wait`` waits for a new message."""
        self._notified = False
        self.messages.clear()

    async def wait(self, timeout_s: float) -> bool:
        """True when notified (since the last wait), False after ``timeout_s``."""
        if not self._notified and timeout_s > 0:
            loop = asyncio.get_running_loop()
            waiter: asyncio.Future[None] = loop.create_future()
            timer = loop.call_later(timeout_s, _time_up, waiter)
            self._waiters.append(waiter)
            try:
                await waiter
            finally:
                timer.cancel()
                self._waiters.remove(waiter)
        notified = self._notified
        self._notified = False
        return notified

    def drain(self) -> list[str]:
        out, self.messages = self.messages, []
        return out


def _time_up(waiter: asyncio.Future[None]) -> None:
    if not waiter.done():
        waiter.set_result(None)


class _Watching:
    """``Hub.watch``'s block (a class, not a generator: every long-poll enters one)."""

    __slots__ = ("_entry", "_hub", "_watcher")

    def __init__(self, hub: Hub, entry: tuple[str, str]) -> None:
        self._hub = hub
        self._entry = entry
        self._watcher: Watch | None = None

    async def __aenter__(self) -> Watch:
        hub = self._hub
        await hub.start()
        watcher = self._watcher = Watch()
        hub.add(self._entry, watcher)
        return watcher

    async def __aexit__(self, *exc_info: object) -> None:
        if self._watcher is not None:
            self._hub.discard(self._entry, self._watcher)


class Hub:
    """Subscribes lazily to ``channels`` on first use and dispatches to watchers."""

    def __init__(self, redis: Redis | Any, channels: Sequence[str]) -> None:
        self._redis = redis
        self._channels = tuple(channels)
        self._watchers: dict[tuple[str, str], set[Watch]] = defaultdict(set)
        self._task: asyncio.Task[None] | None = None
        self._subscribed = asyncio.Event()
        self._listeners: dict[str, list[Callable[[str, bytes | None], None]]] = defaultdict(list)
        # A channel's name as the subscription's replies carry it (bytes, or str when the
        # client decodes replies).
        self._names: dict[bytes | str, str] = {c: c for c in self._channels}
        self._names.update((c.encode(), c) for c in self._channels)
        # Moves each time the subscription goes live or is lost: while it has not moved
        # (and ``live``), no message published since was missed.
        self.generation = 0
        self._heard = 0  # replies read so far: the subscription's sign of life

    async def start(self) -> None:
        """Subscribe (once); returns when the subscription is live or after 2 s."""
        task = self._task
        if task is not None and self._subscribed.is_set() and not task.done():
            return  # live: every watch of a long-poll starts here
        if task is None or task.done():
            self._subscribed.clear()
            self._task = asyncio.create_task(self._run(), name="redis-pubsub")
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(2.0):
                await self._subscribed.wait()

    async def close(self) -> None:
        task, self._task = self._task, None
        if task is not None:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task

    @property
    def channels(self) -> tuple[str, ...]:
        return self._channels

    @property
    def live(self) -> bool:
        """Subscribed now (messages published from here on are heard)."""
        return self._subscribed.is_set()

    def listen(self, channel: str, listener: Callable[[str, bytes | None], None]) -> None:
        """Call ``listener(key, payload)`` for every message on ``channel`` (before its
        watchers wake), the payload as it came (UTF-8, not decoded: most messages are about
        jobs nobody here waits for); it must be quick (one that raises is logged, and the
        others still hear the message)."""
        self._check(channel)
        self._listeners[channel].append(listener)

    def _check(self, channel: str) -> None:
        if channel not in self._channels:
            # A watcher of a channel the hub does not subscribe to would never wake.
            raise ValueError(f"this hub does not subscribe to {channel!r}: {self._channels}")

    def watch(self, channel: str, key: str = ANY) -> AbstractAsyncContextManager[Watch]:
        """Register a watcher for messages on ``channel`` about ``key`` (``async with``)."""
        self._check(channel)
        return _Watching(self, (channel, key))

    def standing(
        self, channel: str, key: str = ANY, *, keep: int = 64, also: Sequence[str] = ()
    ) -> Watch:
        """A watcher that stays registered (not a context): for one caller that waits again
        and again and must not miss a message that arrives between two waits. It holds at
        most ``keep`` messages, of ``channel`` and of the channels ``also``. It does not
        subscribe: ``start()`` before waiting on it (the subscription wakes every watcher
        when it goes live)."""
        for name in (channel, *also):
            self._check(name)
        watcher = Watch(keep)
        for name in (channel, *also):
            self.add((name, key), watcher)
        return watcher

    def add(self, entry: tuple[str, str], watcher: Watch) -> None:
        """Register ``watcher`` for messages on ``entry``'s channel about its key."""
        self._watchers[entry].add(watcher)

    def discard(self, entry: tuple[str, str], watcher: Watch) -> None:
        """Unregister ``watcher`` (``add``); nothing when it is not registered."""
        watchers = self._watchers.get(entry)
        if watchers is not None:
            watchers.discard(watcher)
            if not watchers:
                del self._watchers[entry]

    def watching(self, channel: str, key: str = ANY) -> int:
        """How many watchers wait on ``channel`` for ``key`` now (tests wait on this)."""
        return len(self._watchers.get((channel, key), ()))

    def _dispatch(self, channel: str, data: bytes | str) -> None:
        if isinstance(data, str):
            data = data.encode()
        cut = data.find(b"\n")
        if cut < 0:
            key, payload = data.decode(), None
        else:
            key, payload = data[:cut].decode(), data[cut + 1 :]
        for listener in self._listeners.get(channel, ()):
            try:
                listener(key, payload)
            except Exception:  # a listener's bug: the others still hear theirs
                log.exception("a listener of %s failed", channel)
        waiting = self._watchers.get((channel, key)), self._watchers.get((channel, ANY))
        if waiting[0] or waiting[1]:
            text = None if payload is None else payload.decode()
            for watchers in waiting:
                for watcher in tuple(watchers or ()):
                    watcher.notify(key, text)

    def _wake_all(self) -> None:
        for watchers in tuple(self._watchers.values()):
            for watcher in tuple(watchers):
                watcher.notify("")

    async def _run(self) -> None:
        backoff = 0.1
        while True:
            pubsub = self._redis.pubsub()
            try:
                await pubsub.subscribe(*self._channels)
                await self._listen(pubsub)
            except asyncio.CancelledError:
                self._subscribed.clear()
                self.generation += 1
                raise
            except (RedisError, OSError) as exc:
                live = self._subscribed.is_set()
                self._subscribed.clear()
                self.generation += 1
                log.warning("pub/sub lost (%r); resubscribing in %.1fs", exc, backoff)
                self._wake_all()
                if live:
                    backoff = 0.1
                await asyncio.sleep(backoff)
                backoff = min(backoff * 2, 5.0)
            finally:
                with contextlib.suppress(RedisError, OSError, RuntimeError):
                    await pubsub.aclose()

    async def _listen(self, pubsub: PubSub) -> None:
        """Until the subscription is lost (raises): its messages are read by a task of their
        own (``_read``); a silent one is sent a PING every ``_POLL_S``, and taken as lost
        when the PING goes unanswered that long."""
        reader = asyncio.create_task(self._read(pubsub), name="redis-pubsub-read")
        try:
            pinged = False
            while True:
                heard = self._heard
                await asyncio.wait([reader], timeout=_POLL_S)
                if reader.done():
                    reader.result()  # what ended it
                    raise RedisConnectionError("the pub/sub connection was closed")
                if self._heard != heard:
                    pinged = False
                elif pinged:
                    raise RedisTimeoutError("the pub/sub connection does not answer")
                else:
                    await pubsub.ping()
                    pinged = True
        finally:
            reader.cancel()
            with contextlib.suppress(asyncio.CancelledError, RedisError, OSError):
                await reader

    async def _read(self, pubsub: PubSub) -> None:
        """Dispatch each message as it comes (a blocking read: ``_listen`` bounds a silent
        one); live once Redis has confirmed every channel."""
        names = self._names
        unconfirmed = len(self._channels)
        while True:
            message = await pubsub.get_message(timeout=None)
            self._heard += 1
            if message is None:
                continue  # a reply redis-py keeps to itself (its health check)
            kind = message["type"]
            if kind == "message":
                channel = names.get(message["channel"])
                if channel is not None:
                    try:
                        self._dispatch(channel, message["data"])
                    except Exception:  # e.g. a key that is not UTF-8: not ours
                        log.exception("a message on %s could not be dispatched", channel)
            elif kind == "subscribe" and unconfirmed:
                unconfirmed -= 1
                if not unconfirmed:
                    self.generation += 1
                    self._subscribed.set()
                    self._wake_all()  # anything published while we were away is re-read
