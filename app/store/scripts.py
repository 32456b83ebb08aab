"""The store's Lua scripts (``app/store/lua``) on one Redis client::

    scripts = Scripts(redis)
    reply = await scripts.run(STATS, StatsKeys(ring=...), StatsArgs(...))  # app.store.protocol
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
from typing import Any, cast

from redis.asyncio import Redis
from redis.asyncio.cluster import RedisCluster
from redis.commands.core import AsyncScript
from redis.exceptions import NoScriptError

from app.store.batching import Batcher
from app.store.protocol import SCRIPTS, A, K, Script, Value


class Scripts:
    """Every script of ``SCRIPTS`` on ``redis`` (not owned: its owner closes it)."""

    def __init__(self, redis: Redis | RedisCluster) -> None:
        self.redis = redis
        self._scripts: dict[str, AsyncScript] = {
            script.name: redis.register_script(script_source(script.name)) for script in SCRIPTS
        }
        self._batcher = Batcher(redis) if isinstance(redis, Redis) else None

    async def run(self, script: Script[K, A], keys: K, args: A, tail: Sequence[Value] = ()) -> Any:
        """The reply of ``script`` run on ``keys`` and ``args`` (then ``tail``: ``Script.tail``)."""
        sent_keys, sent = keys.values(), args.values()
        if tail:
            sent += tuple(tail)
        lua = self._scripts[script.name]
        batcher = self._batcher
        if batcher is None:
            return await lua(keys=cast("tuple[str, ...]", sent_keys), args=sent)
        command = ("EVALSHA", lua.sha, len(sent_keys), *sent_keys, *sent)
        try:
            return await batcher.call(*command)
        except NoScriptError:  # a new or restarted Redis: the script loads, then runs
            await batcher.call("SCRIPT", "LOAD", lua.script)
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
