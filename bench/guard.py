"""Regression guard: per-job CPU and Redis commands against the checked-in figures.

    .venv/bin/python bench/guard.py            # measure, compare, exit 1 on a regression
    .venv/bin/python bench/guard.py --update   # measure and check the figures in
    .venv/bin/python bench/guard.py --before /tmp/old   # this tree against another, interleaved
    .venv/bin/python bench/guard.py --tenants   # without API keys against with, interleaved

``--tenants`` runs this tree twice, without API keys and with one (the tenant's rate and
open waits counted in Redis, app/store/quotas.py; the rate high enough that nothing is
refused), interleaved as ``--before`` is: the difference is what the shared quotas cost.

``--before DIR`` (an export of an earlier commit: ``git archive REV | tar -x -C DIR``)
runs both trees' deployments side by side on one simulator and alternates them round by
round, so a busy machine slows both alike; it prints both and judges nothing.

One zero-latency simulator, the split deployment of bench/overhead.py (a redis-server, one
``reprompt api``, two ``reprompt worker``), single-turn jobs by ``POST /v1/jobs`` and a
long-poll, at 1 and 16 callers, ``ROUNDS`` rounds each; the direct call to the simulator
is measured in the same rounds. Per cell it takes the median over the rounds of

- **CPU/job ÷ sim CPU/call**: reprompt's CPU per job (API, workers and redis-server, from
  /proc) over the simulator's CPU per direct call in the same round. The simulator is a
  Python HTTP server on the same machine, so the ratio stays put when the machine is
  slower or busier, where milliseconds would not;
- **Redis commands/job**: ``INFO`` total_commands_processed per job (commands run inside
  scripts included): a count, not a time;
- **× direct**: jobs/s through reprompt over direct calls/s (printed, not judged: it
  moves with the machine's other load). The load generator is bench/loadgen.py's lean
  client, as in bench/overhead.py.

It fails when the CPU ratio grows by more than ``CPU_SLACK`` or commands/job by more than
``COMMANDS_SLACK`` over ``bench/guard.json``. Not part of the test suite (it measures,
it does not check behaviour); ``make bench-quick`` runs it.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import statistics
import sys
from pathlib import Path
from typing import Any, Final

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench import loadgen
from bench.common import ROOT, Stack, raise_fd_limit
from bench.overhead import capture_messages, deploy, measure

FIGURES: Final = Path(__file__).with_name("guard.json")
CALLERS: Final = (1, 16)
JOBS: Final = 300
ROUNDS: Final = 3
CPU_SLACK: Final = 1.25  # a CPU ratio 25 % over the checked-in one fails
COMMANDS_SLACK: Final = 1.10  # commands/job 10 % over fail
BENCH_KEY: Final = "bench-key"  # --tenants: the one tenant's API key


def measure_all(
    trees: dict[str, Path] | None = None,
    rounds: int = ROUNDS,
    envs: dict[str, dict[str, str]] | None = None,
) -> dict[str, dict[str, dict[str, float]]]:
    """Per tree (default: this one, as ``"now"``) and cell, the medians over the rounds;
    ``cpu_ms`` is CPU ms per job, the one figure not divided by the simulator's. ``envs``:
    more environment for a tree's deployment, by its name."""
    trees = trees or {"now": ROOT}
    envs = envs or {}
    cells: dict[str, dict[str, dict[str, list[float]]]] = {name: {} for name in trees}
    with Stack() as stack:
        sim = stack.sim(latency_ms=0, jitter_ms=0, seed=1)
        deployed = {}
        for name, code in trees.items():
            stack.code = code
            url, _procs, parts, redis_url = deploy(stack, "split", sim.url, envs.get(name))
            deployed[name] = (url, parts, redis_url)
        messages = capture_messages(deployed[next(iter(trees))][0])
        for _ in range(rounds):
            for c in CALLERS:
                direct = measure("direct", sim.url, messages, JOBS, c, {}, sim.pid)
                for name, (url, parts, redis_url) in deployed.items():
                    jobs = measure("jobs", url, messages, JOBS, c, parts, sim.pid, redis_url)
                    if jobs["fails"] or direct["fails"]:
                        raise SystemExit(
                            f"failed calls at c={c}: {jobs['fails']}, {direct['fails']}"
                        )
                    cell = cells[name].setdefault(
                        f"c{c}", {"cpu": [], "commands": [], "direct": [], "cpu_ms": []}
                    )
                    cell["cpu"].append(jobs["cpu_ms_job"] / direct["sim_cpu_ms_job"])
                    cell["commands"].append(jobs["redis_cmds_job"])
                    cell["direct"].append(jobs["rps"] / direct["rps"])
                    cell["cpu_ms"].append(jobs["cpu_ms_job"])
                    for role, ms in jobs["cpu_ms_job_by_role"].items():
                        cell.setdefault(f"{role}_ms", []).append(ms)
    return {
        tree: {
            name: {k: round(statistics.median(v), 2) for k, v in cell.items()}
            for name, cell in tree_cells.items()
        }
        for tree, tree_cells in cells.items()
    }


def compare(now: dict[str, dict[str, float]], then: dict[str, dict[str, float]]) -> list[str]:
    """The regressions of ``now`` against the checked-in ``then``; empty when none."""
    failed = []
    for name, cell in now.items():
        was = then.get(name)
        if was is None:
            continue
        if cell["cpu"] > was["cpu"] * CPU_SLACK:
            failed.append(f"{name}: CPU/job is {cell['cpu']}× a sim call, was {was['cpu']}×")
        if cell["commands"] > was["commands"] * COMMANDS_SLACK:
            failed.append(f"{name}: {cell['commands']} Redis commands/job, was {was['commands']}")
    return failed


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--update", action="store_true", help="check these figures in")
    parser.add_argument(
        "--before", type=Path, help="another source tree to measure against, interleaved"
    )
    parser.add_argument("--rounds", type=int, default=ROUNDS, help=f"default {ROUNDS}")
    parser.add_argument(
        "--tenants", action="store_true", help="without API keys against with, interleaved"
    )
    ns = parser.parse_args()
    raise_fd_limit()
    if ns.before is not None or ns.tenants:
        if ns.tenants:
            digest = hashlib.sha256(BENCH_KEY.encode()).hexdigest()
            loadgen.AUTHORIZATION = f"Bearer {BENCH_KEY}"
            keyed = {
                "REPROMPT_API_KEYS": f"bench:{digest}",
                "REPROMPT_RATE_PER_TENANT": "1000000",
                "REPROMPT_BURST_PER_TENANT": "1000000",
            }
            both = measure_all({"nokeys": ROOT, "keys": ROOT}, ns.rounds, {"keys": keyed})
        else:
            both = measure_all({"before": ns.before.resolve(), "now": ROOT}, ns.rounds)
        print(
            "tree    cell  CPU ms/job (api / workers / redis)  CPU/job ÷ sim call"
            "  Redis cmds/job  × direct"
        )
        for tree, measured in both.items():
            for name, cell in measured.items():
                roles = " / ".join(
                    f"{cell.get(f'{role}_ms', 0):.2f}" for role in ("api", "workers", "redis")
                )
                print(
                    f"{tree:<7} {name:<5} {cell['cpu_ms']:>10.2f} ({roles})"
                    f"  {cell['cpu']:>17.2f}  {cell['commands']:>14.1f}  {cell['direct']:>8.2f}"
                )
        return 0
    now = {
        name: {k: v for k, v in cell.items() if k in ("cpu", "commands", "direct")}
        for name, cell in measure_all(rounds=ns.rounds)["now"].items()
    }
    then: dict[str, Any] = json.loads(FIGURES.read_text()) if FIGURES.exists() else {}
    print("cell  CPU/job ÷ sim call  Redis cmds/job  × direct   (checked in)")
    for name, cell in now.items():
        was = then.get(name, {})
        print(
            f"{name:<5} {cell['cpu']:>17.2f}  {cell['commands']:>14.1f}  {cell['direct']:>8.2f}"
            f"   ({was.get('cpu', '–')}, {was.get('commands', '–')}, {was.get('direct', '–')})"
        )
    if ns.update:
        FIGURES.write_text(json.dumps(now, indent=2) + "\n")
        print(f"wrote {FIGURES}")
        return 0
    failed = compare(now, then)
    for line in failed:
        print("REGRESSION", line)
    return 1 if failed else 0


if __name__ == "__main__":
    raise SystemExit(main())
