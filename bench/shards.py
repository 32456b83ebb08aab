"""Queue drain on one Redis node with 1 shard vs a 3-master Redis Cluster with 3 and 6 shards.

    .venv/bin/python bench/shards.py            # writes docs/benchmarks/shards.md (~4 min)
    .venv/bin/python bench/shards.py --quick    # a smoke run to a temp dir (< 90 s)

Each layout gets fresh processes on loopback: its Redis (one plain ``redis-server``, or
three in cluster mode joined by ``redis-cli --cluster create``: ``LocalCluster``, the one
``tests/store/test_cluster.py`` uses; no persistence on either, so the layouts differ only
in topology), the simulator at 0 ms (so Redis and CPU are the limit), one ``reprompt api``
and the same ``reprompt worker`` processes, with ``REPROMPT_REDIS_CLUSTER`` and
``REPROMPT_SHARDS`` set. The jobs are queued with ``POST /v1/jobs`` while the workers are
frozen (SIGSTOP), then timed from SIGCONT until the workers' ``reprompt_jobs_finished_total``
reaches the count. CPU is read from ``/proc`` for every process, each Redis node apart;
jobs per master by ``SCAN``. On the one-node layout it also measures the memory a finished
single-turn job holds: ``INFO memory`` ``used_memory`` before the submits and after the
drain, ÷ jobs, and ``MEMORY USAGE <job hash> SAMPLES 0`` of up to 200 jobs.

A separate script, not a section of ``bench/scale.py``: that one asks how many jobs a worker
holds against a slow model; this one asks what the Redis topology changes when the model
is instant, and its page is what ``docs/scaling.md`` cites.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from redis import Redis
from redis.exceptions import ConnectionError as RedisConnectionError

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from app.child import free_loopback_port
from app.redis_server import find_redis_server
from bench.common import (
    CLK_TCK,
    DOCS,
    Stack,
    cpu_seconds,
    machine,
    page_end,
    raise_fd_limit,
    with_notes,
)
from bench.scale import Sampler, failed_jobs, submit
from tests.store.cluster import LocalCluster

SEED = 1
PREFIX = "rp"
MEMORY_SAMPLE = 200


@dataclass(frozen=True)
class Layout:
    masters: int  # 0: one plain redis-server (not in cluster mode)
    shards: int

    @property
    def name(self) -> str:
        where = "1 node" if self.masters == 0 else f"cluster, {self.masters} masters"
        return f"{where}, {self.shards} shard{'s' if self.shards > 1 else ''}"


def plan(quick: bool) -> dict[str, Any]:
    if quick:
        return {
            "jobs": 300,
            "workers": 2,
            "concurrency": 32,
            "layouts": [Layout(0, 1), Layout(3, 6)],
        }
    return {
        "jobs": 3000,
        "workers": 2,
        "concurrency": 32,
        "layouts": [Layout(0, 1), Layout(0, 6), Layout(3, 3), Layout(3, 6)],
    }


def plain_node(stack: Stack) -> int:
    """One redis-server on loopback with the cluster nodes' options, cluster mode off."""
    port = free_loopback_port()
    directory = stack.tmp / f"redis-{port}"
    directory.mkdir()
    argv = [str(find_redis_server()), "--port", str(port), "--bind", "127.0.0.1"]
    argv += ["--appendonly", "no", "--save", "", "--dir", str(directory)]
    with open(directory / "redis.log", "wb") as log:
        process = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=log, stderr=log)
    stack.callback(process.wait, 10)
    stack.callback(process.kill)
    deadline = time.monotonic() + 30
    while True:
        try:
            with Redis(port=port) as client:
                client.ping()
            return port
        except RedisConnectionError:
            if time.monotonic() > deadline or process.poll() is not None:
                raise
        time.sleep(0.05)


def machine_busy_s() -> float:
    """CPU seconds every process on the machine has used (``/proc/stat``: all but idle and
    iowait), to tell how much of the 2 cores other work took during a drain."""
    fields = [int(x) for x in Path("/proc/stat").read_text().splitlines()[0].split()[1:]]
    idle = fields[3] + fields[4]
    return (sum(fields[:8]) - idle) / CLK_TCK


def node_pid(port: int) -> int:
    with Redis(port=port) as client:
        return int(client.info("server")["process_id"])


def used_memory(ports: list[int]) -> dict[str, int]:
    """``INFO memory``'s ``used_memory`` and ``used_memory_dataset`` (without the server's
    own overhead: clients, buffers, the cluster's slot index…), summed over the nodes."""
    total = {"used_memory": 0, "used_memory_dataset": 0}
    for port in ports:
        with Redis(port=port) as client:
            info = client.info("memory")
        for field in total:
            total[field] += int(info[field])
    return total


def job_keys(port: int) -> list[bytes]:
    with Redis(port=port) as client:
        return list(client.scan_iter(match=f"{PREFIX}:*:job:*", count=1000))


def memory_per_job(port: int, keys: list[bytes]) -> dict[str, float]:
    """``MEMORY USAGE … SAMPLES 0`` (every field counted, not an estimate) of some jobs."""
    with Redis(port=port) as client:
        sizes = [int(client.memory_usage(key, samples=0) or 0) for key in keys[:MEMORY_SAMPLE]]
        fields = client.hlen(keys[0]) if keys else 0
    return {
        "sampled": len(sizes),
        "mean_b": statistics.fmean(sizes) if sizes else 0.0,
        "min_b": min(sizes, default=0),
        "max_b": max(sizes, default=0),
        "fields": fields,
    }


def run(p: dict[str, Any], layout: Layout) -> dict[str, Any]:
    """One layout: the jobs queued while the workers are frozen, then drained."""
    with Stack() as stack:
        d = _drain(stack, p, layout)
    return _record(d, p, layout)


@dataclass
class _Drained:
    """What one layout's run measured: CPU seconds at the submit's start (0), its end (1)
    and the drain's end (2), by node port or process."""

    ports: list[int]
    submit_s: float
    submit_fails: int
    drain_s: float
    failed: int
    redis_cpu: tuple[dict[int, float], dict[int, float], dict[int, float]]
    api_cpu: float
    worker_cpu: float
    sim_cpu: float
    machine_busy_s: float
    memory: tuple[dict[str, int], dict[str, int]]
    keys: dict[int, list[bytes]]
    job_hash: dict[str, float]


def _drain(stack: Stack, p: dict[str, Any], layout: Layout) -> _Drained:
    n, workers = p["jobs"], p["workers"]
    sim = stack.sim(latency_ms=0, seed=SEED)
    ports, url = _redis_for(stack, layout)
    pids = {port: node_pid(port) for port in ports}
    env = stack.env(
        sim.url,
        url,
        REPROMPT_REDIS_CLUSTER="true" if layout.masters else "false",
        REPROMPT_SHARDS=layout.shards,
        REPROMPT_KEY_PREFIX=PREFIX,
        REPROMPT_WORKER_CONCURRENCY=p["concurrency"],
        REPROMPT_RATE_PER_TENANT=0,  # one tenant submits everything, as fast as it can
    )
    api = stack.service("api", env)
    procs = [stack.service("worker", env, name=f"worker{i}") for i in range(workers)]
    time.sleep(0.5)
    memory0 = used_memory(ports)
    for w in procs:
        os.kill(w.pid, signal.SIGSTOP)
    redis_cpu0 = {port: cpu_seconds(pid) for port, pid in pids.items()}
    api_cpu0 = cpu_seconds(api.pid)
    try:
        submit_s, submit_fails = asyncio.run(submit(api.url, n))
    finally:
        for w in procs:
            os.kill(w.pid, signal.SIGCONT)
    redis_cpu1 = {port: cpu_seconds(pid) for port, pid in pids.items()}
    api_cpu1 = cpu_seconds(api.pid)
    worker_cpu0 = sum(cpu_seconds(w.pid) for w in procs)
    sim_cpu0 = cpu_seconds(sim.pid)
    sampler = Sampler(procs, period=0.2)
    busy0 = machine_busy_s()
    sampler.start()
    drain_s = sampler.wait_finished(n - submit_fails, timeout=900)
    busy1 = machine_busy_s()
    sampler.halt.set()
    sampler.join()
    redis_cpu2 = {port: cpu_seconds(pid) for port, pid in pids.items()}
    worker_cpu1 = sum(cpu_seconds(w.pid) for w in procs)
    sim_cpu1 = cpu_seconds(sim.pid)
    failed = failed_jobs(api.url)
    keys = {port: job_keys(port) for port in ports}
    memory1 = used_memory(ports)
    fullest = max(ports, key=lambda port: len(keys[port]))
    return _Drained(
        ports=ports,
        submit_s=submit_s,
        submit_fails=submit_fails,
        drain_s=drain_s,
        failed=failed,
        redis_cpu=(redis_cpu0, redis_cpu1, redis_cpu2),
        api_cpu=api_cpu1 - api_cpu0,
        worker_cpu=worker_cpu1 - worker_cpu0,
        sim_cpu=sim_cpu1 - sim_cpu0,
        machine_busy_s=busy1 - busy0,
        memory=(memory0, memory1),
        keys=keys,
        job_hash=memory_per_job(fullest, keys[fullest]),
    )


def _redis_for(stack: Stack, layout: Layout) -> tuple[list[int], str]:
    """The layout's Redis: a 3-master cluster, or one plain node; its ports and URL."""
    if layout.masters:
        cluster = LocalCluster(stack.tmp / "cluster", masters=layout.masters).start()
        stack.callback(cluster.stop)
        return list(cluster.ports), cluster.url
    port = plain_node(stack)
    return [port], f"redis://127.0.0.1:{port}/0"


def _record(d: _Drained, p: dict[str, Any], layout: Layout) -> dict[str, Any]:
    """A layout's figures, as the page and ``shards.json`` keep them."""
    n, ports = p["jobs"], d.ports
    redis_cpu0, redis_cpu1, redis_cpu2 = d.redis_cpu
    memory0, memory1 = d.memory
    drain_redis = {port: redis_cpu2[port] - redis_cpu1[port] for port in ports}
    drain_total_cpu = sum(drain_redis.values()) + d.worker_cpu + d.sim_cpu
    return {
        "layout": layout.name,
        "masters": layout.masters,
        "shards": layout.shards,
        "jobs": n,
        "workers": p["workers"],
        "concurrency": p["concurrency"],
        "submit_fails": d.submit_fails,
        "failed_jobs": d.failed,
        "submit_s": d.submit_s,
        "submit_rps": n / d.submit_s,
        "drain_s": d.drain_s,
        "throughput": n / d.drain_s,
        "jobs_per_node": [len(d.keys[port]) for port in ports],
        "redis_cpu_ms_job_submit": sum(redis_cpu1[q] - redis_cpu0[q] for q in ports) / n * 1000,
        "redis_cpu_ms_job_drain": sum(drain_redis.values()) / n * 1000,
        "redis_cpu_drain_per_node_s": [drain_redis[port] for port in ports],
        "api_cpu_ms_job_submit": d.api_cpu / n * 1000,
        "worker_cpu_ms_job": d.worker_cpu / n * 1000,
        "sim_cpu_ms_job": d.sim_cpu / n * 1000,
        "busiest_node_util": max(drain_redis.values()) / d.drain_s,
        "cores_busy": drain_total_cpu / d.drain_s,
        "machine_busy": d.machine_busy_s / d.drain_s,
        "memory_per_job_b": (memory1["used_memory"] - memory0["used_memory"]) / n,
        "dataset_per_job_b": (memory1["used_memory_dataset"] - memory0["used_memory_dataset"]) / n,
        "job_hash": d.job_hash,
    }


def report(results: list[dict[str, Any]], info: dict[str, str], quick: bool, elapsed: float) -> str:
    cmd = "python bench/shards.py" + (" --quick" if quick else "")
    out = [
        "# Shards: queue drain on one Redis node vs a 3-master Redis Cluster",
        "",
        f"Produced by `{cmd}` (took {elapsed:.0f} s) on a shared, noisy 2-core machine;"
        " every number comes from that one run, one run per layout.",
        "",
        *_drain_section(results),
        *_memory_section(results),
        *page_end(info),
    ]
    notes = Path(__file__).with_name("shards_notes.md")
    return with_notes("\n".join(out), notes, quick=quick)


def _drain_section(results: list[dict[str, Any]]) -> list[str]:
    """How a layout is run, and the drain's table."""
    r0 = results[0]
    rows = [
        f"| {r['layout']} | {r['drain_s']:.1f} | **{r['throughput']:.0f}** |"
        f" {r['submit_rps']:.0f} | {r['worker_cpu_ms_job']:.1f} |"
        f" {r['redis_cpu_ms_job_submit']:.2f} + {r['redis_cpu_ms_job_drain']:.2f} |"
        f" {' / '.join(f'{s:.2f}' for s in r['redis_cpu_drain_per_node_s'])} |"
        f" {r['busiest_node_util']:.2f} | {r['cores_busy']:.2f} |"
        f" {r['machine_busy'] - r['cores_busy']:.2f} |"
        f" {' / '.join(str(j) for j in r['jobs_per_node'])} |"
        f" {r['failed_jobs'] + r['submit_fails']} |"
        for r in results
    ]
    return [
        "## Setup",
        "",
        f"For each layout, fresh processes: its Redis (a plain `redis-server`, or three in"
        f" cluster mode joined with `redis-cli --cluster create`, no replicas; no persistence"
        f" on either), the simulator at 0 ms (`--latency-ms 0 --seed {SEED}`), one"
        f" `reprompt api` and {r0['workers']} `reprompt worker`s with"
        f" `REPROMPT_WORKER_CONCURRENCY={r0['concurrency']}`, `REPROMPT_SHARDS` and"
        " `REPROMPT_REDIS_CLUSTER` set for the layout. "
        f"{r0['jobs']} single-turn jobs (`bench/common.py` `job_body`) queued with"
        " `POST /v1/jobs` (32 concurrent callers) while the workers were frozen (SIGSTOP), then"
        " timed from SIGCONT until the workers' `reprompt_jobs_finished_total` reached the"
        " count. CPU from `/proc/<pid>/stat`; jobs per master by `SCAN` after the drain.",
        "",
        "| layout | drain s | jobs/s | submit jobs/s | worker CPU ms/job |"
        " redis CPU ms/job (submit + drain) | redis CPU s per node (drain) |"
        " busiest node (cores) | this run's CPU (cores) | other work on the machine (cores) |"
        " jobs per node | failed |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
        *rows,
        "",
        "*busiest node*: the Redis node's CPU seconds over the drain ÷ the drain's wall time:"
        " 1.0 is a saturated redis-server (one thread). *this run's CPU*: workers, simulator"
        " and Redis nodes together over the drain (the API is idle then). *other work*: the"
        " whole machine's busy time (`/proc/stat`) less that: the box is shared, and has 2.",
        "",
    ]


def _memory_section(results: list[dict[str, Any]]) -> list[str]:
    """Memory per finished job, by layout."""
    return [
        "## Memory per finished job",
        "",
        "Growth of `INFO memory` over the run (all nodes) ÷ jobs, once every job has"
        " finished: `used_memory`, and `used_memory_dataset` (without the server's own"
        " overhead). Then `MEMORY USAGE <job hash> SAMPLES 0` (every field counted, not an"
        f" estimate) of up to {MEMORY_SAMPLE} job hashes on the node holding the most.",
        "",
        "| layout | used_memory KiB/job | dataset KiB/job | job hash KiB: mean (min–max B) |"
        " fields |",
        "|---|---:|---:|---:|---:|",
        *[
            f"| {r['layout']} | {r['memory_per_job_b'] / 1024:.2f} |"
            f" {r['dataset_per_job_b'] / 1024:.2f} | {r['job_hash']['mean_b'] / 1024:.2f}"
            f" ({r['job_hash']['min_b']}–{r['job_hash']['max_b']}) |"
            f" {r['job_hash']['fields']} |"
            for r in results
        ],
        "",
    ]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="a smoke run to a temp dir")
    parser.add_argument(
        "--report-only",
        action="store_true",
        help="rewrite the page from docs/benchmarks/shards.json",
    )
    ns = parser.parse_args()
    out = Path(tempfile.mkdtemp(prefix="reprompt-bench-")) if ns.quick else DOCS
    if ns.report_only:
        saved = json.loads((DOCS / "shards.json").read_text())
        text = report(saved["results"], saved["info"], False, saved["elapsed"])
        (DOCS / "shards.md").write_text(text)
        return 0
    print("fd limit", raise_fd_limit())
    started = time.monotonic()
    p = plan(ns.quick)
    info = machine()
    results = []
    for layout in p["layouts"]:
        results.append(run(p, layout))
        print({k: v for k, v in results[-1].items() if k != "job_hash"}, flush=True)
    elapsed = time.monotonic() - started
    (out / "shards.md").write_text(report(results, info, ns.quick, elapsed))
    (out / "shards.json").write_text(
        json.dumps({"results": results, "info": info, "elapsed": elapsed}, indent=1)
    )
    print(f"wrote {out / 'shards.md'}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
