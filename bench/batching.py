"""The store's way to Redis alone: CPU per script call, caller and redis-server.

    .venv/bin/python bench/batching.py                       # this tree's options
    .venv/bin/python bench/batching.py --before /tmp/before  # and that tree's Batcher

One redis-server (``EmbeddedRedis``), the store's client (``connect``), *c* callers on
uvloop each running ``EVALSHA`` of a one-line script (an ``HGET``) in a loop, through:

- **plain**: ``redis.execute_command`` (redis-py's pool, one command a round trip);
- **pipeline-N**: this tree's ``Batcher`` (each turn's commands as one redis-py pipeline,
  at most N on their way);
- **before**: the ``Batcher`` of another tree (``--before``), loaded from its file.

Per cell, rounds interleave the ways (a busy machine slows all alike); the medians over
the rounds of the caller's CPU per call (``time.process_time``) and redis-server's (from
/proc), in µs, and the calls per second. It judges nothing: the end-to-end figures are
bench/ab.py's (the same ways in whole deployments).
"""

from __future__ import annotations

import argparse
import asyncio
import importlib.util
import statistics
import sys
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import uvloop

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from app.store.batching import Batcher
from app.store.connection import connect
from bench.common import Stack, cpu_seconds

SCRIPT = "return redis.call('HGET', KEYS[1], ARGV[1])"
Call = Callable[..., Awaitable[Any]]


def _load_batcher(tree: Path) -> type[Any]:
    """``Batcher`` of the ``app/store/batching.py`` in ``tree``, under a name of its own."""
    spec = importlib.util.spec_from_file_location(
        "before_batching", tree / "app" / "store" / "batching.py"
    )
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.Batcher  # type: ignore[no-any-return]


async def _run(call: Call, sha: str, callers: int, calls: int) -> float:
    async def caller(i: int) -> None:
        for _ in range(calls // callers):
            await call("EVALSHA", sha, 1, "bench:h", "f")

    started = time.perf_counter()
    await asyncio.gather(*(caller(i) for i in range(callers)))
    return time.perf_counter() - started


async def _cell(
    url: str, redis_pid: int, ways: dict[str, Any], callers: int, calls: int, rounds: int
) -> dict[str, dict[str, float]]:
    client = connect(url)
    await client.hset("bench:h", "f", "v")
    sha = await client.script_load(SCRIPT)
    made: dict[str, Call] = {}
    batchers = []
    for name, make in ways.items():
        if make is None:
            made[name] = client.execute_command
        else:
            batcher = make(client)
            batchers.append(batcher)
            made[name] = batcher.call
    for call in made.values():  # warm: connections open, the script cached
        await _run(call, sha, callers, callers * 20)
    samples: dict[str, dict[str, list[float]]] = {n: {} for n in made}
    for _ in range(rounds):
        for name, call in made.items():
            cpu, server = time.process_time(), cpu_seconds(redis_pid)
            wall = await _run(call, sha, callers, calls)
            cell = samples[name]
            cell.setdefault("caller_us", []).append((time.process_time() - cpu) / calls * 1e6)
            cell.setdefault("redis_us", []).append((cpu_seconds(redis_pid) - server) / calls * 1e6)
            cell.setdefault("calls_s", []).append(calls / wall)
    for batcher in batchers:
        await batcher.aclose()
    await client.aclose()
    return {n: {k: statistics.median(v) for k, v in cell.items()} for n, cell in samples.items()}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--before", type=Path, help="a tree whose Batcher to measure too")
    parser.add_argument("--callers", default="1,8,32", help="comma-separated (default 1,8,32)")
    parser.add_argument("--calls", type=int, default=20_000, help="per round and way")
    parser.add_argument("--rounds", type=int, default=5)
    ns = parser.parse_args()
    ways: dict[str, Any] = {"plain": None}
    ways["pipeline-1"] = Batcher
    ways["pipeline-64"] = lambda client: Batcher(client, at_once=64)
    if ns.before is not None:
        ways["before"] = _load_batcher(ns.before.resolve())
    print("| c | way | caller µs/call | redis µs/call | calls/s |")
    print("|---:|---|---:|---:|---:|")
    with Stack() as stack:
        url, pid = stack.redis()
        for c in (int(x) for x in ns.callers.split(",")):
            cell = uvloop.run(_cell(url, pid, ways, c, ns.calls, ns.rounds))
            for name, m in cell.items():
                print(
                    f"| {c} | {name} | {m['caller_us']:.1f} | {m['redis_us']:.1f}"
                    f" | {m['calls_s']:.0f} |"
                )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
