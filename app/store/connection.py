"""What both store roles share: the Redis client, the key layout, the Lua scripts, options.

redis = connect(url)                        # one pool per process, closed on shutdown
options = StoreOptions(prefix="rp", lease_ms=30_000)
jobs, leases = JobStore(redis, options), Leases(redis, options)
"""

from __future__ import annotations

import inspect
import json
from collections.abc import Sequence
from dataclasses import dataclass
from functools import cache
from importlib import resources
from typing import Any, Final

from redis.asyncio import Redis
from redis.commands.core import AsyncScript

from app.core.envelope import Envelope
from app.store.keys import Keys
from app.store.records import JobView, job_view

# Wake tokens kept at most; more would only wake workers for nothing.
WAKE_CAP: Final = 1024
SCRIPTS: Final = (
    "submit",
    "claim",
    "heartbeat",
    "event",
    "turn",
    "complete",
    "release",
    "cancel",
    "reap",
    "queue_stats",
)


@dataclass(frozen=True, slots=True)
class StoreOptions:
    prefix: str = "rp"
    lease_ms: int = 30_000
    max_attempts: int = 3
    retention_s: int = 604_800
    idempotency_ttl_s: int = 86_400
    max_queued: int = 10_000
    events_maxlen: int = 10_000

    def __post_init__(self) -> None:
        if (
            self.lease_ms <= 0
            or self.max_attempts < 1
            or self.retention_s < 1
            or self.idempotency_ttl_s < 1
        ):
            raise ValueError("lease_ms, max_attempts, retention_s, idempotency_ttl_s must be > 0")


def connect(url: str, *, max_connections: int = 1_000, socket_timeout_s: float = 30.0) -> Redis:
    """The one Redis client (and pool) of a process, sized for the store's blocking calls.

    Every concurrent ``wait``, ``events`` and ``wait_for_work`` holds a connection while it
    blocks, so the pool must be larger than redis-py's default of 100. Close it with
    ``await redis.aclose()`` on shutdown.
    """
    return Redis.from_url(
        url,
        max_connections=max_connections,
        socket_timeout=socket_timeout_s,
        socket_connect_timeout=5.0,
        socket_keepalive=True,
        health_check_interval=30,
    )


class Role:
    """The base of ``JobStore`` (API side) and ``Leases`` (worker side).

    ``redis`` is injected and owned by the caller (who closes it). Blocking calls are cut to
    80 % of the connections' ``socket_timeout`` (they return early, never time out).
    """

    def __init__(self, redis: Redis, options: StoreOptions | None = None, **fields: Any) -> None:
        self.options = options or StoreOptions(**fields)
        self._redis = redis
        self.keys = Keys(self.options.prefix)
        self._scripts = {name: redis.register_script(_script_source(name)) for name in SCRIPTS}
        self._queued_result = Envelope.in_progress().model_dump_json()

    async def _run(self, name: str, keys: Sequence[str], args: Sequence[str | int]) -> Any:
        script: AsyncScript = self._scripts[name]
        return await script(keys=keys, args=args)

    def _block_ms(self, wanted_ms: int) -> int:
        """``wanted_ms``, cut below the pool's socket timeout so a block never trips it."""
        timeout = _socket_timeout(self._redis)
        if timeout:
            return max(1, min(wanted_ms, int(timeout * 800)))
        return wanted_ms

    async def _read(self, job_ids: Sequence[str]) -> list[JobView | None]:
        """Each job with its turns and newest event id, in one atomic round trip."""
        async with self._redis.pipeline(transaction=True) as pipe:
            for job_id in job_ids:
                pipe.hgetall(self.keys.job(job_id))
                pipe.lrange(self.keys.turns(job_id), 0, -1)
                pipe.xrevrange(self.keys.events(job_id), count=1)
            replies = await pipe.execute()
        return [
            job_view(replies[i], replies[i + 1], replies[i + 2]) for i in range(0, len(replies), 3)
        ]


@cache
def _script_source(name: str) -> str:
    lua = resources.files("app.store") / "lua"
    return (lua / "common.lua").read_text() + "\n" + (lua / f"{name}.lua").read_text()


def _socket_timeout(redis: Redis) -> float | None:
    """The read timeout of the client's connections (redis-py 8 defaults it to 5 s)."""
    pool = getattr(redis, "connection_pool", None)
    options = getattr(pool, "connection_kwargs", {})
    if "socket_timeout" in options:
        timeout = options["socket_timeout"]
    else:
        # Not given: the default of whichever class in the connection's MRO declares it.
        timeout = None
        for klass in getattr(getattr(pool, "connection_class", None), "__mro__", ()):
            parameter = inspect.signature(klass.__init__).parameters.get("socket_timeout")
            if parameter is not None:
                timeout = parameter.default
                break
    return float(timeout) if isinstance(timeout, int | float) and timeout > 0 else None


def dumps(value: Any) -> str:
    return json.dumps(value, separators=(",", ":"), ensure_ascii=False)
