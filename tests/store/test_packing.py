"""Commands packed by hiredis (app/store/packing.py): the bytes redis-py would send, or
redis-py's own encoder for what hiredis does not take; and every client ``connect`` makes
uses it, against the real redis-server."""

from __future__ import annotations

import enum
from typing import Any, cast

import pytest
from redis.asyncio import Redis
from redis.asyncio.connection import Connection, UnixDomainSocketConnection
from redis.exceptions import DataError

from app.redis_server import EmbeddedRedis
from app.store import JobStore, Leases
from app.store.connection import connect
from app.store.packing import HiredisConnection, HiredisUnixConnection, faster


class Level(enum.IntEnum):
    HIGH = 3


SAME: list[tuple[Any, ...]] = [
    ("GET", "k"),
    ("SET", b"k", "v", "EX", 10),
    ("EVALSHA", "a" * 40, 2, "rp:{s0-1}:job:x", "rp:{s0-1}:leases", "x" * 20_000, "", 0, -7),
    ("X", 1.5, 0.1, 1e20, 1e-7, 3.0, float("inf"), -0.0, 2**70),
    ("X", "é☃", "\U0001f600", b"\xff\x00"),
    ("SCRIPT LOAD", "return 1"),  # a subcommand in the name: split, as redis-py does
    (b"CONFIG GET", "maxmemory"),
    ("X", memoryview(b"ab"), bytearray(b"cd")),  # not hiredis's: redis-py's encoder
    ("X", Level.HIGH),  # an int subclass: redis-py's repr, not hiredis's int
]


def packed(connection: Connection, *args: Any) -> bytes:
    return b"".join(bytes(chunk) for chunk in connection.pack_command(*args))


def outcome(connection: Connection, *args: Any) -> bytes | str:
    """The packed bytes, or the refusal (redis-py before 8.0 refuses a memoryview)."""
    try:
        return packed(connection, *args)
    except DataError as refused:
        return str(refused)


@pytest.mark.parametrize("args", SAME, ids=range(len(SAME)))
def test_hiredis_packs_the_bytes_redis_py_packs(args: tuple[Any, ...]) -> None:
    assert outcome(HiredisConnection(), *args) == outcome(Connection(), *args)


@pytest.mark.parametrize("value", [True, None, [1]])
def test_what_redis_py_refuses_is_refused_the_same_way(value: object) -> None:
    with pytest.raises(DataError):
        HiredisConnection().pack_command("SET", "k", value)


def test_a_connection_with_another_encoding_keeps_redis_pys_encoder() -> None:
    args = ("SET", "k", "é")
    fast = HiredisConnection(encoding="latin-1")
    assert packed(fast, *args) == packed(Connection(encoding="latin-1"), *args)
    assert packed(fast, *args) != packed(HiredisConnection(), *args)


def test_only_redis_pys_own_classes_are_replaced() -> None:
    class Own(Connection):
        pass

    assert faster(Connection) is HiredisConnection
    assert faster(UnixDomainSocketConnection) is HiredisUnixConnection
    assert faster(Own) is Own


async def test_every_client_connect_makes_packs_with_hiredis_and_round_trips(
    redis_server: EmbeddedRedis, prefix: str
) -> None:
    plain = cast(Redis, connect(redis_server.url))
    queued = cast(Redis, connect(redis_server.url, queue_s=1.0))
    try:
        for client in (plain, queued):
            assert client.connection_pool.connection_class is HiredisConnection
            value = "é☃\U0001f600" + "x" * 100_000
            await client.set(f"{prefix}:k", value)
            assert cast(bytes, await client.get(f"{prefix}:k")).decode() == value
            assert await client.incrbyfloat(f"{prefix}:f", 0.1) == pytest.approx(0.1)
            async with client.pipeline(transaction=True) as pipe:
                pipe.incr(f"{prefix}:n")
                pipe.incr(f"{prefix}:n", 2)
                pipe.hset(f"{prefix}:h", mapping={"a": 1, "b": b"\x00\xff"})
                assert await pipe.execute() == [1, 3, 2]
            assert await client.hgetall(f"{prefix}:h") == {b"a": b"1", b"b": b"\x00\xff"}
            script = client.register_script("return ARGV[1] .. ARGV[2]")
            assert await script(keys=[f"{prefix}:k"], args=["é", 7]) == "é7".encode()
            await client.delete(f"{prefix}:k", f"{prefix}:f", f"{prefix}:n", f"{prefix}:h")
            # The pool's connections are the class that was put in before any opened.
            connection = cast(Any, client.connection_pool).make_connection()
            assert isinstance(connection, HiredisConnection)
            await connection.disconnect()
        # Both roles over a hiredis client: the store's scripts and pub/sub work.
        jobs, leases = JobStore(plain, prefix=prefix), Leases(queued, prefix=prefix)
        try:
            view, _ = await jobs.submit(tenant="acme", spec={"task": "é", "signature": "a: str"})
            [claim] = await leases.claim("w1")
            assert claim.job_id == view.id
            assert claim.spec["task"] == "é"
        finally:
            await jobs.aclose()
            await leases.aclose()
    finally:
        await plain.aclose()
        await queued.aclose()
