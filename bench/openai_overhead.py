"""The OpenAI-compatible front door's overhead: the simulator called directly vs through
``POST /v1/chat/completions``, both through the official ``openai`` Python SDK.

    .venv/bin/python bench/openai_overhead.py            # c = 1, 8, 32; 300 calls a cell
    .venv/bin/python bench/openai_overhead.py --quick    # smoke check

The same simulator process (a perfect model: every answer valid, so every job is one
turn, at 0 ms latency) gets the same structured request (a ``json_schema`` response
format) from ``AsyncOpenAI`` clients, one per caller, closed loop:

- **direct**: ``base_url`` the simulator;
- **reprompt**: ``base_url`` one ``reprompt serve`` process (API + in-process worker, its
  embedded redis-server), the request a job.

``added p50`` = p50(reprompt) − p50(direct); ``× calls/s`` = reprompt ÷ direct; ``CPU
ms/call`` = utime+stime of the reprompt process and its redis-server over the cell ÷
calls. Writes docs/benchmarks/openai-overhead.md.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import openai

from bench.common import (
    DOCS,
    Stack,
    machine,
    page_end,
    percentile,
    raise_fd_limit,
    run_closed_loop,
    total_cpu,
    with_notes,
)

SCHEMA = {
    "type": "object",
    "properties": {
        "name": {"type": "string"},
        "age": {"type": "integer"},
        "email": {"type": "string"},
    },
    "required": ["name", "age", "email"],
    "additionalProperties": False,
}
FORMAT: Any = {
    "type": "json_schema",
    "json_schema": {"name": "person", "strict": True, "schema": SCHEMA},
}
MESSAGES: Any = [
    {"role": "system", "content": "Extract the person."},
    {"role": "user", "content": "Alice Smith is 30 years old; write to alice@example.com."},
]
OUT = DOCS / "openai-overhead.md"
NOTES = Path(__file__).with_name("openai_overhead_notes.md")


async def cell(base_url: str, n: int, concurrency: int) -> dict[str, Any]:
    clients = [
        openai.AsyncOpenAI(base_url=f"{base_url}/v1", api_key="bench", max_retries=0)
        for _ in range(concurrency)
    ]
    turn = iter(range(10**9))

    async def call(i: int) -> bool:
        client = clients[next(turn) % concurrency]
        try:
            completion = await client.chat.completions.create(
                model="sim-model", messages=MESSAGES, response_format=FORMAT
            )
        except openai.APIError:  # counted as a failure (the "fails" column)
            return False
        return bool(json.loads(completion.choices[0].message.content or "null"))

    for i in range(max(concurrency, 4)):  # warm-up, not counted
        await call(i)
    wall, latencies, fails = await run_closed_loop(call, n, concurrency)
    for client in clients:
        await client.close()
    return {
        "n": n,
        "fails": fails,
        "calls_s": n / wall,
        "p50": percentile(latencies, 0.5) * 1000,
        "p99": percentile(latencies, 0.99) * 1000,
        "wall": wall,
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("-n", type=int, default=300, help="calls per cell")
    args = parser.parse_args()
    raise_fd_limit()
    levels = [1, 8] if args.quick else [1, 8, 32]
    n = 60 if args.quick else args.n
    started = time.perf_counter()
    rows: list[dict[str, Any]] = []
    with Stack() as stack:
        sim = stack.sim()
        redis_url, redis_pid = stack.redis()
        env = stack.env(sim.url, redis_url, REPROMPT_WORKER_CONCURRENCY=64)
        srv = stack.service("serve", env)
        pids = [*srv.pids(), redis_pid]
        for c in levels:
            direct = asyncio.run(cell(sim.url, n, c))
            before = total_cpu(pids)
            through = asyncio.run(cell(srv.url, n, c))
            cpu = (total_cpu(pids) - before) / n * 1000
            rows.append({"c": c, "direct": direct, "reprompt": through, "cpu": cpu})
            print(f"c={c} direct {direct} reprompt {through} cpu {cpu:.2f} ms/call", flush=True)
    write(rows, time.perf_counter() - started, args.quick)
    return 0


def write(rows: list[dict[str, Any]], elapsed: float, quick: bool) -> None:
    how = " --quick" if quick else f" -n {rows[0]['reprompt']['n']}"
    lines = [
        "# Overhead of the OpenAI-compatible front door",
        "",
        f"Produced by `python bench/openai_overhead.py{how}` "
        f"(took {elapsed:.0f} s) on a shared, noisy 2-core machine (other work ran beside "
        "it): read ratios and medians, not absolutes.",
        "",
        "Both sides through the official `openai` Python SDK (`AsyncOpenAI`, one client per "
        "caller, closed loop, a warm-up not counted): **direct** to the simulator (a "
        "perfect model at 0 ms), **reprompt** to `POST /v1/chat/completions` on one "
        "`reprompt serve` process (API + in-process worker + its redis-server), the same "
        "`json_schema` request, which becomes a one-turn job. The load generator (the SDK "
        "parses every answer with pydantic, about 1 ms of CPU a call) shares the two cores.",
        "",
        "| c | n | fails | direct calls/s | reprompt calls/s | × calls/s | direct p50 ms "
        "| reprompt p50 ms | added p50 ms | reprompt p99 ms | CPU ms/call |",
        "|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for row in rows:
        d, r = row["direct"], row["reprompt"]
        lines.append(
            f"| {row['c']} | {r['n']} | {d['fails'] + r['fails']} | {d['calls_s']:.1f} "
            f"| {r['calls_s']:.1f} | {r['calls_s'] / d['calls_s']:.2f} | {d['p50']:.1f} "
            f"| {r['p50']:.1f} | {r['p50'] - d['p50']:+.1f} | {r['p99']:.1f} "
            f"| {row['cpu']:.2f} |"
        )
    lines += [
        "",
        "The goal (issue 34): added p50 ≤ 3 ms and ≥ 0.6× direct calls/s at 32 callers. "
        "For comparison, `/v1/generate` through the lean load generator "
        "([overhead](overhead.md)): +9.2 ms added p50 and 0.91× at 32 callers (serve, 0 ms).",
        "",
        *page_end(machine()),
    ]
    text = with_notes("\n".join(lines) + "\n", NOTES, quick=quick)
    OUT.write_text(text, encoding="utf-8")


if __name__ == "__main__":
    raise SystemExit(main())
