"""Batches in Redis: each batch's items, answers and results in per-batch hashes keyed by
the item's index, so 100,000 items are read and written in chunks, never held whole.

    store = BatchStore(redis, prefix="rp")
    batch_id, replay = await store.create(tenant, options_json, items, key=None, ...)
    await store.meta(batch_id)                # the batch's fields (status, round, counts…)
    async for chunk in store.results(batch_id): ...   # result lines, in item order

Every write of a round is idempotent, so a worker that dies mid-step leaves nothing a
second worker would count twice: an answer is taken in only if the item's tag (the last
round taken in) is older than the line's round, and a result is written with ``HSETNX``
and counted in the same script. The keys of one batch share a hash tag (one cluster slot).
"""

from __future__ import annotations

import json
import re
import secrets
import time
from collections.abc import AsyncIterator, Iterable, Sequence
from dataclasses import dataclass
from typing import Any, Final

from app.core.wire.batch import Batch, batch_of
from app.store.batch_callbacks import BatchCallbacks
from app.store.connection import RedisClient
from app.store.keys import BatchKeys

CHUNK: Final = 500
BATCH_ID: Final = re.compile(r"^b_[0-9a-f]{24}$")
# A finished batch's keys live this long after it ends (REPROMPT_RETENTION_S is the jobs').
DEFAULT_RETENTION_S: Final = 7 * 86_400

# KEYS: meta, answers, tags, errors; ARGV: round, then per line: index, kind, payload,
# cost, input tokens, output tokens. kind "a": an answer; "e": a provider error on the line.
_INGEST: Final = """
local taken = 0
local round = tonumber(ARGV[1])
for i = 2, #ARGV, 6 do
  local idx = ARGV[i]
  local tag = redis.call('HGET', KEYS[3], idx)
  if not tag or tonumber(tag) < round then
    redis.call('HSET', KEYS[3], idx, round)
    if ARGV[i + 1] == 'a' then
      local old = redis.call('HGET', KEYS[2], idx)
      if old and #old > 2 then
        redis.call('HSET', KEYS[2], idx, string.sub(old, 1, -2) .. ',' .. ARGV[i + 2] .. ']')
      else
        redis.call('HSET', KEYS[2], idx, '[' .. ARGV[i + 2] .. ']')
      end
      redis.call('HINCRBYFLOAT', KEYS[1], 'costUsd', ARGV[i + 3])
      redis.call('HINCRBY', KEYS[1], 'inputTokens', ARGV[i + 4])
      redis.call('HINCRBY', KEYS[1], 'outputTokens', ARGV[i + 5])
    else
      redis.call('HINCRBY', KEYS[4], idx, 1)
    end
    taken = taken + 1
  end
end
return taken
"""

# KEYS: meta, results; ARGV per item: index, status, result line, wasted cost.
_FINALIZE: Final = """
local written = 0
for i = 1, #ARGV, 4 do
  if redis.call('HSETNX', KEYS[2], ARGV[i], ARGV[i + 2]) == 1 then
    redis.call('HINCRBY', KEYS[1], 'n_' .. ARGV[i + 1], 1)
    redis.call('HINCRBYFLOAT', KEYS[1], 'wastedCostUsd', ARGV[i + 3])
    written = written + 1
  end
end
return written
"""

# KEYS: lease; ARGV: token, ms. Renew only one's own lease.
_RENEW: Final = """
if redis.call('GET', KEYS[1]) == ARGV[1] then
  return redis.call('PEXPIRE', KEYS[1], ARGV[2])
end
return 0
"""
_RELEASE: Final = """
if redis.call('GET', KEYS[1]) == ARGV[1] then
  return redis.call('DEL', KEYS[1])
end
return 0
"""


class TooManyOpen(Exception):
    # a refusal, rendered 429 by the API
    """The tenant has as many open batches as it may."""


class DuplicateCustomId(ValueError):
    def __init__(self, custom_id: str, line: int) -> None:
        super().__init__(f"items.{line}.customId: {custom_id!r} is already in the batch")
        self.line = line


@dataclass(frozen=True, slots=True)
class Pending:
    """One item still without a result, as a round step reads it."""

    index: int
    item: dict[str, Any]
    answers: list[dict[str, Any]]
    errors: int


def now_ms() -> int:
    return int(time.time() * 1000)


def is_batch_id(value: str) -> bool:
    return bool(BATCH_ID.match(value))


class BatchStore:
    def __init__(self, redis: RedisClient, *, prefix: str) -> None:
        self.redis = redis
        self.prefix = prefix
        self._ingest = redis.register_script(_INGEST)
        self._finalize = redis.register_script(_FINALIZE)
        self._renew = redis.register_script(_RENEW)
        self._release = redis.register_script(_RELEASE)
        self.callbacks = BatchCallbacks(redis, prefix=prefix, retention_s=DEFAULT_RETENTION_S)

    def keys(self, batch_id: str) -> BatchKeys:
        return BatchKeys(self.prefix, batch_id)

    # -- the API's side ---------------------------------------------------------------

    async def existing(self, tenant: str, key: str) -> str | None:
        """The batch an Idempotency-Key made, if any."""
        found = await self.redis.get(BatchKeys.idempotency(self.prefix, tenant, key))
        return None if found is None else _text(found)

    async def create(
        self,
        tenant: str,
        *,
        options: dict[str, Any],
        items: AsyncIterator[dict[str, Any]],
        key: str | None,
        max_open: int,
        fields: dict[str, str],
    ) -> tuple[str, bool]:
        """Store a batch and its items; ``(id, replay)``: replay when ``key`` made it before.

        The items are written as they come (chunks of 500); the batch becomes due only once
        they are all in, so a runner never sees half a batch. ``TooManyOpen`` beyond
        ``max_open`` running batches; ``DuplicateCustomId`` (and the batch's keys removed)
        for an id given twice.
        """
        if key is not None:
            found = await self.existing(tenant, key)
            if found is not None:
                return found, True
        open_key = BatchKeys.open_of(self.prefix, tenant)
        if await self.redis.scard(open_key) >= max_open:
            raise TooManyOpen(f"{max_open} batches are running for this tenant")
        batch_id = "b_" + secrets.token_hex(12)
        if key is not None:
            idem = BatchKeys.idempotency(self.prefix, tenant, key)
            if not await self.redis.set(idem, batch_id, nx=True, ex=DEFAULT_RETENTION_S):
                found = await self.existing(tenant, key)
                return (found or batch_id), True
        k = self.keys(batch_id)
        total = 0
        try:
            chunk: list[dict[str, Any]] = []
            async for item in items:
                chunk.append(item)
                if len(chunk) >= CHUNK:
                    await self._put_items(k, total, chunk)
                    total += len(chunk)
                    chunk = []
            if chunk:
                await self._put_items(k, total, chunk)
                total += len(chunk)
        except BaseException:
            await self.redis.delete(*k.all())
            if key is not None:
                await self.redis.delete(BatchKeys.idempotency(self.prefix, tenant, key))
            raise
        created = now_ms()
        meta = {
            **fields,
            "id": batch_id,
            "tenant": tenant,
            "options": json.dumps(options),
            "status": "running",
            "phase": "submit",
            "round": "0",
            "total": str(total),
            "createdAt": str(created),
            "deadlineAt": str(created + int(options.get("deadlineMs", 86_400_000))),
            "costUsd": "0",
            "wastedCostUsd": "0",
            "inputTokens": "0",
            "outputTokens": "0",
            "n_succeeded": "0",
            "n_failed": "0",
        }
        async with self.redis.pipeline(transaction=False) as pipe:
            pipe.hset(k.meta, mapping=_mapping(meta))
            pipe.sadd(open_key, batch_id)
            pipe.zadd(BatchKeys.listing(self.prefix, tenant), {batch_id: created})
            pipe.zadd(BatchKeys.due(self.prefix), {batch_id: created})
            await pipe.execute()
        return batch_id, False

    async def _put_items(self, k: BatchKeys, start: int, chunk: list[dict[str, Any]]) -> None:
        ids = [str(item["customId"]) for item in chunk]
        async with self.redis.pipeline(transaction=False) as pipe:
            for n, custom_id in enumerate(ids):
                pipe.hsetnx(k.ids, custom_id, start + n)
            fresh = await pipe.execute()
        for n, was_new in enumerate(fresh):
            if not was_new:
                raise DuplicateCustomId(ids[n], start + n)
        await self.redis.hset(
            k.items, mapping={str(start + n): json.dumps(item) for n, item in enumerate(chunk)}
        )

    async def meta(self, batch_id: str) -> dict[str, str] | None:
        raw = await self.redis.hgetall(self.keys(batch_id).meta)
        if not raw:
            return None
        return {_text(a): _text(b) for a, b in raw.items()}

    async def view(self, batch_id: str) -> Batch | None:
        """The batch as ``GET /v1/batches/{id}`` shows it (None: no such batch)."""
        meta = await self.meta(batch_id)
        if meta is None:
            return None
        return batch_of(meta, await self.callbacks.deliveries(batch_id))

    async def recent(
        self, tenants: Sequence[str], *, before_ms: int | None, limit: int
    ) -> list[tuple[int, str]]:
        """The newest ``limit`` batches of ``tenants`` created before ``before_ms``:
        ``(created ms, id)``, newest first."""
        top = "+inf" if before_ms is None else f"({before_ms}"
        found: list[tuple[int, str]] = []
        for tenant in tenants:
            rows = await self.redis.zrevrangebyscore(
                BatchKeys.listing(self.prefix, tenant),
                top,
                "-inf",
                start=0,
                num=limit,
                withscores=True,
            )
            found += [(int(row[1]), _text(row[0])) for row in rows]
        return sorted(found, reverse=True)[:limit]

    async def request_cancel(self, batch_id: str) -> None:
        k = self.keys(batch_id)
        await self.redis.hset(k.meta, "cancelRequested", "1")
        await self.redis.zadd(BatchKeys.due(self.prefix), {batch_id: now_ms()})

    async def index_of(self, batch_id: str, custom_id: str) -> int | None:
        found = await self.redis.hget(self.keys(batch_id).ids, custom_id)
        return None if found is None else int(found)

    async def lines(
        self, batch_id: str, start: int, stop: int
    ) -> list[tuple[int, dict[str, Any], str | None]]:
        """Items ``start``..``stop - 1``: each with its result line (None: pending)."""
        k = self.keys(batch_id)
        fields = [str(i) for i in range(start, stop)]
        if not fields:
            return []
        async with self.redis.pipeline(transaction=False) as pipe:
            pipe.hmget(k.items, fields)
            pipe.hmget(k.results, fields)
            items, results = await pipe.execute()
        out = []
        for i, (item, result) in enumerate(zip(items, results, strict=True)):
            if item is None:
                continue
            out.append((start + i, json.loads(item), None if result is None else _text(result)))
        return out

    async def result_chunks(self, batch_id: str, total: int) -> AsyncIterator[list[str | None]]:
        """Result lines in item order, a chunk at a time (None where an item is pending)."""
        k = self.keys(batch_id)
        for start in range(0, total, CHUNK):
            fields = [str(i) for i in range(start, min(start + CHUNK, total))]
            raw = await self.redis.hmget(k.results, fields)
            yield [None if r is None else _text(r) for r in raw]

    # -- the runner's side --------------------------------------------------------------

    async def due(self, limit: int) -> list[str]:
        found = await self.redis.zrangebyscore(
            BatchKeys.due(self.prefix), "-inf", now_ms(), start=0, num=limit
        )
        return [_text(b) for b in found]

    async def lease(self, batch_id: str, token: str, ms: int) -> bool:
        return bool(await self.redis.set(self.keys(batch_id).lease, token, nx=True, px=ms))

    async def renew(self, batch_id: str, token: str, ms: int) -> bool:
        return bool(await self._renew(keys=[self.keys(batch_id).lease], args=[token, ms]))

    async def release(self, batch_id: str, token: str) -> None:
        await self._release(keys=[self.keys(batch_id).lease], args=[token])

    async def schedule(self, batch_id: str, at_ms: int) -> None:
        await self.redis.zadd(BatchKeys.due(self.prefix), {batch_id: at_ms})

    async def unschedule(self, batch_id: str) -> None:
        await self.redis.zrem(BatchKeys.due(self.prefix), batch_id)

    async def update(self, batch_id: str, fields: dict[str, str]) -> None:
        await self.redis.hset(self.keys(batch_id).meta, mapping=_mapping(fields))

    async def pending(self, batch_id: str, total: int) -> AsyncIterator[list[Pending]]:
        """The items without a result, a chunk at a time, with their answers so far."""
        k = self.keys(batch_id)
        for start in range(0, total, CHUNK):
            fields = [str(i) for i in range(start, min(start + CHUNK, total))]
            async with self.redis.pipeline(transaction=False) as pipe:
                pipe.hmget(k.results, fields)
                pipe.hmget(k.items, fields)
                pipe.hmget(k.answers, fields)
                pipe.hmget(k.errors, fields)
                results, items, answers, errors = await pipe.execute()
            chunk = [
                Pending(
                    start + i,
                    json.loads(items[i]),
                    [] if answers[i] is None else json.loads(answers[i]),
                    int(errors[i] or 0),
                )
                for i in range(len(fields))
                if results[i] is None and items[i] is not None
            ]
            if chunk:
                yield chunk

    async def errors_of(self, batch_id: str, indices: Sequence[int]) -> list[int]:
        if not indices:
            return []
        raw = await self.redis.hmget(self.keys(batch_id).errors, [str(i) for i in indices])
        return [int(r or 0) for r in raw]

    async def ingest(
        self, batch_id: str, round_no: int, lines: Iterable[tuple[int, str, str, float, int, int]]
    ) -> int:
        """Take in a round's lines (index, kind, payload, cost, tokens in, out); once each."""
        k = self.keys(batch_id)
        args: list[Any] = [round_no]
        for index, kind, payload, cost, tokens_in, tokens_out in lines:
            args += [index, kind, payload, repr(cost), tokens_in, tokens_out]
        if len(args) == 1:
            return 0
        return int(await self._ingest(keys=[k.meta, k.answers, k.tags, k.errors], args=args))

    async def append_live(
        self, batch_id: str, index: int, answers: list[str], cost: float, tin: int, tout: int
    ) -> None:
        """A live call's answers for an item (the live re-ask policy), counted once."""
        k = self.keys(batch_id)
        async with self.redis.pipeline(transaction=True) as pipe:
            pipe.hset(k.answers, str(index), "[" + ",".join(answers) + "]")
            pipe.hincrbyfloat(k.meta, "costUsd", cost)
            pipe.hincrby(k.meta, "inputTokens", tin)
            pipe.hincrby(k.meta, "outputTokens", tout)
            await pipe.execute()

    async def finalize(self, batch_id: str, results: Iterable[tuple[int, str, str, float]]) -> int:
        """Write items' results (index, status, line, wasted cost): each once, counted."""
        k = self.keys(batch_id)
        args: list[Any] = []
        for index, status, line, wasted in results:
            args += [index, status, line, repr(wasted)]
        if not args:
            return 0
        return int(await self._finalize(keys=[k.meta, k.results], args=args))

    async def end(
        self, batch_id: str, tenant: str, fields: dict[str, str], *, keep_due: bool = False
    ) -> None:
        """The batch ended: its status written, out of the due set (``keep_due``: not yet,
        its callback is still to be queued) and the open count."""
        k = self.keys(batch_id)
        async with self.redis.pipeline(transaction=False) as pipe:
            pipe.hset(k.meta, mapping=_mapping({**fields, "endedAt": str(now_ms())}))
            if not keep_due:
                pipe.zrem(BatchKeys.due(self.prefix), batch_id)
            pipe.srem(BatchKeys.open_of(self.prefix, tenant), batch_id)
            for key in k.all():
                pipe.expire(key, DEFAULT_RETENTION_S)
            await pipe.execute()


def _mapping(fields: dict[str, str]) -> dict[Any, Any]:
    """``fields`` as redis-py's ``hset`` types its mapping."""
    return dict(fields)


def _text(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)
