"""A batch's callback (#30): its one delivery, queued in the jobs' callback outbox when the
batch ends, and read back for ``GET /v1/batches/{id}``.

    callbacks = BatchCallbacks(redis, prefix="rp")
    await callbacks.queue(batch_id, tenant=t, callback={"url": u, "events": [...]},
                          event="completed")      # once per event, however often called
    await callbacks.deliveries(batch_id)           # (BatchDelivery, ...)

The delivery is a small hash on shard 0 (``BatchKeys.callback_shard``) holding what the
outbox's scripts read of a job (``tenant``, ``callback``, ``cb:<event>``), so the workers'
one sender (``app/worker/callbacks.py``) leases, signs, retries and records it as it does
a job's: at least once, fair between tenants, within the same retry window.
"""

from __future__ import annotations

import json
from typing import Any, Final, cast

from app.core.wire.batch import BATCH_EVENTS, BatchDelivery, BatchEvent, iso
from app.core.wire.callback import message_id
from app.core.wire.spec import CallbackEvent
from app.store.connection import RedisClient
from app.store.keys import BatchKeys, Keys

# KEYS: the delivery's hash, the shard's outbox; ARGV: batch id, event, tenant, callback
# json, ttl s, the outbox channel. A delivery already queued for the event is left alone.
_QUEUE: Final = """
local hash, outbox = KEYS[1], KEYS[2]
local id, event, tenant, callback, ttl, channel = unpack(ARGV)
if redis.call('HEXISTS', hash, 'cb:' .. event) == 1 then
  return 0
end
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local state = cjson.encode({state = 'pending', attempts = 0, since = now, created = now,
  due = now, pause = 0})
redis.call('HSET', hash, 'tenant', tenant, 'callback', callback, 'cb:' .. event, state)
redis.call('EXPIRE', hash, tonumber(ttl))
redis.call('ZADD', outbox, now, id .. ' ' .. event)
redis.call('PUBLISH', channel, id)
return 1
"""


def webhook_id(batch_id: str, event: BatchEvent) -> str:
    """The ``webhook-id`` of the batch's end, as the sender signs it (a job's scheme)."""
    return message_id(batch_id, cast(CallbackEvent, event))


class BatchCallbacks:
    def __init__(self, redis: RedisClient, *, prefix: str, retention_s: int) -> None:
        self.redis = redis
        self.shard = BatchKeys.callback_shard(prefix)
        self.channel = Keys(prefix).channel("outbox")
        self.retention_s = retention_s
        self._queue = redis.register_script(_QUEUE)

    async def queue(
        self, batch_id: str, *, tenant: str, callback: dict[str, Any], event: BatchEvent
    ) -> bool:
        """The delivery of ``event``, due now, unless it was queued before."""
        args: list[str | int] = [
            batch_id,
            event,
            tenant,
            json.dumps(callback),
            self.retention_s,
            self.channel,
        ]
        keys = [self.shard.job(batch_id), self.shard.outbox]
        return bool(await self._queue(keys=keys, args=args))

    async def deliveries(self, batch_id: str) -> tuple[BatchDelivery, ...]:
        fields = [f"cb:{event}" for event in BATCH_EVENTS]
        raw = await self.redis.hmget(self.shard.job(batch_id), fields)
        return tuple(
            _delivery(batch_id, event, json.loads(found))
            for event, found in zip(BATCH_EVENTS, raw, strict=True)
            if found is not None
        )


def _delivery(batch_id: str, event: BatchEvent, d: dict[str, Any]) -> BatchDelivery:
    def moment(name: str) -> str | None:
        value = d.get(name)
        return None if value is None else iso(int(value))

    return BatchDelivery(
        event=event,
        state=d["state"],
        webhook_id=webhook_id(batch_id, event),
        attempts=int(d.get("attempts") or 0),
        created_at=iso(int(d["created"])),
        last_attempt_at=moment("last"),
        last_status=None if d.get("status") is None else int(d["status"]),
        last_error=d.get("error"),
        next_attempt_at=moment("due") if d["state"] == "pending" else None,
        delivered_at=moment("delivered"),
    )
