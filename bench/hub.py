"""The store's pub/sub subscription alone: CPU per message a ``Hub`` hears.

    .venv/bin/python bench/hub.py                       # this tree's Hub
    .venv/bin/python bench/hub.py --before /tmp/before  # and another tree's, interleaved

One redis-server (``EmbeddedRedis``); per round and tree, a process of its own (the
tree's ``app`` first on ``sys.path``) subscribes a ``Hub`` with one listener, and another
process publishes ``--messages`` job ids, eight to a pipeline, as an API's workers would.
It prints the median over the rounds of the subscriber's CPU per message (from
``time.process_time``, publisher not included). It judges nothing.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.common import ROOT, Stack

CHILD = """
import asyncio, sys, time
import uvloop
from app.store.connection import connect
from app.store.hub import Hub

URL, N = sys.argv[1], int(sys.argv[2])
PUBLISH = '''
import sys, time, redis
r = redis.Redis.from_url(sys.argv[1])
pipe = r.pipeline(transaction=False)
for i in range(int(sys.argv[2])):
    pipe.publish("bench:hub", "job_%d" % i)
    if i % 8 == 7:
        pipe.execute()
        time.sleep(0.0002)
pipe.execute()
'''

async def main():
    client = connect(URL)
    hub = Hub(client, ["bench:hub"])
    heard, done = [0], asyncio.Event()
    def listener(key, payload):
        heard[0] += 1
        if heard[0] >= N:
            done.set()
    hub.listen("bench:hub", listener)
    await hub.start()
    started = time.process_time()
    publisher = await asyncio.create_subprocess_exec(sys.executable, "-c", PUBLISH, URL, str(N))
    await publisher.wait()
    await asyncio.wait_for(done.wait(), 120)
    print((time.process_time() - started) / N * 1e6)
    await hub.close()
    await client.aclose()

uvloop.run(main())
"""


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--before", type=Path, help="another source tree, measured alike")
    parser.add_argument("--messages", type=int, default=20_000)
    parser.add_argument("--rounds", type=int, default=5)
    ns = parser.parse_args()
    trees = {"now": ROOT}
    if ns.before is not None:
        trees = {"before": ns.before.resolve(), **trees}
    samples: dict[str, list[float]] = {name: [] for name in trees}
    with Stack() as stack:
        url, _pid = stack.redis()
        for _ in range(ns.rounds):
            for name, tree in trees.items():
                env = {**os.environ, "PYTHONPATH": str(tree)}
                out = subprocess.run(
                    [sys.executable, "-c", CHILD, url, str(ns.messages)],
                    env=env,
                    cwd=tree,  # ``-c`` puts the working directory first on sys.path
                    capture_output=True,
                    text=True,
                    check=True,
                )
                samples[name].append(float(out.stdout.strip()))
    print("| tree | subscriber µs/message |")
    print("|---|---:|")
    for name, values in samples.items():
        print(f"| {name} | {statistics.median(values):.1f} |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
