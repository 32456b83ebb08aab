"""Overhead and throughput: the simulator called directly vs through reprompt.

    .venv/bin/python bench/overhead.py            # full run (a few minutes)
    .venv/bin/python bench/overhead.py --quick    # smoke check (< 60 s)

The same simulator process (``python -m reprompt_sim``, a perfect model: every answer is
valid, so every job is one turn) at zero latency and at 300 ms ± 50, called

- **direct**: ``POST /v1/chat/completions`` with exactly the messages reprompt sends
  (captured from a first job's transcript), and the answer parsed as JSON;
- **generate**: ``POST /v1/generate?waitMs=60000`` through reprompt;
- **jobs**: ``POST /v1/jobs`` then ``GET /v1/jobs/{id}?waitMs=60000``;

at several closed-loop concurrency levels, on two deployments: ``serve`` (one
``reprompt serve`` process: API + in-process worker, on a redis-server like the
embedded one, started by the bench so it can read its command counts) and ``split``
(one redis-server, one ``reprompt api``, two ``reprompt worker``).
CPU per job is utime+stime from /proc of the reprompt processes (and redis-server).
With ``--profile`` (on in the full run) py-spy samples the ``serve`` process during a
32-concurrency zero-latency ``/v1/generate`` run. Writes docs/benchmarks/overhead.md
and docs/benchmarks/overhead.png.
"""

from __future__ import annotations

import argparse
import collections
import gzip
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench import loadgen
from bench.common import (
    DOCS,
    Proc,
    Stack,
    children,
    job_body,
    machine,
    page_end,
    percentile,
    raise_fd_limit,
    run_closed_loop,
    total_cpu,
    with_notes,
)
from bench.loadgen import Origin, origins, runner

BEFORE = DOCS / "overhead-before.json"
SEED = 1
OUT = DOCS  # --quick writes to $TMPDIR/reprompt-bench instead
WAIT_MS = 60_000


def plan(quick: bool) -> dict[str, Any]:
    if quick:
        return {
            "latencies": [(0, 0), (300, 50)],
            "concurrency": [1, 16],
            "n": lambda c, lat: 40 if lat == 0 else max(6, 3 * c),
            "deployments": ["serve", "split"],
        }
    return {
        "latencies": [(0, 0), (300, 50)],
        "concurrency": [1, 8, 32, 64],
        "n": lambda c, lat: 300 if lat == 0 else max(30, min(400, 10 * c)),
        "deployments": ["serve", "split"],
    }


# ---------------------------------------------------------------- load paths


def direct_call(http: Sequence[Origin], messages: list[dict[str, str]]) -> Any:
    body = json.dumps(
        {"model": "sim-model", "messages": messages, "max_completion_tokens": 1024}
    ).encode()

    async def call(i: int) -> bool:
        r = await http[i % len(http)].post("/v1/chat/completions", body)
        if r.status != 200:
            return False
        json.loads(r.json()["choices"][0]["message"]["content"])
        return True

    return call


def generate_call(http: Sequence[Origin]) -> Any:
    async def call(i: int) -> bool:
        r = await http[i % len(http)].post(f"/v1/generate?waitMs={WAIT_MS}", job_body(i))
        return r.status == 200 and r.json()["status"] == "succeeded"

    return call


def jobs_call(http: Sequence[Origin]) -> Any:
    async def call(i: int) -> bool:
        h = http[i % len(http)]
        r = await h.post("/v1/jobs", job_body(i))
        if r.status != 202:
            return False
        job_id = r.json()["id"]
        while True:
            r = await h.get(f"/v1/jobs/{job_id}?waitMs={WAIT_MS}")
            status: str = r.json()["status"]
            if status not in ("queued", "in_progress"):
                return status == "succeeded"

    return call


async def _measure(
    path: str,
    target: str,
    messages: list[dict[str, str]],
    n: int,
    c: int,
    parts: Mapping[str, Sequence[int]],
    sim_pid: int,
    redis_url: str | None = None,
    client: str = "lean",
) -> dict[str, Any]:
    """One cell: ``n`` calls by ``c`` callers; the CPU of each of ``parts`` (a role → its
    processes: redis, api, workers, serve) per job. ``client``: the load generator's HTTP
    client, ``lean`` (bench/loadgen.py) or ``httpx``."""
    async with origins(client, target, c) as http:
        if path == "direct":
            fn = direct_call(http, messages)
        elif path == "generate":
            fn = generate_call(http)
        else:
            fn = jobs_call(http)
        await run_closed_loop(fn, max(c, 4), c)  # warm-up: connections, caches
        cmd0 = redis_stats(redis_url)
        cpu0 = {role: total_cpu(pids) for role, pids in parts.items()}
        sim0, gen0 = total_cpu([sim_pid]), time.process_time()
        wall, lat, fails = await run_closed_loop(fn, n, c)
        cpu1 = {role: total_cpu(pids) for role, pids in parts.items()}
        sim1, gen1 = total_cpu([sim_pid]), time.process_time()
        cmd1 = redis_stats(redis_url)
    by_role = {role: (cpu1[role] - cpu0[role]) / n * 1000 for role in parts}
    return {
        "n": n,
        "fails": fails,
        "wall_s": wall,
        "rps": n / wall,
        "p50_ms": percentile(lat, 0.5) * 1000,
        "p99_ms": percentile(lat, 0.99) * 1000,
        "cpu_ms_job": sum(by_role.values()) if parts else None,
        "cpu_ms_job_by_role": by_role,
        "sim_cpu_ms_job": (sim1 - sim0) / n * 1000,
        "gen_cpu_ms_job": (gen1 - gen0) / n * 1000,
        "redis_cmds_job": (cmd1["total"] - cmd0["total"]) / n if redis_url else None,
        "redis_cmd_mix": {
            k: round((v - cmd0.get(k, 0)) / n, 2)
            for k, v in cmd1.items()
            if k != "total" and v - cmd0.get(k, 0) >= n / 10
        }
        if redis_url
        else {},
    }


def measure(
    path: str,
    target: str,
    messages: list[dict[str, str]],
    n: int,
    c: int,
    parts: Mapping[str, Sequence[int]],
    sim_pid: int,
    redis_url: str | None = None,
    client: str = "lean",
) -> dict[str, Any]:
    """``_measure`` on the loop its client runs on."""
    return runner(client)(_measure(path, target, messages, n, c, parts, sim_pid, redis_url, client))


def by_role(rows: list[dict[str, Any]]) -> list[str]:
    """The CPU ms per job of each process of a deployment, from the same cells."""
    roles = ("api", "workers", "serve", "redis")
    out = [
        "## CPU per job by process",
        "",
        "The `CPU ms/job` column above, split by process (`serve`: API and worker in one).",
        "",
        "| latency | deployment | path | c | " + " | ".join(roles) + " |",
        "|---|---|---|---:|" + "---:|" * len(roles),
    ]
    for r in rows:
        parts = r.get("cpu_ms_job_by_role") or {}
        if not parts:
            continue
        cells = " | ".join(f"{parts[k]:.2f}" if k in parts else "–" for k in roles)
        out.append(f"| {r['latency']} | {r['deployment']} | {r['path']} | {r['c']} | {cells} |")
    return [*out, ""]


def redis_stats(url: str | None) -> dict[str, int]:
    """total_commands_processed and calls per command (``INFO commandstats``)."""
    if not url:
        return {"total": 0}
    import redis

    with redis.Redis.from_url(url) as r:
        out = {"total": int(r.info("stats")["total_commands_processed"])}
        for name, st in r.info("commandstats").items():
            out[name.removeprefix("cmdstat_")] = int(st["calls"])
    return out


def capture_messages(url: str) -> list[dict[str, str]]:
    auth = {"authorization": loadgen.AUTHORIZATION} if loadgen.AUTHORIZATION else {}
    r = httpx.post(
        f"{url}/v1/generate",
        params={"waitMs": WAIT_MS},
        json=job_body(0),
        timeout=60,
        headers=auth,
    )
    r.raise_for_status()
    return [{"role": m["role"], "content": m["content"]} for m in r.json()["transcript"]][:2]


def deploy(
    stack: Stack, kind: str, sim_url: str, extra: Mapping[str, str] | None = None
) -> tuple[str, list[Proc], dict[str, list[int]], str]:
    """Start a deployment (``extra``: more of its environment); returns (API url,
    processes, the pids whose CPU counts by role, redis url)."""
    redis_url, redis_pid = stack.redis()
    if kind == "serve":
        # The same redis-server the embedded default would start, started here so the bench
        # holds its password (the embedded one's never leaves the serve process).
        env = stack.env(sim_url, redis_url, REPROMPT_WORKER_CONCURRENCY=64) | dict(extra or {})
        srv = stack.service("serve", env)
        return srv.url, [srv], {"redis": [redis_pid], "serve": srv.pids()}, redis_url
    env = stack.env(sim_url, redis_url, REPROMPT_WORKER_CONCURRENCY=32) | dict(extra or {})
    api = stack.service("api", env)
    workers = [stack.service("worker", env, name=f"worker{i}") for i in (1, 2)]
    procs = [api, *workers]
    parts = {"redis": [redis_pid], "api": [api.pid], "workers": [w.pid for w in workers]}
    return api.url, procs, parts, redis_url


# ---------------------------------------------------------------- profile


def profile_serve(
    pid: int,
    url: str,
    messages: list[dict[str, str]],
    sim_pid: int,
    n: int,
    out: Path,
    redis_url: str,
    client: str,
) -> dict[str, Any] | None:
    pyspy = shutil.which("py-spy") or str(Path(sys.executable).parent / "py-spy")
    if not Path(pyspy).exists():
        return None
    raw = out.with_suffix(".folded")
    proc = subprocess.Popen(
        [
            pyspy,
            "record",
            "--pid",
            str(pid),
            "--rate",
            "250",
            "--format",
            "raw",
            "--nonblocking",
            "-o",
            str(raw),
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )
    time.sleep(1.5)
    if proc.poll() is not None:
        print("py-spy failed:", proc.stderr.read().decode()[-500:] if proc.stderr else "")
        return None
    result = measure(
        "generate",
        url,
        messages,
        n,
        32,
        {"serve": [pid, *children(pid)]},
        sim_pid,
        redis_url,
        client,
    )
    proc.send_signal(signal.SIGINT)
    try:
        proc.wait(timeout=30)
    except subprocess.TimeoutExpired:
        proc.kill()
    if not raw.exists():
        return None
    return {"run": result, "summary": summarize_profile(compress(raw))}


def compress(raw: Path) -> Path:
    """Gzip py-spy's folded stacks next to the report (``zcat x.folded.gz | flamegraph.pl``)."""
    packed = raw.with_name(raw.name + ".gz")
    packed.write_bytes(gzip.compress(raw.read_bytes(), mtime=0))
    raw.unlink()
    return packed


BUCKETS = [
    ("redis-py client", ("redis/",)),
    ("httpx / httpcore (provider calls)", ("httpx/", "httpcore/")),
    ("h11 / httptools (HTTP parsing)", ("h11/", "httptools/")),
    ("uvicorn (server)", ("uvicorn/",)),
    ("starlette / fastapi (routing, responses)", ("starlette/", "fastapi/")),
    ("pydantic (validation, serialization)", ("pydantic/", "pydantic_core/", "pydantic_settings/")),
    ("jsonschema / referencing", ("jsonschema", "referencing/", "rpds")),
    ("prometheus_client", ("prometheus_client/",)),
    ("anyio", ("anyio/",)),
    ("json (stdlib)", ("json/",)),
    ("logging (stdlib)", ("logging/",)),
    ("asyncio (event loop, transports)", ("asyncio/",)),
    ("selectors / socket / ssl (stdlib)", ("selectors.py", "socket.py", "ssl.py")),
    ("reprompt app/core (turn loop, parse, validate)", ("app/core/",)),
    ("reprompt app/providers", ("app/providers/",)),
    ("reprompt app/store/", ("app/store/",)),
    ("reprompt app/api", ("app/api/",)),
    ("reprompt app/worker/", ("app/worker/",)),
    ("reprompt app (other)", ("app/",)),
]


def _where(frame: str) -> str:
    """The file of a py-spy frame ``function (path/file.py:123)``, relative to site-packages."""
    where = frame.rpartition(" (")[2].rstrip(")").rsplit(":", 1)[0]
    for marker in ("/site-packages/", "/work/main/", "/lib/python3.12/", "/lib/python3"):
        if marker in where:
            return where.split(marker, 1)[1]
    # reprompt run from another checkout (a worktree, an export of an earlier commit).
    for package in ("/app/", "/reprompt_sim/", "/bench/"):
        if package in where:
            return package[1:] + where.rsplit(package, 1)[1]
    return where


def bucket_of(frame: str) -> str:
    where = _where(frame)
    for name, prefixes in BUCKETS:
        if any(where.startswith(p) for p in prefixes):
            return name
    return "other (stdlib, C extensions)"


def summarize_profile(raw: Path) -> dict[str, Any]:
    self_fn: collections.Counter[str] = collections.Counter()
    self_bucket: collections.Counter[str] = collections.Counter()
    incl_app: collections.Counter[str] = collections.Counter()
    incl_bucket: collections.Counter[str] = collections.Counter()
    total = 0
    data = raw.read_bytes()
    text = (gzip.decompress(data) if raw.suffix == ".gz" else data).decode()
    for line in text.splitlines():
        stack, _, count_s = line.rpartition(" ")
        if not stack or not count_s.isdigit():
            continue  # a torn sample (py-spy --nonblocking reads a running process)
        count = int(count_s)
        frames = [f for f in stack.split(";") if not f.startswith(("process ", "thread "))]
        if not frames:
            continue
        total += count
        leaf = frames[-1]
        self_fn[_fn(leaf)] += count
        self_bucket[bucket_of(leaf)] += count
        seen: set[str] = set()
        for f in frames:
            if _where(f).startswith("app/"):
                key = _fn(f)
                if key not in seen:
                    seen.add(key)
                    incl_app[key] += count
        for b in {bucket_of(f) for f in frames}:
            incl_bucket[b] += count
    return {
        "samples": total,
        "buckets": [(k, v / total) for k, v in self_bucket.most_common()],
        "inclusive_buckets": [(k, v / total) for k, v in incl_bucket.most_common()],
        "self": [(k, v / total) for k, v in self_fn.most_common(15)],
        "inclusive_app": [(k, v / total) for k, v in incl_app.most_common(20)],
    }


def _fn(frame: str) -> str:
    name = frame.rpartition(" (")[0]
    return f"{name} ({_where(frame)})"


# ---------------------------------------------------------------- report


def write_report(
    rows: list[dict[str, Any]],
    prof: dict[str, Any] | None,
    info: dict[str, str],
    quick: bool,
    argv: list[str],
    elapsed: float,
) -> None:
    derive(rows)
    plot(rows)
    client = info.get("client", "httpx")
    out = _setup_section(client, quick, elapsed)
    out += _latency_tables(rows)
    out += ["![throughput and latency](overhead.png)", ""]
    out += by_role(rows)
    if BEFORE.exists() and not quick:
        out += before_after(rows, json.loads(BEFORE.read_text()), client)
    if prof:
        out += _profile_section(prof)
    out += page_end(info, f"Seeds: simulator `--seed {SEED}`.", "")
    path = OUT / "overhead.md"
    notes = Path(__file__).with_name("overhead_notes.md")
    path.write_text(with_notes("\n".join(out), notes, quick=quick))
    (OUT / "overhead.json").write_text(
        json.dumps(
            {"rows": rows, "profile": prof, "info": info, "elapsed": elapsed}, indent=1, default=str
        )
    )
    print(f"wrote {path}")


def _setup_section(client: str, quick: bool, elapsed: float) -> list[str]:
    """The page's title, the command that made it and how it measures."""
    cmd = "python bench/overhead.py" + (" --quick" if quick else "")
    cmd += " --client httpx" if client == "httpx" else ""
    return [
        "# Overhead and throughput: direct call vs reprompt",
        "",
        f"Produced by `{cmd}` (took {elapsed:.0f} s). Every number below comes from that one"
        " run on a shared, noisy 2-core machine: read ratios, not absolutes.",
        "",
        "## Setup",
        "",
        "- Simulator: `python -m reprompt_sim --seed 1` in its own process, default config (a"
        " perfect model, so every job is exactly one model call), at 0 ms and at 300 ms ± 50"
        " (`--latency-ms 300 --jitter-ms 50`).",
        "- Task: `" + json.dumps(job_body(0)) + "`",
        "- **direct**: the load generator POSTs `/v1/chat/completions` to the simulator with"
        " the exact two messages reprompt sends for that job (captured from a first job's"
        " transcript) and parses the answer as JSON.",
        "- **generate**: `POST /v1/generate?waitMs=60000`. **jobs**: `POST /v1/jobs` then"
        " `GET /v1/jobs/{id}?waitMs=60000`.",
        "- **serve**: one `reprompt serve` process (API + in-process worker,"
        " `REPROMPT_WORKER_CONCURRENCY=64`) on one redis-server (`EmbeddedRedis`, the embedded"
        " default, started by the bench so it can read `INFO commandstats`)."
        " **split**: one redis-server (`EmbeddedRedis`), one `reprompt api`, two"
        " `reprompt worker` (`REPROMPT_WORKER_CONCURRENCY=32` each).",
        "- Load generator: one Python process, closed loop with *c* concurrent callers"
        + (
            " over max(1, c/8) `httpx.AsyncClient`s (about 8 callers each)"
            if client == "httpx"
            else " over `bench/loadgen.py`'s `LeanClient` (keep-alive connections, one per"
            " caller; requests written whole; answers parsed by httptools; uvloop), about"
            " 0.05–0.1 ms of CPU per request where httpx takes 0.6–1.0"
        )
        + "; a warm-up of max(c, 4) calls before each cell is not counted."
        " It shares the 2 cores with everything else.",
        "- `CPU/job` = utime+stime (from `/proc/<pid>/stat`) of the reprompt processes and"
        " their redis-server over the cell, divided by the jobs. `sim CPU/job` is the"
        " simulator's, `loadgen CPU/job` the load generator's.",
        "- `added p50` = p50(reprompt) − p50(direct) at the same concurrency and latency;"
        " `× jobs/s` = reprompt jobs/s ÷ direct jobs/s.",
        "",
    ]


def _latency_tables(rows: list[dict[str, Any]]) -> list[str]:
    """One table of every cell per simulator latency."""
    out: list[str] = []
    for lat in sorted({r["latency"] for r in rows}):
        out += [
            f"## Simulator latency {lat}",
            "",
            "| deployment | path | c | n | fails | jobs/s | × jobs/s | p50 ms | p99 ms |"
            " added p50 ms | × p50 | CPU ms/job | redis cmds/job | sim CPU ms/job |"
            " loadgen CPU ms/job |",
            "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
        ]
        for r in [r for r in rows if r["latency"] == lat]:
            cpu = "–" if r["cpu_ms_job"] is None else f"{r['cpu_ms_job']:.2f}"
            cmds = "–" if r.get("redis_cmds_job") is None else f"{r['redis_cmds_job']:.1f}"
            out.append(
                f"| {r['deployment']} | {r['path']} | {r['c']} | {r['n']} | {r['fails']} |"
                f" {r['rps']:.1f} | {r['rps_ratio']:.2f} | {r['p50_ms']:.1f} | {r['p99_ms']:.1f} |"
                f" {r['added_p50_ms']:+.1f} | {r['p50_ratio']:.2f} | {cpu} | {cmds} |"
                f" {r['sim_cpu_ms_job']:.2f} | {r['gen_cpu_ms_job']:.2f} |"
            )
        out.append("")
    return out


def _profile_section(prof: dict[str, Any]) -> list[str]:
    """Where the serve process's CPU went, from the py-spy run."""
    s = prof["summary"]
    run = prof["run"]
    return [
        "## Where the time goes (py-spy)",
        "",
        f"`py-spy record --rate 250 --format raw --nonblocking --pid <serve>` during a"
        f" {run['n']}-job `/v1/generate` run at c=32, zero latency ({run['rps']:.0f} jobs/s,"
        f" {run['cpu_ms_job']:.2f} ms CPU/job for serve + redis while sampled)."
        f" {s['samples']} on-CPU samples of the serve process (idle threads excluded);"
        " the folded stacks are in `overhead-serve.folded.gz` (feed them to any flamegraph"
        " tool).",
        "",
        "Redis commands per job in that run (`INFO commandstats` delta ÷ jobs; only"
        " commands with ≥ 0.1 per job): "
        + ", ".join(
            f"`{k}` {v}"
            for k, v in sorted(run.get("redis_cmd_mix", {}).items(), key=lambda kv: -kv[1])
        )
        + f" — {run.get('redis_cmds_job') or 0:.1f} in all.",
        "",
        "Self time by package (the leaf frame of each sample):",
        "",
        "| package | share of samples |",
        "|---|---:|",
        *[f"| {k} | {v:.1%} |" for k, v in s["buckets"][:14]],
        "",
        "Top functions by self time:",
        "",
        "| function | self |",
        "|---|---:|",
        *[f"| `{k}` | {v:.1%} |" for k, v in s["self"]],
        "",
        "reprompt functions by inclusive time (the sample has the function anywhere on its stack):",
        "",
        "| function | inclusive |",
        "|---|---:|",
        *[f"| `{k}` | {v:.1%} |" for k, v in s["inclusive_app"]],
        "",
    ]


def derive(rows: list[dict[str, Any]]) -> None:
    """Each row against the direct row of its latency and concurrency."""
    direct = {(r["latency"], r["c"]): r for r in rows if r["path"] == "direct"}
    for r in rows:
        d = direct[(r["latency"], r["c"])]
        r["added_p50_ms"] = r["p50_ms"] - d["p50_ms"]
        r["added_p99_ms"] = r["p99_ms"] - d["p99_ms"]
        r["rps_ratio"] = r["rps"] / d["rps"]
        r["p50_ratio"] = r["p50_ms"] / d["p50_ms"]


def before_after(rows: list[dict[str, Any]], saved: dict[str, Any], client: str) -> list[str]:
    """The /v1/jobs cells of this run next to the same cells of the run saved in BEFORE."""
    was_client = saved["info"].get("client", "httpx")
    before: list[dict[str, Any]] = saved["rows"]
    derive(before)
    was = {(r["latency"], r["deployment"], r["path"], r["c"]): r for r in before}
    out = [
        "## Before and after",
        "",
        "The same command on the same machine on the tree before this release"
        " (`docs/benchmarks/overhead-before.json`, run just before this one) and now;"
        " `POST /v1/jobs` + long-poll only."
        + (
            ""
            if client == was_client
            else f" The before run's load generator was {was_client}, this one's is {client}"
            " (`--client`): the × jobs/s and added-latency columns move with it as well as"
            " with the service (`python bench/loadgen.py` compares the two clients on one"
            " tree, interleaved)."
        ),
        "",
        "| latency | deployment | c | × jobs/s before | after | added p50 ms before | after |"
        " added p99 ms before | after | CPU ms/job before | after | redis cmds/job before |"
        " after |",
        "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for r in rows:
        b = was.get((r["latency"], r["deployment"], r["path"], r["c"]))
        if r["path"] != "jobs" or b is None:
            continue
        out.append(
            f"| {r['latency']} | {r['deployment']} | {r['c']} | {b['rps_ratio']:.2f} |"
            f" {r['rps_ratio']:.2f} | {b['added_p50_ms']:+.1f} | {r['added_p50_ms']:+.1f} |"
            f" {b['added_p99_ms']:+.1f} | {r['added_p99_ms']:+.1f} | {b['cpu_ms_job']:.2f} |"
            f" {r['cpu_ms_job']:.2f} | {b['redis_cmds_job']:.1f} | {r['redis_cmds_job']:.1f} |"
        )
    return [*out, ""]


def plot(rows: list[dict[str, Any]]) -> None:
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        print("matplotlib not installed: no plot")
        return
    lats = sorted({r["latency"] for r in rows})
    fig, axes = plt.subplots(len(lats), 2, figsize=(11, 4 * len(lats)), squeeze=False)
    series = sorted({(r["deployment"], r["path"]) for r in rows})
    for i, lat in enumerate(lats):
        for dep, path in series:
            pts = sorted(
                (r["c"], r["rps"], r["p50_ms"])
                for r in rows
                if r["latency"] == lat and r["deployment"] == dep and r["path"] == path
            )
            if not pts:
                continue
            label = "direct" if path == "direct" else f"{dep} {path}"
            style = "k--" if path == "direct" else "-o"
            axes[i][0].plot([p[0] for p in pts], [p[1] for p in pts], style, label=label)
            axes[i][1].plot([p[0] for p in pts], [p[2] for p in pts], style, label=label)
        axes[i][0].set_title(f"throughput, sim latency {lat}")
        axes[i][0].set_xlabel("concurrency")
        axes[i][0].set_ylabel("jobs/s")
        axes[i][1].set_title(f"p50 latency, sim latency {lat}")
        axes[i][1].set_xlabel("concurrency")
        axes[i][1].set_ylabel("ms")
        concs = sorted({r["c"] for r in rows})
        for ax in axes[i]:
            ax.set_xscale("log", base=2)
            ax.set_xticks(concs)
            ax.set_xticklabels([str(c) for c in concs])
            ax.grid(alpha=0.3)
            ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(OUT / "overhead.png", dpi=90)
    plt.close(fig)


# ---------------------------------------------------------------- main


def main() -> int:
    global OUT
    ns = _arguments()
    if ns.report_only:
        _report_again()
        return 0
    raise_fd_limit()
    OUT = Path(tempfile.gettempdir()) / "reprompt-bench" if ns.quick else DOCS
    OUT.mkdir(parents=True, exist_ok=True)
    started = time.monotonic()
    p = plan(ns.quick)
    info = {**machine(), "client": ns.client}
    rows: list[dict[str, Any]] = []
    prof = None
    for lat, jitter in p["latencies"]:
        prof = _one_latency(p, lat, jitter, ns, rows) or prof
    write_report(rows, prof, info, ns.quick, sys.argv, time.monotonic() - started)
    return 0


def _arguments() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="a smoke run (< 60 s)")
    parser.add_argument("--no-profile", action="store_true", help="skip the py-spy profile")
    parser.add_argument(
        "--report-only",
        action="store_true",
        help="rewrite the report from docs/benchmarks/overhead.json",
    )
    parser.add_argument(
        "--client",
        choices=("lean", "httpx"),
        default="lean",
        help="the load generator's HTTP client (default lean: bench/loadgen.py)",
    )
    return parser.parse_args()


def _report_again() -> None:
    """``--report-only``: the page rewritten from the saved run."""
    saved = json.loads((DOCS / "overhead.json").read_text())
    prof = saved["profile"]
    folded = DOCS / "overhead-serve.folded.gz"
    if prof and folded.exists():
        prof["summary"] = summarize_profile(folded)
    write_report(saved["rows"], prof, saved["info"], False, sys.argv, saved["elapsed"])


def _one_latency(
    p: dict[str, Any], lat: int, jitter: int, ns: argparse.Namespace, rows: list[dict[str, Any]]
) -> dict[str, Any] | None:
    """Every deployment's cells against one simulator latency, appended to ``rows``.

    Returns the serve process's profile when this run takes it.
    """
    label = f"{lat} ms ± {jitter}" if jitter else f"{lat} ms"
    prof = None
    with Stack() as stack:
        sim = stack.sim(latency_ms=lat, jitter_ms=jitter, seed=SEED)
        cells: _Cells | None = None
        for dep in p["deployments"]:
            with Stack() as dstack:
                url, procs, parts, redis_url = deploy(dstack, dep, sim.url)
                if cells is None:
                    cells = _Cells(p, lat, label, capture_messages(url), sim, ns.client, rows)
                    cells.direct()
                cells.service(dep, url, parts, redis_url)
                if dep == "serve" and lat == 0 and not ns.quick and not ns.no_profile:
                    prof = profile_serve(
                        procs[0].pid,
                        url,
                        cells.messages,
                        sim.pid,
                        1500,
                        DOCS / "overhead-serve.folded",
                        redis_url,
                        ns.client,
                    )
    return prof


@dataclass
class _Cells:
    """The cells of one simulator latency, measured into ``rows``."""

    plan: dict[str, Any]
    lat: int
    label: str
    messages: list[dict[str, str]]
    sim: Proc
    client: str
    rows: list[dict[str, Any]]

    def direct(self) -> None:
        """The simulator called directly, at each concurrency."""
        for c in self.plan["concurrency"]:
            n = self.plan["n"](c, self.lat)
            r = measure(
                "direct", self.sim.url, self.messages, n, c, {}, self.sim.pid, client=self.client
            )
            self.rows.append(
                {"latency": self.label, "deployment": "–", "path": "direct", "c": c, **r}
            )
            print(self.rows[-1])

    def service(self, dep: str, url: str, parts: dict[str, list[int]], redis_url: str) -> None:
        """``/v1/generate`` and ``/v1/jobs`` through one deployment, at each concurrency."""
        for c in self.plan["concurrency"]:
            n = self.plan["n"](c, self.lat)
            for path in ("generate", "jobs"):
                r = measure(
                    path, url, self.messages, n, c, parts, self.sim.pid, redis_url, self.client
                )
                self.rows.append(
                    {"latency": self.label, "deployment": dep, "path": path, "c": c, **r}
                )
                print(
                    {
                        k: (round(v, 2) if isinstance(v, float) else v)
                        for k, v in self.rows[-1].items()
                    }
                )


if __name__ == "__main__":
    os.environ.setdefault("PYTHONHASHSEED", "0")
    raise SystemExit(main())
