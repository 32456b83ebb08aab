"""CPU of one provider call: ``post_json`` through the shared client against ``reprompt sim``.

    .venv/bin/python bench/provider_call.py                       # this tree
    .venv/bin/python bench/provider_call.py --before /tmp/old     # and another, interleaved
    .venv/bin/python bench/provider_call.py --httpcore             # and httpx's own transport

One zero-latency simulator; per tree and round a fresh process (on uvloop, as the worker)
makes ``--calls`` chat-completion calls from ``--callers`` concurrent callers through
``make_client()`` and ``app.providers.transport.post_json`` (``--httpcore``: a column
more, this tree's ``post_json`` on a plain ``httpx.AsyncClient``, httpcore's pool), and
reports its own CPU time (``time.process_time``: user + system, all threads) per call,
after a warm-up. Trees alternate round by round so a busy machine slows both alike; it
prints the median over the rounds. The simulator's CPU is not counted: this is the
client's side of the call.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
from pathlib import Path
from typing import Any, Final

ROOT: Final = Path(__file__).resolve().parents[1]
BODY: Final = {
    "model": "sim-model",
    "messages": [
        {"role": "system", "content": "Answer with JSON matching the schema."},
        {"role": "user", "content": "Extract the person. Alice Smith is 30, alice@example.com"},
    ],
    "max_tokens": 256,
}


def child(url: str, calls: int, callers: int, plain: bool = False) -> dict[str, float]:
    """Runs in the measured process, with the tree under test first on ``sys.path``."""
    import asyncio
    import time

    import httpx
    import uvloop

    from app.providers.http import make_client
    from app.providers.transport import Edge, post_json

    edge = Edge("sim", "sim-model", ("sk-bench-0123456789",))
    headers = {"authorization": "Bearer sk-bench-0123456789"}
    target = httpx.URL(f"{url}/v1/chat/completions")  # parsed once, as the adapters do

    async def run(http: Any, n: int) -> None:
        left = n

        async def caller() -> None:
            nonlocal left
            while left > 0:
                left -= 1
                answer, _ = await post_json(
                    http, target, headers=headers, body=BODY, timeout_s=30.0, edge=edge
                )
                assert "choices" in answer

        await asyncio.gather(*(caller() for _ in range(callers)))

    def client() -> Any:
        if plain:  # httpx's default transport (httpcore), as many connections
            limits = httpx.Limits(max_connections=100, max_keepalive_connections=100)
            return httpx.AsyncClient(trust_env=False, limits=limits, timeout=30.0)
        return make_client(trust_env=False)

    async def main() -> dict[str, float]:
        async with client() as http:
            await run(http, max(calls // 10, callers * 4))  # warm-up: connections, code
            cpu, wall = time.process_time(), time.perf_counter()
            await run(http, calls)
            cpu, wall = time.process_time() - cpu, time.perf_counter() - wall
        return {"cpu_us": cpu / calls * 1e6, "calls_per_s": calls / wall}

    result: dict[str, float] = uvloop.run(main())
    return result


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--before", type=Path, help="another tree to measure alongside")
    parser.add_argument("--httpcore", action="store_true", help="and httpx's own transport")
    parser.add_argument("--calls", type=int, default=4000)
    parser.add_argument("--callers", type=int, default=32)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--child", help=argparse.SUPPRESS)  # the simulator's URL
    parser.add_argument("--root", type=Path, default=ROOT, help=argparse.SUPPRESS)
    parser.add_argument("--plain", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        sys.path.insert(0, str(args.root))
        print(json.dumps(child(args.child, args.calls, args.callers, args.plain)))
        return 0
    sys.path.insert(0, str(ROOT))
    from bench.common import Stack

    trees = {"now": ROOT} | ({"before": args.before} if args.before else {})
    trees |= {"httpcore": ROOT} if args.httpcore else {}
    results: dict[str, list[dict[str, float]]] = {name: [] for name in trees}
    with Stack() as stack:
        url = stack.sim().url
        for _ in range(args.rounds):
            for name, tree in trees.items():
                out = subprocess.run(
                    [sys.executable, __file__, "--child", url, "--root", str(tree),
                     "--calls", str(args.calls), "--callers", str(args.callers),
                     *(["--plain"] if name == "httpcore" else [])],
                    check=True, capture_output=True, text=True, cwd=tree, timeout=600,
                )  # fmt: skip
                results[name].append(json.loads(out.stdout.strip().splitlines()[-1]))
    print(f"{args.calls} calls, {args.callers} callers, {args.rounds} rounds (median)")
    for name, rows in results.items():
        cpu = statistics.median(row["cpu_us"] for row in rows)
        rate = statistics.median(row["calls_per_s"] for row in rows)
        spread = ", ".join(f"{row['cpu_us']:.0f}" for row in rows)
        print(f"  {name:>6}: {cpu:6.0f} us CPU/call   {rate:6.0f} calls/s   ({spread})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
