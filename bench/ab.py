"""Several source trees side by side: CPU per job (by process) and Redis commands per job.

    .venv/bin/python bench/ab.py before=/tmp/before now=. --deployment serve --rounds 5

Each tree (an export of a commit, or a copy with one option changed) gets its own
deployment of bench/overhead.py's ``deploy`` (``serve``: API and worker in one process,
or ``split``) on its own redis-server, all on one zero-latency simulator; each round runs
every cell (``jobs``: ``POST /v1/jobs`` and a long-poll, at each caller count) on every
tree in turn, so a busy machine slows them alike. It prints the medians over the rounds
as a Markdown table: CPU ms per job of the deployment and its redis-server (from /proc),
that split by process, Redis commands per job (``INFO``, those scripts run included) and
jobs/s over direct calls to the simulator in the same round. It judges nothing.
"""

from __future__ import annotations

import argparse
import statistics
import sys
from pathlib import Path
from typing import Final

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.common import Stack, raise_fd_limit
from bench.overhead import capture_messages, deploy, measure

JOBS: Final = 300


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("trees", nargs="+", help="NAME=DIR, in the order to print")
    parser.add_argument("--deployment", choices=("serve", "split"), default="serve")
    parser.add_argument("--callers", default="1,8,32", help="comma-separated (default 1,8,32)")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--jobs", type=int, default=JOBS, help=f"per cell (default {JOBS})")
    ns = parser.parse_args()
    trees = {name: Path(path).resolve() for name, path in (t.split("=", 1) for t in ns.trees)}
    callers = [int(c) for c in ns.callers.split(",")]
    raise_fd_limit()
    cells: dict[tuple[str, int], dict[str, list[float]]] = {}
    with Stack() as stack:
        sim = stack.sim(latency_ms=0, jitter_ms=0, seed=1)
        deployed = {}
        for name, code in trees.items():
            stack.code = code
            url, _procs, parts, redis_url = deploy(stack, ns.deployment, sim.url)
            deployed[name] = (url, parts, redis_url)
        messages = capture_messages(deployed[next(iter(trees))][0])
        for round_ in range(ns.rounds):
            for c in callers:
                direct = measure("direct", sim.url, messages, ns.jobs, c, {}, sim.pid)
                for name, (url, parts, redis_url) in deployed.items():
                    jobs = measure("jobs", url, messages, ns.jobs, c, parts, sim.pid, redis_url)
                    if jobs["fails"] or direct["fails"]:
                        raise SystemExit(f"{name} c={c}: {jobs['fails']} failed jobs")
                    cell = cells.setdefault((name, c), {})
                    cell.setdefault("cpu_ms", []).append(jobs["cpu_ms_job"])
                    cell.setdefault("commands", []).append(jobs["redis_cmds_job"])
                    cell.setdefault("direct", []).append(jobs["rps"] / direct["rps"])
                    for role, ms in jobs["cpu_ms_job_by_role"].items():
                        cell.setdefault(role, []).append(ms)
            print(f"round {round_ + 1}/{ns.rounds} done", file=sys.stderr)
    roles = [r for r in ("serve", "api", "workers", "redis") if any(r in v for v in cells.values())]
    print(f"| tree | c | CPU ms/job | {' | '.join(roles)} | Redis cmds/job | × direct |")
    print("|---|---:|---:|" + "---:|" * len(roles) + "---:|---:|")
    for c in callers:
        for name in trees:
            m = {k: statistics.median(v) for k, v in cells[(name, c)].items()}
            split = " | ".join(f"{m[r]:.2f}" for r in roles)
            print(
                f"| {name} | {c} | {m['cpu_ms']:.2f} | {split} | {m['commands']:.1f}"
                f" | {m['direct']:.2f} |"
            )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
