"""The store's Lua scripts (``app/store/lua``) on one Redis client, run by name::

    scripts = Scripts(redis)
    reply = await scripts.run("claim", [shard.queue], [worker_id, 8, ...])
    view = await scripts.call("HMGET", key, *fields)   # a read on the same way
    await scripts.aclose()

On a plain client the scripts and reads go auto-pipelined (``app.store.batching``); on a
cluster through redis-py one by one (a pipeline would span its nodes). A script Redis
does not know (a new or restarted server) is loaded, then run again.
"""

from __future__ import annotations

from collections.abc import Sequence
from functools import cache
from importlib import resources
from typing import Any, Final

from redis.asyncio import Redis
from redis.asyncio.cluster import RedisCluster
from redis.commands.core import AsyncScript
from redis.exceptions import NoScriptError

from app.store.batching import Batcher

SCRIPTS: Final = (
    "submit",
    "claim",
    "write",
    "complete",
    "heartbeat",
    "heartbeats",
    "release",
    "cancel",
    "reap",
    "stats",
    "pause",
    "outputs",
    "expire",
    "delivery_lease",
    "delivery_record",
    "delivery_redeliver",
)


class Scripts:
    """Every script of ``SCRIPTS`` on ``redis`` (not owned: its owner closes it)."""

    def __init__(self, redis: Redis | RedisCluster) -> None:
        self.redis = redis
        self._scripts: dict[str, AsyncScript] = {
            name: redis.register_script(script_source(name)) for name in SCRIPTS
        }
        self._batcher = Batcher(redis) if isinstance(redis, Redis) else None

    async def run(self, name: str, keys: Sequence[str], args: Sequence[str | int | float]) -> Any:
        """The reply of script ``name`` run on ``keys`` and ``args``."""
        script = self._scripts[name]
        batcher = self._batcher
        if batcher is None:
            return await script(keys=keys, args=args)
        command = ("EVALSHA", script.sha, len(keys), *keys, *args)
        try:
            return await batcher.call(*command)
        except NoScriptError:  # a new or restarted Redis: the script loads, then runs
            await batcher.call("SCRIPT", "LOAD", script.script)
            return await batcher.call(*command)

    async def call(self, *args: Any) -> Any:
        """The reply to a plain command (a job's read, ``TIME``), sent as the scripts are."""
        if self._batcher is None:
            return await self.redis.execute_command(*args)
        return await self._batcher.call(*args)

    async def aclose(self) -> None:
        """Wait for the commands on their way (the client stays open)."""
        if self._batcher is not None:
            await self._batcher.aclose()


@cache
def script_source(name: str) -> str:
    """Script ``name``'s Lua, as Redis runs it (its SHA1 is what EVALSHA names)."""
    lua = resources.files("app.store") / "lua"
    # outbox.lua first: common.lua's finish calls it.
    parts = ("outbox.lua", "common.lua", f"{name}.lua")
    return "\n".join((lua / part).read_text() for part in parts)
