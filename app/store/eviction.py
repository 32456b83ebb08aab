"""The Redis server's eviction policy, read once at start-up: a server that may evict keys
without a TTL would drop queued and running jobs without a word.

    policy = await eviction_policy(redis)   # "noeviction"; None when it cannot be read
    warning = judge(policy)                 # raises EvictingRedis for allkeys-*

What each policy means for the store, whose only keys with a TTL are finished jobs (their
record, turns and events, for ``retention_s``) and Idempotency-Keys:

* ``noeviction``: nothing is ever evicted; a full server refuses writes. Accepted.
* ``volatile-*``: only keys with a TTL are evicted, so finished jobs may go before their
  retention ends and an Idempotency-Key before its TTL (a replay then makes a new job).
  Queued and running jobs are safe. Accepted with a warning: it is the default of most
  managed Redis offerings.
* ``allkeys-*``: any key, a queued job or a lease included. Refused.
"""

from __future__ import annotations

import asyncio
from typing import Any, Final

from redis.asyncio.cluster import ClusterNode, RedisCluster
from redis.exceptions import RedisError

from app.core.wire.errors import RepromptError
from app.store.connection import RedisClient

POLICY: Final = "maxmemory-policy"
SAFE: Final = "noeviction"
READ_TIMEOUT_S: Final = 5.0


class EvictingRedis(RepromptError):
    """The Redis server may evict any key (``maxmemory-policy allkeys-*``): refused at
    start-up, before a job is lost."""


async def eviction_policy(redis: RedisClient, *, timeout_s: float = READ_TIMEOUT_S) -> str | None:
    """``CONFIG GET maxmemory-policy``, else ``INFO memory``'s ``maxmemory_policy`` (managed
    Redis often disables CONFIG); ``None`` when neither answers. On a cluster, every
    master's, and the least safe of them (both commands ask one node by default)."""
    try:
        async with asyncio.timeout(timeout_s):
            if isinstance(redis, RedisCluster):
                await redis.initialize()
                policies = [await _policy(redis, node) for node in redis.get_primaries()]
                return max(policies, key=_risk) if policies else None
            return await _policy(redis)
    except TimeoutError:
        return None


async def _policy(redis: RedisClient, node: ClusterNode | None = None) -> str | None:
    target: dict[str, Any] = {} if node is None else {"target_nodes": node}
    try:
        config = await redis.config_get(POLICY, **target)
    except RedisError:
        config = {}
    policy = _text(_get(config, POLICY))
    if policy is None:
        try:
            info = await redis.info("memory", **target)
        except RedisError:
            info = {}
        policy = _text(_get(info, "maxmemory_policy"))
    return policy


def _risk(policy: str | None) -> int:
    """How much a policy may lose, to pick a cluster's worst master (``judge``'s order)."""
    if policy is None:
        return 2
    if policy.startswith("allkeys-"):
        return 3
    if policy.startswith("volatile-") or policy != SAFE:
        return 1
    return 0


def judge(policy: str | None) -> str | None:
    """A warning to log for ``policy`` (``None``: all is well); ``EvictingRedis`` when the
    server may evict live jobs."""
    if policy is None:
        return (
            f"could not read the Redis server's {POLICY} (CONFIG GET and INFO memory both "
            f"failed); make sure it is {SAFE}: any allkeys-* policy evicts queued jobs"
        )
    if policy.startswith("allkeys-"):
        raise EvictingRedis(
            f"the Redis server's {POLICY} is {policy}: when it fills up it evicts any key, "
            f"queued and running jobs included. Set {POLICY} {SAFE} (CONFIG SET {POLICY} "
            f"{SAFE}, or your provider's parameter group; volatile-* is accepted too: it "
            "evicts only finished jobs and Idempotency-Keys)"
        )
    if policy.startswith("volatile-"):
        return (
            f"the Redis server's {POLICY} is {policy}: when it fills up, finished jobs and "
            f"Idempotency-Keys may be evicted before their TTL; {SAFE} keeps them"
        )
    if policy != SAFE:
        return f"unknown {POLICY} {policy!r}; reprompt expects {SAFE}"
    return None


def _get(mapping: Any, key: str) -> Any:
    if not isinstance(mapping, dict):
        return None
    return mapping.get(key, mapping.get(key.encode()))


def _text(value: Any) -> str | None:
    if isinstance(value, bytes):
        value = value.decode(errors="replace")
    return value.strip().lower() if isinstance(value, str) and value.strip() else None
