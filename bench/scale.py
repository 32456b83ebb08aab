"""Scale: thousands of jobs in flight on one worker, and queue drain with 1, 2, 4 workers.

    .venv/bin/python bench/scale.py                  # full run (about 10 minutes)
    .venv/bin/python bench/scale.py --quick          # smoke check (about a minute)
    .venv/bin/python bench/scale.py --before main    # the 'before' of the report's tables
    .venv/bin/python bench/scale.py --hold-only --jobs 5000 --latency-ms 2000   # one hold

**Hold.** One redis-server, one ``reprompt api``, one ``reprompt worker`` with
``REPROMPT_WORKER_CONCURRENCY`` equal to the jobs queued, a slow simulator. The jobs are
queued with ``POST /v1/jobs`` while the worker is frozen (SIGSTOP), then it is thawed; its
``/metrics`` (jobs in progress, finished, model calls and their time, leases expired) and
``/proc`` (VmRSS, utime+stime, open fds) are sampled every 250 ms until every job has
finished, py-spy records its stacks for the first 20 s, and ``redis-cli monitor`` records
every Redis command (to count the heartbeats). At the end the jobs in Redis are counted by
status, and the leases left. ``--before REF`` runs the same holds with the services of git
``REF`` (an export of that commit, run with this venv) and saves them for the report's
before/after tables.

**Drain.** For 1, 2 and 4 worker processes (``REPROMPT_WORKER_CONCURRENCY`` each): start
them, freeze them (SIGSTOP), queue the same number of jobs, thaw them (SIGCONT) and time
until the last job has finished. Writes docs/benchmarks/scale.md, scale.json and scale.png.
"""

from __future__ import annotations

import argparse
import asyncio
import atexit
import collections
import hashlib
import itertools
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
import urllib.parse
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import redis

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.common import (
    DOCS,
    ROOT,
    Proc,
    Stack,
    client,
    cpu_seconds,
    job_body,
    machine,
    metric_sum,
    open_fds,
    page_end,
    raise_fd_limit,
    rss_mb,
    run_closed_loop,
    with_notes,
)

SEED = 1
SUBMIT_CONCURRENCY = 32
OUT = DOCS
BEFORE = DOCS / "scale-before.json"
# Leases short enough that every held job is renewed several times while it waits (the
# defaults are 30 s and 10 s): a worker whose event loop falls behind loses them.
HOLD_LEASE_MS = 10_000
HOLD_HEARTBEAT_MS = 3_000
# A hold in which nothing moves (jobs held, finished, model calls) for this long is over.
STALL_S = 60.0
# The holds of a full run: the 2 s model; a model slow enough (a minute a call)
# that holding 10,000 jobs needs no more than the ~170 jobs/s this machine can run; and the
# most jobs the worker of commit 187ea53 could claim at once (its claim script failed
# past ~4,000), so 'before' has numbers to compare.
HOLDS = [
    {"jobs": 10_000, "latency_ms": 2_000},
    {"jobs": 10_000, "latency_ms": 60_000},
    {"jobs": 3_000, "latency_ms": 2_000},
]
QUICK_HOLDS = [{"jobs": 300, "latency_ms": 2_000}]
DRAIN: dict[str, Any] = {
    "drain_jobs": 1000,
    "drain_concurrency": 200,
    "drain_latency": 1000,
    "workers": [1, 2, 4],
}
QUICK_DRAIN: dict[str, Any] = {
    "drain_jobs": 200,
    "drain_concurrency": 200,
    "drain_latency": 1000,
    "workers": [1, 2],
}


def key(jobs: int, latency_ms: int) -> str:
    return f"{jobs}@{latency_ms}"


async def submit(url: str, n: int) -> tuple[float, int]:
    async with client(SUBMIT_CONCURRENCY) as http:

        async def post(i: int) -> bool:
            r = await http.post(f"{url}/v1/jobs", json=job_body(i))
            return r.status_code == 202

        wall, _, fails = await run_closed_loop(post, n, SUBMIT_CONCURRENCY)
    return wall, fails


class Sampler(threading.Thread):
    """Samples the workers' /metrics and /proc every ``period`` seconds."""

    def __init__(self, workers: list[Proc], period: float = 0.25) -> None:
        super().__init__(daemon=True)
        self.workers = workers
        self.period = period
        self.samples: list[dict[str, float]] = []
        self.stalled = False
        self.halt = threading.Event()
        self.t0 = time.monotonic()
        # One keep-alive client: a new connection per sample costs the box real CPU.
        self.http = httpx.Client(timeout=5, trust_env=False)

    def read(self) -> dict[str, float]:
        in_progress = finished = calls = expired = call_s = 0.0
        for w in self.workers:
            try:
                text = self.http.get(w.metrics_url).text
            except httpx.HTTPError:
                continue
            in_progress += metric_sum(text, "reprompt_jobs_in_progress")
            finished += metric_sum(text, "reprompt_jobs_finished_total")
            calls += metric_sum(text, "reprompt_llm_calls_total")
            expired += metric_sum(text, "reprompt_leases_expired_total")
            call_s += metric_sum(text, "reprompt_llm_request_duration_seconds_sum")
        return {
            "t": time.monotonic() - self.t0,
            "in_progress": in_progress,
            "finished": finished,
            "calls": calls,
            "leases_expired": expired,
            "call_s": call_s,
            "rss_mb": sum(rss_mb(w.pid) for w in self.workers),
            "cpu_s": sum(cpu_seconds(w.pid) for w in self.workers),
            "fds": sum(open_fds(w.pid) for w in self.workers),
        }

    def run(self) -> None:
        with self.http:
            while not self.halt.is_set():
                self.samples.append(self.read())
                self.halt.wait(self.period)

    def wait_finished(self, n: int, timeout: float, stall_s: float | None = None) -> float:
        """Wait until every job has finished; the time of the sample that showed it.

        Finished: ``reprompt_jobs_finished_total`` reaches ``n``, or (it can undercount, see
        the report) every job has made its one model call and none is in progress. With
        ``stall_s``, also when nothing has moved for that long; ``stalled`` then says so.
        """
        deadline = time.monotonic() + timeout
        moved, seen = time.monotonic(), None
        self.stalled = False
        while time.monotonic() < deadline:
            last = self.samples[-1] if self.samples else None
            if last and (
                last["finished"] >= n or (last["calls"] >= n and last["in_progress"] == 0)
            ):
                return last["t"]
            if last:
                now = (last["in_progress"], last["finished"], last["calls"])
                if now != seen:
                    moved, seen = time.monotonic(), now
                elif stall_s is not None and time.monotonic() - moved > stall_s:
                    self.stalled = True
                    return last["t"]
            time.sleep(self.period / 2)
        raise TimeoutError(f"jobs did not finish: {self.samples[-1] if self.samples else None}")


class Monitor:
    """``redis-cli monitor`` into a file while it runs; ``count()`` then attributes every
    command to the script it ran in (by the script's SHA1) or to itself.

    MONITOR shows every command a client sends and, marked ``[0 lua]``, every command a
    script runs, right after the ``EVALSHA`` that ran it; this costs redis-server some CPU
    but nothing in the worker.
    """

    def __init__(self, redis_url: str, code: Path, out: Path) -> None:
        from app.redis_server import find_redis_server

        url = urllib.parse.urlsplit(redis_url)
        env = dict(os.environ, REDISCLI_AUTH=urllib.parse.unquote(url.password or ""))
        cli = find_redis_server().with_name("redis-cli")
        self.out = out
        self.scripts = script_shas(code)
        with out.open("wb") as fh:
            self.proc = subprocess.Popen(
                [str(cli), "--no-auth-warning", "-p", str(url.port), "monitor"],
                env=env,
                stdout=fh,
                stderr=subprocess.DEVNULL,
            )
        self.started = time.monotonic()
        self.seconds = 0.0

    def stop(self) -> None:
        self.seconds = time.monotonic() - self.started
        self.proc.terminate()
        self.proc.wait(timeout=10)

    def count(self) -> dict[str, dict[str, int]]:
        """Per script name (or ``cmd:NAME`` for a plain command): ``calls`` (round trips),
        ``inner`` (commands the script ran), ``ids`` (its arguments that are job ids)."""
        out: dict[str, dict[str, int]] = collections.defaultdict(
            lambda: {"calls": 0, "inner": 0, "ids": 0}
        )
        current = ""
        with self.out.open("rb") as fh:
            for raw in fh:
                head, _, rest = raw.partition(b"] ")
                if not rest:
                    continue
                if head.endswith(b" lua"):
                    if current:
                        out[current]["inner"] += 1
                    continue
                words = rest.split(b'" "', 2)
                command = words[0].strip(b'"').upper().decode(errors="replace")
                if command == "EVALSHA" and len(words) > 1:
                    current = self.scripts.get(words[1].decode(errors="replace"), "script:?")
                    out[current]["calls"] += 1
                    out[current]["ids"] += rest.count(b'"job_')
                else:
                    current = ""
                    out[f"cmd:{command}"]["calls"] += 1
        return dict(out)


def script_shas(code: Path) -> dict[str, str]:
    """SHA1 of every Lua script of the tree at ``code`` (as ``app.store.connection`` loads
    them: the prefixes, each followed by a newline, then the script) → its name."""
    lua = code / "app" / "store" / "lua"
    prefixes = [p for p in ("outbox.lua", "common.lua") if (lua / p).exists()]
    head = "".join((lua / p).read_text() + "\n" for p in prefixes)
    return {
        hashlib.sha1((head + f.read_text()).encode()).hexdigest(): f.stem
        for f in sorted(lua.glob("*.lua"))
        if f.name not in prefixes
    }


HEARTBEAT_SCRIPTS = ("heartbeat", "heartbeats")


def census(redis_url: str) -> dict[str, Any]:
    """Every job in Redis by status (and how many took more than one attempt), the leases
    and queued ids left: what a run leaves behind, whatever the metrics said."""
    statuses: collections.Counter[str] = collections.Counter()
    retried = leases = queued = 0
    with redis.Redis.from_url(redis_url, decode_responses=True) as r:
        keys = list(r.scan_iter(match="*:job:*", count=1000))
        for start in range(0, len(keys), 1000):
            pipe = r.pipeline(transaction=False)
            for k in keys[start : start + 1000]:
                pipe.hmget(k, "status", "attempts")
            for status, attempts in pipe.execute():
                statuses[status or "?"] += 1
                retried += int(attempts or 0) > 1
        leases = sum(int(r.zcard(k)) for k in r.scan_iter(match="*:leases"))
        queued = sum(int(r.llen(k)) for k in r.scan_iter(match="*:q:*"))
    return {"status": dict(statuses), "retried": retried, "leases": leases, "queued": queued}


def failed_jobs(url: str) -> int:
    r = httpx.get(f"{url}/v1/jobs", params={"status": "failed", "limit": 100}, timeout=30)
    return len(r.json()["jobs"])


def start_pyspy(pid: int, out: Path, duration_s: int) -> subprocess.Popen[bytes] | None:
    pyspy = shutil.which("py-spy") or str(Path(sys.executable).parent / "py-spy")
    if not Path(pyspy).exists():
        return None
    return subprocess.Popen(
        [
            pyspy,
            "record",
            "--pid",
            str(pid),
            "--rate",
            "100",
            "--format",
            "raw",
            "--nonblocking",
            "--duration",
            str(duration_s),
            "-o",
            str(out),
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )


# Worker log lines worth counting in a hold run (a healthy run has none of them).
LOG_SIGNS = {
    "heartbeat failed": "heartbeat failed",
    "lease lost": "lease lost",
    "stale write or commit refused": "stale (write|commit) refused",
    "progress write failed": "progress failed",
    "commit failed": "commit failed",
    "claim failed": "claim failed",
    "job failed by the worker": "the worker failed|the turn loop failed",
}


def hold(
    jobs: int, latency_ms: int, *, profile: bool, code: Path = ROOT, tag: str = ""
) -> dict[str, Any]:
    """One worker, ``jobs`` slots, ``jobs`` queued while it is frozen, a ``latency_ms``
    model; the services run from the tree at ``code``."""
    name = key(jobs, latency_ms) + ("-before" if tag else "")
    with Stack(code) as stack:
        run = _hold_run(stack, name, jobs, latency_ms, profile=profile, code=code)
    prof = None
    if run.spy is not None:
        run.spy.wait(timeout=60)
        if run.folded.exists():
            from bench.overhead import compress, summarize_profile

            prof = summarize_profile(compress(run.folded))
    return _hold_record(run, jobs, latency_ms, tag, prof)


@dataclass
class _HoldRun:
    """What one hold measured, before it is summed up."""

    sampler: Sampler
    monitor: Monitor
    commands: dict[str, dict[str, int]]
    submit_s: float
    submit_fails: int
    done_t: float
    base: dict[str, float]
    redis_peak: float
    cpu0: dict[str, float]
    cpu1: dict[str, float]
    census: dict[str, Any]
    log: str
    spy: subprocess.Popen[bytes] | None
    folded: Path


def _hold_run(
    stack: Stack, name: str, jobs: int, latency_ms: int, *, profile: bool, code: Path
) -> _HoldRun:
    """Start the services, queue the jobs while the worker is frozen, thaw it, watch."""
    sim = stack.sim(latency_ms=latency_ms, seed=SEED)
    redis_url, redis_pid = stack.redis()
    env = stack.env(
        sim.url,
        redis_url,
        timeout_s=max(60.0, 3 * latency_ms / 1000),
        REPROMPT_WORKER_CONCURRENCY=jobs,
        REPROMPT_LEASE_MS=HOLD_LEASE_MS,
        REPROMPT_HEARTBEAT_MS=HOLD_HEARTBEAT_MS,
    )
    api = stack.service("api", env)
    worker = stack.service("worker", env, name="worker")
    time.sleep(1.0)
    base = {
        "rss_mb": rss_mb(worker.pid),
        "fds": open_fds(worker.pid),
        "redis_rss_mb": rss_mb(redis_pid),
    }
    os.kill(worker.pid, signal.SIGSTOP)  # queue everything first, then let it claim
    try:
        submit_s, submit_fails = asyncio.run(submit(api.url, jobs))
    finally:
        monitor = Monitor(redis_url, code, stack.tmp / "monitor.txt")
        pids = {"worker": worker.pid, "api": api.pid, "redis": redis_pid, "sim": sim.pid}
        cpu0 = {k: cpu_seconds(pid) for k, pid in pids.items()}
        os.kill(worker.pid, signal.SIGCONT)
    redis_peak = rss_mb(redis_pid)
    sampler = Sampler([worker])
    sampler.start()
    folded = OUT / f"scale-worker-{name}.folded"
    spy = start_pyspy(worker.pid, folded, 20) if profile else None
    done_t = sampler.wait_finished(jobs - submit_fails, timeout=1200, stall_s=STALL_S)
    monitor.stop()
    sampler.halt.set()
    sampler.join()
    cpu1 = {k: cpu_seconds(pid) for k, pid in pids.items()}
    left = census(redis_url)
    log = _kept_log(worker, name)
    return _HoldRun(
        sampler=sampler,
        monitor=monitor,
        commands=monitor.count(),
        submit_s=submit_s,
        submit_fails=submit_fails,
        done_t=done_t,
        base=base,
        redis_peak=redis_peak,
        cpu0=cpu0,
        cpu1=cpu1,
        census=left,
        log=log,
        spy=spy,
        folded=folded,
    )


def _kept_log(worker: Proc, name: str) -> str:
    """The worker's log, kept in the scratch directory for a look after the run."""
    log = worker.log.read_text(errors="replace") if worker.log else ""
    logs = Path(tempfile.gettempdir()) / "reprompt-bench"
    logs.mkdir(exist_ok=True)
    (logs / f"scale-worker-{name}.log").write_text(log)
    return log


def _hold_record(
    run: _HoldRun, jobs: int, latency_ms: int, tag: str, prof: dict[str, Any] | None
) -> dict[str, Any]:
    """A hold's record, as the report and ``scale.json`` keep it."""
    s = run.sampler.samples
    done_t, cpu0, cpu1, base = run.done_t, run.cpu0, run.cpu1, run.base
    peak = max(x["in_progress"] for x in s)
    peak_rss = max(x["rss_mb"] for x in s)
    beats = [run.commands[b] for b in HEARTBEAT_SCRIPTS if b in run.commands]
    held_s = sum(
        (b["t"] - a["t"]) * (a["in_progress"] + b["in_progress"]) / 2
        for a, b in itertools.pairwise(s)
    )
    monitor_s = run.monitor.seconds
    return {
        "code": tag.removeprefix("-") or "this tree",
        "stalled": run.sampler.stalled,
        "jobs": jobs,
        "concurrency": jobs,
        "latency_ms": latency_ms,
        "lease_ms": HOLD_LEASE_MS,
        "heartbeat_ms": HOLD_HEARTBEAT_MS,
        "submit_s": run.submit_s,
        "submit_rps": jobs / run.submit_s,
        "submit_fails": run.submit_fails,
        "census": run.census,
        "finished_undercount": jobs - run.submit_fails - s[-1]["finished"],
        "leases_expired": s[-1]["leases_expired"],
        "total_s": done_t,
        "throughput": s[-1]["finished"] / done_t if done_t else 0.0,
        "mean_call_s": s[-1]["call_s"] / s[-1]["calls"] if s[-1]["calls"] else 0.0,
        "mean_held": held_s / done_t if done_t else 0.0,
        "peak_in_progress": peak,
        "t_peak": next(x["t"] for x in s if x["in_progress"] == peak),
        "base_rss_mb": base["rss_mb"],
        "peak_rss_mb": peak_rss,
        "kb_per_job": (peak_rss - base["rss_mb"]) * 1024 / peak if peak else 0.0,
        "base_fds": base["fds"],
        "peak_fds": max(x["fds"] for x in s),
        "redis_rss_mb": (base["redis_rss_mb"], run.redis_peak),
        "cpu_s": {k: cpu1[k] - cpu0[k] for k in cpu0},
        "cpu_ms_job": {k: (cpu1[k] - cpu0[k]) / jobs * 1000 for k in cpu0},
        "worker_cpu_util": (cpu1["worker"] - cpu0["worker"]) / done_t if done_t else 0.0,
        "monitor_s": monitor_s,
        "heartbeat_calls_per_s": sum(b["calls"] for b in beats) / monitor_s,
        "heartbeat_commands_per_s": sum(b["calls"] + b["inner"] for b in beats) / monitor_s,
        "leases_renewed_per_s": sum(b["ids"] for b in beats) / monitor_s,
        "redis_commands": run.commands,
        "log_signs": {k: len(re.findall(v, run.log)) for k, v in LOG_SIGNS.items()},
        "samples": s,
        "profile": prof,
    }


def drain(p: dict[str, Any], workers: int) -> dict[str, Any]:
    """``workers`` workers drain ``drain_jobs`` jobs queued while they were frozen."""
    n, conc, lat = p["drain_jobs"], p["drain_concurrency"], p["drain_latency"]
    with Stack() as stack:
        sim = stack.sim(latency_ms=lat, seed=SEED)
        redis_url, redis_pid = stack.redis()
        env = stack.env(sim.url, redis_url, REPROMPT_WORKER_CONCURRENCY=conc)
        api = stack.service("api", env)
        procs = [stack.service("worker", env, name=f"worker{i}") for i in range(workers)]
        time.sleep(0.5)
        for w in procs:
            os.kill(w.pid, signal.SIGSTOP)
        try:
            _, submit_fails = asyncio.run(submit(api.url, n))
        finally:
            for w in procs:
                os.kill(w.pid, signal.SIGCONT)
        cpu0 = sum(cpu_seconds(w.pid) for w in procs)
        redis0 = cpu_seconds(redis_pid)
        sampler = Sampler(procs, period=0.2)
        sampler.start()
        done_t = sampler.wait_finished(n - submit_fails, timeout=600)
        sampler.halt.set()
        sampler.join()
        cpu1 = sum(cpu_seconds(w.pid) for w in procs)
        redis1 = cpu_seconds(redis_pid)
        failed = failed_jobs(api.url)
    s = sampler.samples
    undercount = n - submit_fails - s[-1]["finished"]
    floor = n / (workers * min(conc, 100)) * lat / 1000
    return {
        "workers": workers,
        "jobs": n,
        "concurrency": conc,
        "latency_ms": lat,
        "submit_fails": submit_fails,
        "failed_jobs": failed,
        "finished_undercount": undercount,
        "drain_s": done_t,
        "throughput": n / done_t,
        "floor_s": floor,
        "floor_nopool_s": n / (workers * conc) * lat / 1000,
        "peak_in_progress": max(x["in_progress"] for x in s),
        "peak_rss_mb": max(x["rss_mb"] for x in s) / workers,
        "worker_cpu_ms_job": (cpu1 - cpu0) / n * 1000,
        "redis_cpu_ms_job": (redis1 - redis0) / n * 1000,
        "worker_cpu_util": (cpu1 - cpu0) / done_t,
    }


def plot(holds: list[dict[str, Any]], drains: list[dict[str, Any]]) -> None:
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        print("matplotlib not installed: no plot")
        return
    fig, (a, b) = plt.subplots(1, 2, figsize=(12, 4.2))
    a2 = a.twinx()
    for h, color in zip(holds, ("C0", "C1", "C2", "C3"), strict=False):
        s = h["samples"]
        t = [x["t"] for x in s]
        label = f"{h['jobs']} jobs, {h['latency_ms'] / 1000:g} s model"
        a.plot(t, [x["in_progress"] for x in s], color=color, label=f"held: {label}")
        a2.plot(t, [x["rss_mb"] for x in s], ":", color=color)
    a.set_xlabel("seconds after the thaw")
    a.set_ylabel("jobs in progress")
    a2.set_ylabel("worker RSS MB (dotted)")
    a.set_title("one worker holding jobs")
    a.legend(loc="upper right", fontsize=8)
    a.grid(alpha=0.3)
    ws = [str(d["workers"]) for d in drains]
    b.bar(ws, [d["drain_s"] for d in drains], label="measured")
    b.plot(ws, [d["floor_nopool_s"] for d in drains], "g:o", label="floor: slots × latency")
    b.set_xlabel("worker processes")
    b.set_ylabel("seconds")
    d0 = drains[0]
    b.set_title(
        f"drain {d0['jobs']} jobs, sim {d0['latency_ms']} ms, concurrency {d0['concurrency']}"
    )
    b.legend(fontsize=8)
    b.grid(alpha=0.3, axis="y")
    fig.tight_layout()
    fig.savefig(OUT / "scale.png", dpi=90)
    plt.close(fig)


def profile_md(prof: dict[str, Any] | None, title: str) -> list[str]:
    if not prof:
        return []
    return [
        f"**{title}** ({prof['samples']} on-CPU samples)",
        "",
        "| top functions by self time | self |",
        "|---|---:|",
        *[f"| `{k}` | {v:.1%} |" for k, v in prof["self"][:10]],
        "",
        "| package (inclusive: anywhere on the stack) | share |",
        "|---|---:|",
        *[f"| {k} | {v:.1%} |" for k, v in prof["inclusive_buckets"][:8]],
        "",
    ]


def saved_before() -> dict[str, Any]:
    return json.loads(BEFORE.read_text()) if BEFORE.exists() else {"holds": {}}


def _top(x: dict[str, Any]) -> str:
    prof = x.get("profile")
    if not prof:
        return "–"
    name, share = prof["self"][0]
    return f"`{name.split(' (')[0]}` {share:.0%}"


def _ended(x: dict[str, Any]) -> str:
    if x.get("stalled"):
        return f"**stalled**: nothing moved for {STALL_S:.0f} s"
    return "every job finished"


def _statuses(x: dict[str, Any]) -> str:
    c = x.get("census")
    if not c:
        return "–"
    counts = ", ".join(f"{v} {k}" for k, v in sorted(c["status"].items()))
    return f"{counts}; {c['leases']} leases, {c['queued']} queued"


def _signs(x: dict[str, Any]) -> str:
    found = {k: v for k, v in x.get("log_signs", {}).items() if v}
    return ", ".join(f"{v} {k}" for k, v in found.items()) or "none"


# A hold's table: each measure's label and how to show it from the hold's record.
HOLD_ROWS: list[tuple[str, Callable[[dict[str, Any]], str]]] = [
    (
        "**peak jobs held** (`reprompt_jobs_in_progress`)",
        lambda x: f"**{x['peak_in_progress']:.0f}**",
    ),
    ("time to the peak after the thaw", lambda x: f"{x['t_peak']:.1f} s"),
    ("mean jobs held, thaw → end", lambda x: f"{x['mean_held']:.0f}"),
    ("how the run ended", _ended),
    ("thaw → end", lambda x: f"{x['total_s']:.0f} s ({x['throughput']:.0f} jobs/s)"),
    ("mean model call as the worker timed it", lambda x: f"{x['mean_call_s']:.1f} s"),
    ("worker RSS idle → peak", lambda x: f"{x['base_rss_mb']:.0f} → {x['peak_rss_mb']:.0f} MB"),
    (
        "**RSS per held job** ((peak − idle) ÷ peak held)",
        lambda x: f"**{x['kb_per_job']:.0f} KB**",
    ),
    ("worker open fds idle → peak", lambda x: f"{x['base_fds']} → {x['peak_fds']}"),
    (
        "**worker CPU**, thaw → end (100 % = one core)",
        lambda x: f"**{x['worker_cpu_util']:.0%}**",
    ),
    (
        "CPU per job, thaw → end: worker / redis / sim (ms)",
        lambda x: " / ".join(f"{x['cpu_ms_job'][k]:.1f}" for k in ("worker", "redis", "sim")),
    ),
    (
        "**heartbeat round trips / s** (EVALSHA)",
        lambda x: f"**{x['heartbeat_calls_per_s']:.1f}**",
    ),
    (
        "heartbeat Redis commands / s (with those the scripts ran)",
        lambda x: f"{x['heartbeat_commands_per_s']:.0f}",
    ),
    ("leases renewed / s", lambda x: f"{x['leases_renewed_per_s']:.0f}"),
    (
        "**leases expired** (`reprompt_leases_expired_total`)",
        lambda x: f"**{x['leases_expired']:.0f}**",
    ),
    ("jobs in Redis at the end", _statuses),
    ("worker log: trouble", _signs),
    ("top function by self time (py-spy, first 20 s)", _top),
]


def hold_table(h: dict[str, Any], b: dict[str, Any] | None) -> list[str]:
    """One hold as a Markdown table, beside its saved 'before' when there is one."""
    if b is None:
        out = ["| measure | value |", "|---|---:|"]
        return out + [f"| {label} | {fmt(h)} |" for label, fmt in HOLD_ROWS]
    out = [f"| measure | before: {b['code']} | after: {h['code']} |", "|---|---:|---:|"]
    return out + [f"| {label} | {fmt(b)} | {fmt(h)} |" for label, fmt in HOLD_ROWS]


def write_report(
    holds: list[dict[str, Any]],
    drains: list[dict[str, Any]],
    info: dict[str, str],
    quick: bool,
    elapsed: float,
) -> None:
    plot(holds, drains)
    cmd = "python bench/scale.py" + (" --quick" if quick else "")
    before = saved_before()
    out = _holds_section(holds, before, cmd, elapsed)
    out += _profiles_section(holds, before)
    out += _drain_section(drains)
    out += page_end(
        info,
        f"Seeds: simulator `--seed {SEED}`. Submission concurrency {SUBMIT_CONCURRENCY}.",
        "",
    )
    notes = Path(__file__).with_name("scale_notes.md")
    text = with_notes("\n".join(out), notes, quick=quick)
    (OUT / "scale.md").write_text(text)
    (OUT / "scale.json").write_text(
        json.dumps(
            {"holds": holds, "drain": drains, "info": info, "elapsed": elapsed},
            indent=1,
            default=str,
        )
    )
    print(f"wrote {OUT / 'scale.md'}")


def _holds_section(
    holds: list[dict[str, Any]], before: dict[str, Any], cmd: str, elapsed: float
) -> list[str]:
    """The page's title and how it measures, then each hold's table."""
    out = [
        "# Scale: jobs in flight on one worker, and queue drain",
        "",
        f"Produced by `{cmd}` (took {elapsed:.0f} s) on a shared, noisy 2-core machine; the"
        " *before* columns by `python bench/scale.py --before main` on the same machine"
        f" ({before.get('date', 'date unknown')}), saved in `scale-before.json`. One run each:"
        " read ratios and orders of magnitude, not the last digit.",
        "",
        "## How many jobs one worker holds",
        "",
        "One redis-server, one `reprompt api`, one `reprompt worker` with"
        " `REPROMPT_WORKER_CONCURRENCY` equal to the jobs queued,"
        f" `REPROMPT_LEASE_MS={HOLD_LEASE_MS}` and `REPROMPT_HEARTBEAT_MS={HOLD_HEARTBEAT_MS}`"
        " (every held job is renewed several times); the simulator answers every call"
        " correctly after its latency. The single-turn jobs are queued with `POST /v1/jobs`"
        f" by {SUBMIT_CONCURRENCY} callers while the worker is frozen (SIGSTOP); then it is"
        " thawed and sampled every 250 ms (`/metrics`, `/proc`) until the last job ends."
        " py-spy records the worker's first 20 s; `redis-cli monitor` records every Redis"
        " command (heartbeats are counted by their script's SHA1); at the end every job in"
        " Redis is counted by status.",
        "",
    ]
    for h in holds:
        b = before["holds"].get(key(h["jobs"], h["latency_ms"]))
        out += [
            f"### {h['jobs']:,} jobs on a {h['latency_ms'] / 1000:g} s model",
            "",
            *hold_table(h, b),
            "",
        ]
    return out


def _profiles_section(holds: list[dict[str, Any]], before: dict[str, Any]) -> list[str]:
    """The worker's py-spy profiles, before and after, where the before was busy."""
    out = ["### Where the worker's CPU goes (py-spy)", ""]
    for i, h in enumerate(holds):
        b = before["holds"].get(key(h["jobs"], h["latency_ms"]))
        what = f"{h['jobs']:,} jobs on a {h['latency_ms'] / 1000:g} s model"
        busy = b is not None and b.get("profile") and b["profile"]["samples"] > 200
        if busy:
            out += profile_md(b["profile"], f"Before ({b['code']}), {what}")
        if busy or i == 0:
            out += profile_md(h.get("profile"), f"After, {what}")
    return out


def _drain_section(drains: list[dict[str, Any]]) -> list[str]:
    """The drains' table: 1, 2 and 4 workers against the floor."""
    return [
        "Folded stacks: `scale-worker-<jobs>@<latency ms>[-before].folded.gz`"
        " (`zcat … | flamegraph.pl`).",
        "",
        "## Queue drain with 1, 2 and 4 workers",
        "",
        f"{drains[0]['jobs']} jobs queued while the workers were frozen (SIGSTOP), then timed"
        " from SIGCONT until the last `reprompt_jobs_finished_total`; simulator"
        f" {drains[0]['latency_ms']} ms per call, `REPROMPT_WORKER_CONCURRENCY="
        f"{drains[0]['concurrency']}` per worker. *floor* = jobs ÷ (workers × concurrency) ×"
        " latency: the drain time if CPU were free.",
        "",
        "| workers | drain s | jobs/s | floor s | peak in progress (all) |"
        " RSS MB/worker | worker CPU ms/job | redis CPU ms/job | worker CPU util (cores) |"
        " failed | finished_total undercount |",
        "|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
        *[
            f"| {d['workers']} | {d['drain_s']:.2f} | {d['throughput']:.0f} |"
            f" {d['floor_nopool_s']:.2f} | {d['peak_in_progress']:.0f} | {d['peak_rss_mb']:.0f} |"
            f" {d['worker_cpu_ms_job']:.1f} | {d['redis_cpu_ms_job']:.2f} |"
            f" {d['worker_cpu_util']:.2f} | {d['failed_jobs']} | {d['finished_undercount']:.0f} |"
            for d in drains
        ],
        "",
        "![scale](scale.png)",
        "",
    ]


def commit_of(ref: str) -> str:
    return subprocess.run(
        ["git", "rev-parse", "--short", ref], cwd=ROOT, check=True, capture_output=True, text=True
    ).stdout.strip()


def export(ref: str) -> Path:
    """The tree of git ``ref`` in a temporary directory (removed at exit)."""
    out = Path(tempfile.mkdtemp(prefix=f"rp-code-{commit_of(ref)}-"))
    archive = subprocess.run(["git", "archive", ref], cwd=ROOT, check=True, capture_output=True)
    subprocess.run(["tar", "-x", "-C", str(out)], input=archive.stdout, check=True)
    atexit.register(shutil.rmtree, out, ignore_errors=True)
    return out


def brief(h: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in h.items() if k not in ("samples", "redis_commands", "profile")}


def main() -> int:
    global OUT
    ns = _arguments()
    if ns.report_only:
        saved = json.loads((DOCS / "scale.json").read_text())
        write_report(saved["holds"], saved["drain"], saved["info"], False, saved["elapsed"])
        return 0
    print("fd limit", raise_fd_limit())
    scratch = ns.quick or ns.hold_only or bool(ns.jobs and not ns.before)
    OUT = Path(tempfile.gettempdir()) / "reprompt-bench" if scratch else DOCS
    OUT.mkdir(parents=True, exist_ok=True)
    started = time.monotonic()
    holds = QUICK_HOLDS if ns.quick else HOLDS
    if ns.jobs:
        holds = [{"jobs": ns.jobs, "latency_ms": ns.latency_ms}]
    info = machine()
    if ns.before:
        _hold_before(ns.before, holds, info, save=not ns.quick)
        return 0
    results = _hold_all(holds, profile=not ns.quick)
    if scratch and not ns.quick:
        return 0
    drain_plan = QUICK_DRAIN if ns.quick else DRAIN
    drains = []
    for w in drain_plan["workers"]:
        drains.append(drain(drain_plan, w))
        print(drains[-1])
    write_report(results, drains, info, ns.quick, time.monotonic() - started)
    return 0


def _arguments() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="a smoke run (about a minute)")
    parser.add_argument(
        "--report-only",
        action="store_true",
        help="rewrite the report from docs/benchmarks/scale.json",
    )
    parser.add_argument(
        "--before",
        metavar="REF",
        help="run the holds with the services of git REF (e.g. main) and save them as the"
        " 'before' of the report's tables (docs/benchmarks/scale-before.json)",
    )
    parser.add_argument(
        "--hold-only",
        action="store_true",
        help="run the holds only and print them beside the saved 'before'; writes nothing"
        " under docs/",
    )
    parser.add_argument("--jobs", type=int, help="one hold of this many jobs (and slots)")
    parser.add_argument("--latency-ms", type=int, default=2000, help="with --jobs: the model")
    return parser.parse_args()


def _hold_before(
    ref: str, holds: list[dict[str, Any]], info: dict[str, str], *, save: bool
) -> None:
    """``--before REF``: the holds run with REF's services, saved as the report's before."""
    code, tag = export(ref), f"-{ref} ({commit_of(ref)})"
    saved = saved_before()
    for plan in holds:
        h = hold(plan["jobs"], plan["latency_ms"], profile=True, code=code, tag=tag)
        print(brief(h))
        saved["holds"][key(plan["jobs"], plan["latency_ms"])] = h
    saved |= {"info": info, "date": info["date"]}
    if save:
        BEFORE.write_text(json.dumps(saved, indent=1, default=str))
        print(f"wrote {BEFORE}")


def _hold_all(holds: list[dict[str, Any]], *, profile: bool) -> list[dict[str, Any]]:
    """Every hold with this tree's services, each printed beside its saved before."""
    results = []
    for plan in holds:
        h = hold(plan["jobs"], plan["latency_ms"], profile=profile)
        print(brief(h))
        b = saved_before()["holds"].get(key(plan["jobs"], plan["latency_ms"]))
        print("\n".join(hold_table(h, b)))
        results.append(h)
        # Kept as it goes: a later failure does not cost the holds already run.
        kept = Path(tempfile.gettempdir()) / "reprompt-bench" / "scale-holds.json"
        kept.parent.mkdir(exist_ok=True)
        kept.write_text(json.dumps(results, indent=1, default=str))
    return results


if __name__ == "__main__":
    raise SystemExit(main())
