"""A worker on the shards' idle lists: woken alone, or handed a job claimed for it.

    claims = await leases.claim("worker-1", n=8, register=True)  # short: listed as idle
    await leases.wait_for_work(timeout_s=1)    # a submit wakes it (or hands it a job)
    handed = await leases.handed()             # in a task of its own: the handed jobs
    await leases.unlist()                      # stopping: no submit hands it more

A worker is listed once per free slot (up to ``HANDOFF_SLOTS`` copies of its entry per
shard): each hand-off takes a copy (lua/submit.lua), each commit puts one back
(``Writes.complete``), so it is never handed more jobs than it offered.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import secrets
import time
from collections import deque
from collections.abc import Callable
from typing import Any, Final

from redis.exceptions import RedisClusterException, RedisError

from app.store.connection import HANDOFF_SLOTS, RedisClient, StoreOptions
from app.store.errors import StoreUnavailable
from app.store.hub import Watch
from app.store.lane import OnLane
from app.store.records import Claim, claim_of

# The name the idle lists have always logged under (they were part of leases.py).
log = logging.getLogger("app.store.leases")

# How long closing waits to take this worker off the idle lists (best effort).
_UNLIST_S: Final = 2.0
# What ``unlist`` sends itself on its own channel, after the hand-offs before its LREMs.
_UNLISTED: Final = "u"


class IdleLists(OnLane):
    """This worker's entries on the idle lists, its wake-ups and the jobs handed to it."""

    def __init__(
        self, redis: RedisClient, options: StoreOptions | None = None, **fields: Any
    ) -> None:
        # This object's own wake-up channel (``Keys.wake_channel``): a submit that finds it
        # on a shard's idle list wakes it alone. Set first: the role subscribes to it.
        self._token = secrets.token_hex(6)
        super().__init__(redis, options, **fields)
        self._work: Watch | None = None
        self._listening = False
        # Shard → (its entry on the shard's idle list, when it was written: monotonic s,
        # the subscription's generation then: a submit drops the entry of a worker it
        # cannot reach, so after a reconnect the entry is written again), and how many
        # copies of it are listed (one per slot it offers; each hand-off takes one).
        self._idle: dict[int, tuple[str, float, int]] = {}
        self._copies: dict[int, int] = {}
        # What this object is listed as ("<token>/<lease ms>/<cap>/<worker id>"), set by
        # the first claim that lists it; whether it is to be listed (``unlist`` ends it).
        self._head = ""
        self._listing = False
        self._unlisted = False  # ``unlist`` was called: never listed again
        # Jobs handed to this object by a submit, as their messages came: (shard, payload).
        self._handed: deque[tuple[int, str]] = deque()
        self._handed_signal = asyncio.Event()  # jobs in ``_handed``
        self._unlisted_heard = asyncio.Event()  # ``unlist``'s own message came back
        self.handed_total = 0  # hand-offs heard so far
        # Called as a hand-off's message is read (in that pass of the loop), before
        # ``handed`` hears of it: a worker may ``take_handed`` there and start the jobs now.
        self.on_handed: Callable[[], None] | None = None
        self.woken = False  # whether the last ``wait_for_work`` ended by a message
        self.handed_only = False  # ... and only by hand-offs (``handed`` has the jobs)

    @property
    def wake_token(self) -> str:
        """What this object is listed as on the idle lists (``"<token> <ms>"`` entries)."""
        return self._token

    @property
    def wake_channel(self) -> str:
        return self.keys.wake_channel(self._token)

    def _own_channels(self) -> list[str]:
        return [self.wake_channel]

    def _work_watch(self) -> Watch:
        """The standing watch of the ``work`` channel and this object's own."""
        if self._work is None:
            self._work = self.hub.standing(self.channels["work"])
            self.hub.listen(self.wake_channel, self._heard_own)
        return self._work

    def _heard_own(self, key: str, payload: bytes | None) -> None:
        """A message on this object's own channel: a wake-up (the shard), or a hand-off.

        Both end a ``wait_for_work``; a hand-off's only in the next pass of the loop, after
        the job it brings has started (``handed`` wakes first), so the idle worker's wait
        is not on the job's way to its model call.
        """
        watch = self._work
        if watch is None:  # pragma: no cover - listening starts with the watch
            return
        if key == _UNLISTED:
            self._unlisted_heard.set()
            return
        if not key.startswith("h") or not key[1:].isdigit() or payload is None:
            watch.notify(key)
            return
        self._heard_handoff(int(key[1:]), payload)
        asyncio.get_running_loop().call_soon(watch.notify, key)

    def _heard_handoff(self, index: int, payload: bytes) -> None:
        """A hand-off on shard ``index``: the entry copy it took, the claim, the spec.

        A line each (lua/submit.lua): the copy of its entry the submit took off the list,
        the claimed job's values but the spec (JSON), and the spec.
        """
        try:
            text = payload.decode()
        except UnicodeDecodeError:  # not ours to read: its lease runs out, the reaper requeues
            log.error("a job handed to this worker on shard %d is not UTF-8", index)
            return
        entry, _, job = text.partition("\n")
        held = self._idle.get(index)
        if held is not None and held[0] == entry:  # a copy of the entry it holds (not older)
            self._took(index, 1)
        self._handed.append((index, job))
        self.handed_total += 1
        if self.on_handed is not None:
            try:
                self.on_handed()
            except Exception:  # the subscription reads on; ``handed`` has what is left
                log.exception("starting a job handed to this worker failed")
        if self._handed:  # not all taken by ``on_handed``: ``handed`` has them
            self._handed_signal.set()

    @property
    def pending_handed(self) -> int:
        """How many jobs handed over wait in ``take_handed``."""
        return len(self._handed)

    def take_handed(self, limit: int | None = None) -> list[Claim]:
        """The jobs handed over since the last call, at most ``limit`` (the first).

        Each is claimed for this object already: start it, or ``release`` it.
        """
        claims = []
        taken = 0
        while self._handed and (limit is None or taken < limit):
            taken += 1
            index, job = self._handed.popleft()
            head, _, spec = job.partition("\n")
            try:
                values = json.loads(head)
                values.insert(2, spec)
                claims.append(claim_of(values))
            except (ValueError, TypeError, IndexError) as exc:  # not ours to read: its lease
                log.error("a job handed to this worker on shard %d is unreadable: %r", index, exc)
        if not self._handed:
            self._handed_signal.clear()
        return claims

    async def handed(self) -> list[Claim]:
        """Wait for jobs handed to this object (``take_handed``); at least one."""
        self._work_watch()
        while True:
            claims = self.take_handed()
            if claims:
                return claims
            await self._handed_signal.wait()

    async def _listen(self) -> None:
        """Subscribe once: a wake-up published before would reach nobody."""
        if not self._listening:
            watch = self._work_watch()
            await self.hub.start()
            self._listening = True
            if not any(watch.messages):  # only the wake-up of the first subscription
                watch.reset()

    async def wait_for_work(self, timeout_s: float) -> int | None:
        """Wait for a job queued or requeued, or ``timeout_s``; the shard, when known.

        Returns at once when such a message came since the last ``claim`` began: a submit
        publishes only when its tenant's queue was empty (lua/submit.lua), so a wake-up
        between a claim that found nothing and this wait must not be lost. A hand-off ends
        the wait too (``woken`` and ``handed_only``; ``handed`` has the job).
        """
        watch = self._work_watch()
        await self._listen()
        self.woken = await watch.wait(timeout_s)
        self.handed_only = False
        if self.woken:
            keys = watch.drain()  # a hand-off's message notifies this watch once
            self.handed_only = bool(keys) and all(key.startswith("h") for key in keys)
            shards = [key for key in keys if key.isdigit()]
            return int(shards[-1]) if shards else None
        return None

    def _took(self, index: int, n: int) -> None:
        """``n`` copies of its entry on shard ``index``'s list taken (hand-offs, a claim).

        With none left it is off that list: a commit or its next short claim lists it anew.
        """
        self._copies[index] = left = max(0, self._copies.get(index, n) - n)
        if not left:
            del self._idle[index]

    def _relist(self, index: int, room: int, now_ms: int) -> str | None:
        """The entry copy a commit on shard ``index`` lists again (None: none).

        Listed there with fewer copies than ``room`` (the worker's free slots once the job's
        frees; at most ``HANDOFF_SLOTS``): one more, anew if the hand-offs took the last.
        """
        copies = self._copies.get(index)  # None: not listed there
        if not self._listing or copies is None or copies >= min(room, HANDOFF_SLOTS):
            return None
        held = self._idle.get(index)
        if held is None:  # the hand-offs took its last copy: listed anew
            held = (f"{self._head} {now_ms}", time.monotonic(), self.hub.generation)
            self._idle[index] = held
        self._copies[index] = copies + 1
        return held[0]

    @property
    def listed(self) -> bool:
        """Whether this object is on some shard's idle list (as far as it knows)."""
        return bool(self._idle)

    async def leave(self) -> None:
        """Leave every idle list for now, every copy (a worker with no free slot).

        Its next claim that comes back short lists it again. A job handed over before a
        shard's ``LREM`` still comes (``take_handed``).
        """
        held, self._idle = self._idle, {}
        self._copies.clear()
        for index, (entry, _, _) in held.items():
            await self._lane.lrem(self.keys.shard(index).idle, 0, entry)

    async def unlist(self, wait_s: float = 1.0) -> None:
        """Leave every idle list for good (a worker that stops): no more hand-offs.

        A job handed over before is waited for, up to ``wait_s``, to be in ``take_handed``
        (to release): after the ``LREM``s a message of its own goes to its channel, and the
        hand-offs published before come before it. Not on a cluster, which hands nothing.
        """
        self._listing, self._unlisted = False, True
        await self.leave()
        if not self.exact_publish:
            return
        self._unlisted_heard.clear()
        await self._lane.publish(self.wake_channel, _UNLISTED)
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(wait_s):
                await self._unlisted_heard.wait()

    async def aclose(self) -> None:
        """Leave every idle list (best effort: a submit drops a dead worker's entry anyway)
        and stop the subscription."""
        self._listing = False
        with contextlib.suppress(
            TimeoutError, StoreUnavailable, RedisError, RedisClusterException, OSError
        ):
            async with asyncio.timeout(_UNLIST_S):
                await self.leave()
        await super().aclose()
