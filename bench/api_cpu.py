"""CPU of the ``reprompt api`` process alone per job, this tree against another, interleaved.

    .venv/bin/python bench/api_cpu.py --before /tmp/old            # git archive REV | tar -x
    .venv/bin/python bench/api_cpu.py --before /tmp/old --rounds 5 --jobs 400 --callers 1,16

The split deployment of bench/overhead.py for each tree (a redis-server, one ``reprompt
api``, two ``reprompt worker``) on one zero-latency simulator; per round, path and number
of callers, each tree runs the same closed loop in turn: single-turn jobs by ``POST
/v1/jobs`` then ``GET /v1/jobs/{id}?waitMs=`` (**jobs**) or by ``POST /v1/generate?waitMs=``
(**generate**). It prints, per cell and tree, the median over the rounds of the API
process's utime+stime (``/proc/<pid>/stat``) per job, each round's figure, and jobs/s.
bench/guard.py measures the whole deployment (API, workers and Redis) the same way.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import statistics
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.common import ROOT, Stack, client, cpu_seconds, raise_fd_limit, run_closed_loop
from bench.overhead import deploy, generate_call, jobs_call


async def api_cpu_per_job(
    path: str, url: str, jobs: int, callers: int, pid: int
) -> tuple[float, float]:
    """(API CPU ms per job, jobs/s) over ``jobs`` jobs by ``callers`` closed-loop callers."""
    async with contextlib.AsyncExitStack() as stack:
        http = [await stack.enter_async_context(client(8)) for _ in range(max(1, callers // 8))]
        call = jobs_call(http, url) if path == "jobs" else generate_call(http, url)
        await run_closed_loop(call, max(callers, 4), callers)  # warm-up
        before = cpu_seconds(pid)
        wall, _, fails = await run_closed_loop(call, jobs, callers)
        used = cpu_seconds(pid) - before
    if fails:
        raise SystemExit(f"{fails} failed {path} calls at c={callers}")
    return used / jobs * 1000, jobs / wall


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--before", type=Path, required=True, help="the other source tree")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--jobs", type=int, default=400, help="per cell and round")
    parser.add_argument("--callers", default="1,16", help="comma-separated")
    parser.add_argument("--paths", default="jobs,generate", help="jobs, generate or both")
    ns = parser.parse_args()
    raise_fd_limit()
    trees = {"before": ns.before.resolve(), "now": ROOT}
    cells: dict[tuple[str, int, str], list[tuple[float, float]]] = {}
    with Stack() as stack:
        sim = stack.sim(latency_ms=0, jitter_ms=0, seed=1)
        apis = {}
        for name, code in trees.items():
            stack.code = code
            url, procs, _, _ = deploy(stack, "split", sim.url)
            apis[name] = (url, procs[0].pid)
        for _ in range(ns.rounds):
            for path in ns.paths.split(","):
                for callers in (int(c) for c in ns.callers.split(",")):
                    for name, (url, pid) in apis.items():
                        figures = asyncio.run(api_cpu_per_job(path, url, ns.jobs, callers, pid))
                        cells.setdefault((path, callers, name), []).append(figures)
    print("path      c  tree    API CPU ms/job (median; each round)        jobs/s")
    for (path, callers, name), rounds in sorted(cells.items()):
        cpu = [r[0] for r in rounds]
        rate = statistics.median(r[1] for r in rounds)
        each = ", ".join(f"{c:.2f}" for c in cpu)
        median = statistics.median(cpu)
        print(f"{path:<8} {callers:>2}  {name:<6} {median:6.2f}  [{each}]  {rate:7.1f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
