"""Auto-pipelining (app/store/batching.py) on the real redis-server: the commands of one
turn of the loop share one round trip, each keeps its own reply or error, a caller that
stops waiting costs the others nothing, a lost or silent connection fails what it owes,
and a store's scripts still load on a Redis that forgot them."""

from __future__ import annotations

import asyncio

import pytest
from redis.asyncio import Redis
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import ResponseError
from redis.exceptions import TimeoutError as RedisTimeoutError

from app.redis_server import EmbeddedRedis
from app.store.batching import MAX_BATCH, Batcher
from app.store.connection import connect
from tests.store.conftest import StoreFactory
from tests.store.test_heartbeats import blocked_clients


async def _connections_made(redis: Redis) -> int:
    return int((await redis.info("stats"))["total_connections_received"])


async def test_the_commands_of_one_turn_share_one_connection_and_round_trip(
    redis_server: EmbeddedRedis, prefix: str
) -> None:
    watcher = Redis.from_url(redis_server.url)
    fresh = Redis.from_url(redis_server.url)
    batcher = Batcher(fresh)
    try:
        before = await _connections_made(watcher)
        keys = [f"{prefix}:{i}" for i in range(3 * MAX_BATCH)]
        await asyncio.gather(*(batcher.call("SET", key, i) for i, key in enumerate(keys)))
        replies = await asyncio.gather(*(batcher.call("GET", key) for key in keys))
        made = await _connections_made(watcher) - before

        # Without batching, as many connections as commands at once (the pool grows).
        unbatched = Redis.from_url(redis_server.url)
        before_plain = await _connections_made(watcher)
        await asyncio.gather(*(unbatched.get(key) for key in keys[:50]))
        made_plain = await _connections_made(watcher) - before_plain
        await unbatched.aclose()
    finally:
        await batcher.aclose()
        await fresh.aclose()
        await watcher.aclose()

    assert replies == [str(i).encode() for i in range(len(keys))]  # each its own, in order
    assert made <= 3  # one connection per batch of MAX_BATCH, reused by the next turn's
    assert made_plain > 10  # unbatched, the pool grows with the commands at once


async def test_an_error_stays_with_its_command(redis: Redis, prefix: str) -> None:
    batcher = Batcher(redis)
    await redis.set(f"{prefix}:text", "x")
    replies: list[object] = await asyncio.gather(
        batcher.call("SET", f"{prefix}:a", 1),
        batcher.call("INCR", f"{prefix}:text"),  # not an integer
        batcher.call("GET", f"{prefix}:a"),
        return_exceptions=True,
    )
    await batcher.aclose()
    good, bad, other = replies
    assert good is True or good == b"OK"
    assert isinstance(bad, ResponseError)
    assert other == b"1"


async def test_a_caller_that_stops_waiting_leaves_the_others_their_replies(
    redis: Redis, prefix: str
) -> None:
    batcher = Batcher(redis)
    gone = asyncio.ensure_future(batcher.call("SET", f"{prefix}:gone", 1))
    kept = asyncio.ensure_future(batcher.call("INCRBY", f"{prefix}:kept", 5))
    await asyncio.sleep(0)  # both are queued; the batch goes at the end of this turn
    gone.cancel()
    assert await kept == 5
    with pytest.raises(asyncio.CancelledError):
        await gone
    await batcher.aclose()
    # The cancelled caller's command was sent all the same (as a reply lost on the way).
    assert await redis.get(f"{prefix}:gone") == b"1"


async def test_a_redis_that_forgot_the_scripts_loads_them_again(
    make_store: StoreFactory, redis: Redis
) -> None:
    store = make_store()
    view, created = await store.submit(tenant="t", spec={"task": "x"})
    assert created
    await redis.script_flush()
    second, created = await store.submit(tenant="t", spec={"task": "y"})
    assert created
    assert second.id != view.id
    assert [c.job_id for c in await store.claim("w", 5)] == [view.id, second.id]


async def test_a_lost_connection_fails_what_it_owes_and_the_next_call_opens_a_new_one(
    redis: Redis, redis_server: EmbeddedRedis, prefix: str
) -> None:
    client = connect(redis_server.url)  # the store's: a command is not sent again
    assert isinstance(client, Redis)
    batcher = Batcher(client)
    try:
        own_id = await batcher.call("CLIENT", "ID")
        waiting = asyncio.ensure_future(batcher.call("BLPOP", f"{prefix}:never", 10))
        await blocked_clients(redis, 1)
        assert await redis.client_kill_filter(_id=own_id) == 1

        with pytest.raises(RedisConnectionError):  # not a BLPOP sent again
            await asyncio.wait_for(waiting, 5)
        assert await batcher.call("INCRBY", f"{prefix}:n", 2) == 2  # on a new connection
        assert await batcher.call("CLIENT", "ID") != own_id
    finally:
        await batcher.aclose()
        await client.aclose()


async def test_a_connection_silent_past_the_socket_timeout_is_dropped(
    redis_server: EmbeddedRedis, prefix: str
) -> None:
    client = Redis.from_url(redis_server.url, socket_timeout=0.2)
    batcher = Batcher(client)
    try:
        with pytest.raises(RedisTimeoutError):  # BLPOP itself would answer nil after 5 s
            await batcher.call("BLPOP", f"{prefix}:never", 5)
        assert await batcher.call("PING") is True  # on a new connection (redis-py: PONG)
    finally:
        await batcher.aclose()
        await client.aclose()


async def test_closing_waits_for_the_commands_made_so_far(redis: Redis, prefix: str) -> None:
    batcher = Batcher(redis)
    made = [asyncio.ensure_future(batcher.call("INCR", f"{prefix}:n")) for _ in range(3)]
    await asyncio.sleep(0)  # the three calls are made (queued for the turn's end)
    await batcher.aclose()
    assert all(call.done() for call in made)
    assert sorted(call.result() for call in made) == [1, 2, 3]
