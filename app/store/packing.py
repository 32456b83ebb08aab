"""Commands encoded by hiredis (C) instead of redis-py's Python encoder.

redis-py's asyncio connections build each command's RESP bytes in Python, 11–14 µs for a
script call of a dozen arguments; ``hiredis.pack_command`` makes the same bytes in about
1.5 µs. The sync client has this switch, the asyncio one does not: these connection
classes add it, and ``use_hiredis(client)`` puts them in a client's pool(s) before it opens
any connection::

    redis = use_hiredis(Redis.from_url(url))

hiredis takes exactly ``str`` (as UTF-8), ``bytes``, ``int`` and ``float`` (``repr``, as
redis-py), and raises ``TypeError`` for anything else (``bool``, ``None``, a subclass such
as an ``IntEnum``, a ``memoryview``): those commands, and every command of a connection
whose encoding is not strict UTF-8, go through redis-py's own encoder, which makes the
same bytes or raises its ``DataError``.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Final, TypeVar, cast

from redis.asyncio import Redis
from redis.asyncio.cluster import RedisCluster
from redis.asyncio.connection import (
    AbstractConnection,
    Connection,
    SSLConnection,
    UnixDomainSocketConnection,
)
from redis.utils import HIREDIS_AVAILABLE

_pack: Callable[[tuple[Any, ...]], bytes] | None = None
if HIREDIS_AVAILABLE:  # a dependency (redis[hiredis]); without it, redis-py's encoder
    from hiredis import pack_command as _pack


class _HiredisPacking(AbstractConnection):
    """Packs with hiredis when it can (see the module's docstring)."""

    __slots__ = ()

    def pack_command(self, *args: Any) -> list[bytes]:
        if _pack is not None and _utf8_strict(self):
            command = args[0]
            # redis-py splits a command name given with its subcommand ("SCRIPT LOAD").
            if (type(command) is str and " " not in command) or (
                type(command) is bytes and b" " not in command
            ):
                try:
                    return [_pack(args)]
                except TypeError:
                    pass  # not one of hiredis's four types: redis-py's encoder decides
            elif type(command) is str:
                return self.pack_command(*command.encode().split(), *args[1:])
        packed: list[bytes] = super().pack_command(*args)
        return packed


class HiredisConnection(_HiredisPacking, Connection):
    __slots__ = ()


class HiredisSSLConnection(_HiredisPacking, SSLConnection):
    __slots__ = ()


class HiredisUnixConnection(_HiredisPacking, UnixDomainSocketConnection):
    __slots__ = ()


C = TypeVar("C", Redis, RedisCluster)
K = TypeVar("K", bound=AbstractConnection)

_FASTER: Final[dict[type[AbstractConnection], type[AbstractConnection]]] = {
    Connection: HiredisConnection,
    SSLConnection: HiredisSSLConnection,
    UnixDomainSocketConnection: HiredisUnixConnection,
}


def _utf8_strict(connection: AbstractConnection) -> bool:
    encoder = connection.encoder
    return encoder.encoding.lower() in ("utf-8", "utf8") and encoder.encoding_errors == "strict"


def faster(connection_class: type[K]) -> type[K]:
    """The hiredis-packing class for one of redis-py's own; any other class as it is."""
    return cast("type[K]", _FASTER.get(connection_class, connection_class))


def use_hiredis(client: C) -> C:
    """``client`` with its connections packing commands with hiredis. Call it before the
    client opens a connection (the classes of open ones are not changed)."""
    if isinstance(client, RedisCluster):
        # Nodes are made from the manager's kwargs; the startup nodes were made already.
        kwargs = client.nodes_manager.connection_kwargs
        kwargs["connection_class"] = faster(kwargs.get("connection_class", Connection))
        for node in client.nodes_manager.startup_nodes.values():
            node.connection_class = faster(node.connection_class)
    else:
        pool = client.connection_pool
        pool.connection_class = faster(pool.connection_class)
    return client
