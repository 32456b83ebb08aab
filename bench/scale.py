"""Scale: thousands of jobs in flight on one worker, and queue drain with 1, 2, 4 workers.

    .venv/bin/python bench/scale.py            # full run (about 3 minutes)
    .venv/bin/python bench/scale.py --quick    # smoke check (< 60 s)

**Hold.** One redis-server, one ``reprompt api``, one ``reprompt worker`` with
``REPROMPT_WORKER_CONCURRENCY`` high, a slow simulator (seconds per call). Jobs are
submitted with ``POST /v1/jobs`` by a concurrency-limited client as fast as the API takes
them; the worker's ``/metrics`` (``reprompt_jobs_in_progress``,
``reprompt_jobs_finished_total``) and ``/proc`` (VmRSS, utime+stime, open fds) are
sampled every 250 ms until every job has finished.

**Drain.** For 1, 2 and 4 worker processes (``REPROMPT_WORKER_CONCURRENCY`` each): start
them, freeze them (SIGSTOP), queue the same number of jobs, thaw them (SIGCONT) and time
until the last job has finished. Writes docs/benchmarks/scale.md and scale.png.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

import httpx

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.common import (
    DOCS,
    Proc,
    Stack,
    client,
    cpu_seconds,
    job_body,
    machine,
    machine_md,
    metric_sum,
    open_fds,
    raise_fd_limit,
    rss_mb,
    run_closed_loop,
)

SEED = 1
SUBMIT_CONCURRENCY = 32
OUT = DOCS


def plan(quick: bool) -> dict[str, Any]:
    if quick:
        return {
            "hold_jobs": 300,
            "hold_concurrency": 400,
            "hold_latency": 2000,
            "drain_jobs": 200,
            "drain_concurrency": 200,
            "drain_latency": 1000,
            "workers": [1, 2],
        }
    return {
        "hold_jobs": 2000,
        "hold_concurrency": 2000,
        "hold_latency": 3000,
        "drain_jobs": 1000,
        "drain_concurrency": 200,
        "drain_latency": 1000,
        "workers": [1, 2, 4],
    }


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
        self.halt = threading.Event()
        self.t0 = time.monotonic()
        # One keep-alive client: a new connection per sample costs the box real CPU.
        self.http = httpx.Client(timeout=5, trust_env=False)

    def read(self) -> dict[str, float]:
        in_progress = finished = calls = 0.0
        for w in self.workers:
            try:
                text = self.http.get(w.metrics_url).text
            except httpx.HTTPError:
                continue
            in_progress += metric_sum(text, "reprompt_jobs_in_progress")
            finished += metric_sum(text, "reprompt_jobs_finished_total")
            calls += metric_sum(text, "reprompt_llm_calls_total")
        return {
            "t": time.monotonic() - self.t0,
            "in_progress": in_progress,
            "finished": finished,
            "calls": calls,
            "rss_mb": sum(rss_mb(w.pid) for w in self.workers),
            "cpu_s": sum(cpu_seconds(w.pid) for w in self.workers),
            "fds": sum(open_fds(w.pid) for w in self.workers),
        }

    def run(self) -> None:
        with self.http:
            while not self.halt.is_set():
                self.samples.append(self.read())
                self.halt.wait(self.period)

    def wait_finished(self, n: int, timeout: float) -> float:
        """Until every job has finished: ``reprompt_jobs_finished_total`` reaches ``n``, or
        (it can undercount, see the report) every job has made its one model call and no
        job is in progress any more."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            last = self.samples[-1] if self.samples else None
            if last and (
                last["finished"] >= n or (last["calls"] >= n and last["in_progress"] == 0)
            ):
                return last["t"]
            time.sleep(self.period / 2)
        raise TimeoutError(f"jobs did not finish: {self.samples[-1] if self.samples else None}")


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


def hold(p: dict[str, Any], profile: bool) -> dict[str, Any]:
    n, conc, lat = p["hold_jobs"], p["hold_concurrency"], p["hold_latency"]
    with Stack() as stack:
        sim = stack.sim(latency_ms=lat, seed=SEED)
        redis_url, redis_pid = stack.redis()
        env = stack.env(sim.url, redis_url, REPROMPT_WORKER_CONCURRENCY=conc)
        api = stack.service("api", env)
        worker = stack.service("worker", env, name="worker")
        time.sleep(1.0)
        base = {
            "rss_mb": rss_mb(worker.pid),
            "fds": open_fds(worker.pid),
            "redis_rss_mb": rss_mb(redis_pid),
        }
        cpu0 = {
            "worker": cpu_seconds(worker.pid),
            "api": cpu_seconds(api.pid),
            "redis": cpu_seconds(redis_pid),
            "sim": cpu_seconds(sim.pid),
        }
        os.kill(worker.pid, signal.SIGSTOP)  # queue everything first, then let it claim
        try:
            submit_s, submit_fails = asyncio.run(submit(api.url, n))
        finally:
            os.kill(worker.pid, signal.SIGCONT)
        redis_peak = rss_mb(redis_pid)
        sampler = Sampler([worker])
        sampler.start()
        folded = DOCS / "scale-worker.folded"
        spy = start_pyspy(worker.pid, folded, 20) if profile else None
        t_submit = 0.0
        done_t = sampler.wait_finished(n - submit_fails, timeout=900)
        sampler.halt.set()
        sampler.join()
        cpu1 = {
            "worker": cpu_seconds(worker.pid),
            "api": cpu_seconds(api.pid),
            "redis": cpu_seconds(redis_pid),
            "sim": cpu_seconds(sim.pid),
        }
        failed = failed_jobs(api.url)
    prof = None
    if spy is not None:
        spy.wait(timeout=60)
        if folded.exists():
            from bench.overhead import compress, summarize_profile

            prof = summarize_profile(compress(folded))
    s = sampler.samples
    undercount = n - submit_fails - s[-1]["finished"]
    peak = max(x["in_progress"] for x in s)
    t_peak = next(x["t"] for x in s if x["in_progress"] == peak)
    peak_rss = max(x["rss_mb"] for x in s)
    return {
        "jobs": n,
        "concurrency": conc,
        "latency_ms": lat,
        "submit_s": submit_s,
        "submit_rps": n / submit_s,
        "submit_fails": submit_fails,
        "failed_jobs": failed,
        "finished_undercount": undercount,
        "total_s": done_t - t_submit,
        "throughput": n / (done_t - t_submit),
        "peak_in_progress": peak,
        "t_peak": t_peak,
        "base_rss_mb": base["rss_mb"],
        "peak_rss_mb": peak_rss,
        "kb_per_job": (peak_rss - base["rss_mb"]) * 1024 / peak if peak else 0,
        "base_fds": base["fds"],
        "peak_fds": max(x["fds"] for x in s),
        "redis_rss_mb": (base["redis_rss_mb"], redis_peak),
        "cpu_s": {k: cpu1[k] - cpu0[k] for k in cpu0},
        "cpu_ms_job": {k: (cpu1[k] - cpu0[k]) / n * 1000 for k in cpu0},
        "samples": s,
        "profile": prof,
    }


def drain(p: dict[str, Any], workers: int) -> dict[str, Any]:
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


def plot(h: dict[str, Any], drains: list[dict[str, Any]]) -> None:
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        print("matplotlib not installed: no plot")
        return
    fig, (a, b) = plt.subplots(1, 2, figsize=(12, 4.2))
    s = h["samples"]
    t = [x["t"] for x in s]
    a.plot(t, [x["in_progress"] for x in s], label="jobs in progress (worker)")
    a.plot(t, [x["finished"] for x in s], label="jobs finished")
    a.set_xlabel("seconds")
    a.set_ylabel("jobs")
    a2 = a.twinx()
    a2.plot(t, [x["rss_mb"] for x in s], "r:", label="worker RSS (MB)")
    a2.set_ylabel("RSS MB", color="r")
    a.set_title(f"one worker, concurrency {h['concurrency']}, sim {h['latency_ms']} ms/call")
    a.legend(loc="upper left", fontsize=8)
    a2.legend(loc="lower right", fontsize=8)
    a.grid(alpha=0.3)
    ws = [d["workers"] for d in drains]
    b.bar([str(w) for w in ws], [d["drain_s"] for d in drains], label="measured")
    b.plot(
        [str(w) for w in ws],
        [d["floor_s"] for d in drains],
        "k--o",
        label="floor: 100 provider connections/worker",
    )
    b.plot(
        [str(w) for w in ws],
        [d["floor_nopool_s"] for d in drains],
        "g:o",
        label="floor: concurrency slots only",
    )
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


def profile_md(prof: dict[str, Any] | None) -> list[str]:
    if not prof:
        return []
    return [
        "### Where the worker's CPU goes while it holds them (py-spy)",
        "",
        "`py-spy record --rate 100 --format raw --nonblocking --duration 20` on the worker"
        f" from the thaw: {prof['samples']} on-CPU samples; folded stacks in"
        " `scale-worker.folded.gz`.",
        "",
        "| top functions by self time | self |",
        "|---|---:|",
        *[f"| `{k}` | {v:.1%} |" for k, v in prof["self"][:12]],
        "",
        "| package (inclusive: anywhere on the stack) | share |",
        "|---|---:|",
        *[f"| {k} | {v:.1%} |" for k, v in prof["inclusive_buckets"][:10]],
        "",
    ]


def write_report(
    h: dict[str, Any],
    drains: list[dict[str, Any]],
    info: dict[str, str],
    quick: bool,
    elapsed: float,
) -> None:
    plot(h, drains)
    cmd = "python bench/scale.py" + (" --quick" if quick else "")
    c = h["cpu_ms_job"]
    out = [
        "# Scale: jobs in flight on one worker, and queue drain",
        "",
        f"Produced by `{cmd}` (took {elapsed:.0f} s) on a shared, noisy 2-core machine;"
        " every number comes from that one run.",
        "",
        "## How many jobs one worker holds",
        "",
        f"One redis-server, one `reprompt api`, one `reprompt worker` with"
        f" `REPROMPT_WORKER_CONCURRENCY={h['concurrency']}`; the simulator answers every call"
        f" correctly after {h['latency_ms']} ms (`--latency-ms {h['latency_ms']}`)."
        f" {h['jobs']} single-turn jobs queued with `POST /v1/jobs` by {SUBMIT_CONCURRENCY}"
        " concurrent callers while the worker was frozen (SIGSTOP), so the API's intake rate"
        " does not limit how many the worker can take; then the worker was thawed (SIGCONT)"
        " and its `/metrics` and `/proc` sampled every 250 ms until the last job finished.",
        "",
        "| measure | value |",
        "|---|---:|",
        f"| jobs submitted | {h['jobs']} ({h['submit_fails']} refused) |",
        f"| queueing time (`reprompt api` intake, worker frozen) | {h['submit_s']:.1f} s"
        f" ({h['submit_rps']:.0f} jobs/s) |",
        f"| **peak `reprompt_jobs_in_progress` (one worker)** | **{h['peak_in_progress']:.0f}** |",
        f"| jobs failed (`GET /v1/jobs?status=failed`) | {h['failed_jobs']} |",
        f"| jobs that succeeded in Redis but are missing from `reprompt_jobs_finished_total` |"
        f" {h['finished_undercount']:.0f} |",
        f"| thaw → last job finished | {h['total_s']:.1f} s ({h['throughput']:.1f} jobs/s) |",
        f"| worker RSS idle → peak | {h['base_rss_mb']:.0f} MB → {h['peak_rss_mb']:.0f} MB |",
        f"| RSS per held job | {h['kb_per_job']:.0f} KB |",
        f"| worker open fds idle → peak | {h['base_fds']} → {h['peak_fds']} |",
        f"| redis-server RSS idle → after submit | {h['redis_rss_mb'][0]:.0f} MB →"
        f" {h['redis_rss_mb'][1]:.0f} MB |",
        f"| CPU ms per job (submit + run): worker / api / redis / sim | {c['worker']:.1f} /"
        f" {c['api']:.1f} /"
        f" {c['redis']:.1f} / {c['sim']:.1f} |",
        f"| time to reach the peak after thaw | {h['t_peak']:.1f} s |",
        f"| worker CPU seconds (whole run) | {h['cpu_s']['worker']:.1f} s |",
        "",
        *profile_md(h.get("profile")),
        "## Queue drain with 1, 2 and 4 workers",
        "",
        f"{drains[0]['jobs']} jobs queued while the workers were frozen (SIGSTOP), then timed"
        " from SIGCONT until the last `reprompt_jobs_finished_total`; simulator"
        f" {drains[0]['latency_ms']} ms per call, `REPROMPT_WORKER_CONCURRENCY="
        f"{drains[0]['concurrency']}` per worker. *floor* = jobs ÷ (workers × concurrency) ×"
        " latency: the drain time if CPU were free (each worker's provider connection pool is"
        " sized to its concurrency).",
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
        "## What this means",
        "",
        "<!-- ANALYSIS -->",
        "",
        "## Machine",
        "",
        machine_md(info),
        "",
        f"Seeds: simulator `--seed {SEED}`. Submission concurrency {SUBMIT_CONCURRENCY}.",
        "",
    ]
    text = "\n".join(out)
    analysis = Path(__file__).with_name("scale_notes.md")
    if analysis.exists() and not quick:
        text = text.replace("<!-- ANALYSIS -->", analysis.read_text().strip())
    (OUT / "scale.md").write_text(text)
    (OUT / "scale.json").write_text(
        json.dumps(
            {"hold": h, "drain": drains, "info": info, "elapsed": elapsed}, indent=1, default=str
        )
    )
    print(f"wrote {OUT / 'scale.md'}")


def main() -> int:
    global OUT
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="a smoke run (< 60 s)")
    parser.add_argument(
        "--report-only",
        action="store_true",
        help="rewrite the report from docs/benchmarks/scale.json",
    )
    ns = parser.parse_args()
    if ns.report_only:
        saved = json.loads((DOCS / "scale.json").read_text())
        write_report(saved["hold"], saved["drain"], saved["info"], False, saved["elapsed"])
        return 0
    print("fd limit", raise_fd_limit())
    OUT = Path(tempfile.gettempdir()) / "reprompt-bench" if ns.quick else DOCS
    OUT.mkdir(parents=True, exist_ok=True)
    started = time.monotonic()
    p = plan(ns.quick)
    info = machine()
    h = hold(p, profile=not ns.quick)
    print({k: v for k, v in h.items() if k != "samples"})
    drains = []
    for w in p["workers"]:
        drains.append(drain(p, w))
        print(drains[-1])
    write_report(h, drains, info, ns.quick, time.monotonic() - started)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
