"""Where one job's time goes at one caller: hop-by-hop timestamps across processes.

    .venv/bin/python bench/latency.py                  # 5 rounds of 200 jobs, split deployment
    .venv/bin/python bench/latency.py --rounds 9 --n 300 --show 3
    .venv/bin/python bench/latency.py --before /tmp/before-lat   # this tree vs another, interleaved

bench/overhead.py's split deployment (one redis-server, one ``reprompt api``, two
``reprompt worker``, the simulator at 0 ms), one caller: ``POST /v1/jobs`` then
``GET /v1/jobs/{id}?waitMs=60000``, against a direct ``POST /v1/chat/completions`` to the
simulator: one call of each in turn (and of ``--before``'s API), so the machine's moods
fall on all alike. The added p50 of a round is p50(jobs) − p50(direct); the figure is the
median over rounds.

With ``--trace`` (the default) every process runs with bench/latency_site on its
``PYTHONPATH``: its ``sitecustomize`` wraps a few functions (the HTTP protocol's reads and
writes, the store's script calls, the pub/sub hub, the worker's steps, the provider call)
and records ``time.monotonic_ns()`` at each, which is comparable across processes. The
report is each hop's median offset from the client's POST, over every traced job, and the
median time between consecutive hops. Tracing costs a few µs per hop; ``--no-trace``
measures the p50s without it.
"""

from __future__ import annotations

import argparse
import asyncio
import collections
import contextlib
import os
import signal
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

SITE = Path(__file__).with_name("latency_site")


def _setup_trace(out: Path) -> Any:
    os.environ["RP_LATENCY_TRACE"] = str(out)
    os.environ["PYTHONPATH"] = os.pathsep.join(
        [str(SITE), *filter(None, [os.environ.get("PYTHONPATH")])]
    )
    sys.path.insert(0, str(SITE))
    import httpcore._backends.anyio as anyio_backend
    import sitecustomize  # type: ignore[import-not-found]  # the tracer, for this process

    if not hasattr(anyio_backend.AnyIOStream.read, "__wrapped__"):  # imported before
        sitecustomize._patch_anyio_stream(anyio_backend)
    return sitecustomize


async def _one_job(h: Any, url: str, i: int, mark: Any) -> bool:
    from bench.common import job_body

    mark("cli.post")
    r = await h.post(f"{url}/v1/jobs", json=job_body(i))
    mark("cli.202")
    if r.status_code != 202:
        return False
    job_id = r.json()["id"]
    while True:
        mark("cli.get")
        r = await h.get(f"{url}/v1/jobs/{job_id}", params={"waitMs": 60000})
        status: str = r.json()["status"]
        mark("cli.got", status)
        if status not in ("queued", "in_progress"):
            return status == "succeeded"


async def _one_direct(h: Any, sim_url: str, messages: Any, mark: Any) -> bool:
    import json

    body = {"model": "sim-model", "messages": messages, "max_completion_tokens": 1024}
    mark("cli.direct")
    r = await h.post(f"{sim_url}/v1/chat/completions", json=body)
    json.loads(r.json()["choices"][0]["message"]["content"])
    mark("cli.direct.done")
    ok: bool = r.status_code == 200
    return ok


async def _alternating(
    targets: list[tuple[str, str]], sim_url: str, messages: Any, n: int, mark: Any
) -> dict[str, list[float]]:
    """``n`` calls of each target, one of each in turn, so the machine's moods fall on all alike.

    A target is ``("direct", sim_url)`` or ``(name, api_url)`` (a job); the order rotates.
    Only the jobs of the first API are traced.
    """
    from bench.common import client

    lat: dict[str, list[float]] = {name: [] for name, _ in targets}
    traced = next(name for name, _ in targets if name != "direct")
    async with contextlib.AsyncExitStack() as stack:
        http = {name: await stack.enter_async_context(client(8)) for name, _ in targets}
        for i in range(-5, n):  # 5 warm-up calls of each
            turn = targets[i % len(targets) :] + targets[: i % len(targets)]
            for name, url in turn:
                marks = mark if i >= 0 and name == traced else _quiet
                t0 = time.perf_counter()
                if name == "direct":
                    ok = await _one_direct(http[name], sim_url, messages, marks)
                else:
                    ok = await _one_job(http[name], url, max(i, 0), marks)
                if i >= 0:
                    if not ok:
                        raise RuntimeError(f"{name} call {i} failed")
                    lat[name].append(time.perf_counter() - t0)
    return lat


def _quiet(*_: Any) -> None:
    pass


def _collect(out: Path, pids: list[int], tracer: Any) -> list[tuple[int, str, str, int]]:
    """Every process's events, oldest first: (ns, role:label, detail, pid)."""
    for pid in pids:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGUSR1)
    tracer.dump()
    time.sleep(1.0)
    events = []
    for path in out.glob("*.txt"):
        pid = int(path.stem)
        for line in path.read_text().splitlines():
            ns, label, detail, role = line.split("\t")
            events.append((int(ns), f"{role}:{label}", detail, pid))
        path.unlink()
    events.sort()
    return events


# One job's way, hop by hop: each the first event of that name after the one before it.
PATH = (
    ("bench:cli.post", "client sends POST /v1/jobs"),
    ("api:http.rx", "its first bytes reach the API"),
    ("api:api.submit.in", "API: request read, JobStore.submit called"),
    ("api:redis.send", "API: submit script written to Redis"),
    ("worker:hub.msg", "Redis: script run, hand-off heard by the worker"),
    ("worker:w.start", "worker: hand-off dispatched, job task made"),
    ("worker:w.process.in", "worker: job task runs"),
    ("worker:w.execute.in", "worker: metrics, 'started' log line, span"),
    ("worker:loop.in", "worker: stored spec read, runtime built"),
    ("worker:prov.call.in", "worker: turn loop up to the model call"),
    ("worker:prov.write.out", "worker: request written"),
    ("sim:http.rx", "simulator hears it"),
    ("sim:http.write", "simulator: answer's head written"),
    ("worker:prov.head", "worker reads the head"),
    ("worker:loop.out", "worker: body read, answer checked, loop ends"),
    ("worker:w.complete.in", "worker: commit called"),
    ("worker:redis.send", "worker: commit script written"),
    ("api:hub.msg", "Redis: script run, done heard by the API"),
    ("api:api.wait.out", "API: long-poll has the view"),
    ("api:http.write", "API: response written"),
    ("bench:cli.read", "client reads it"),
    ("bench:cli.got", "client: response parsed"),
)
# Off the way (beside it): (from, to, what).
BESIDE = (
    ("api:redis.send", "api:redis.recv", "API: submit script's round trip"),
    ("api:redis.recv", "api:http.write", "API: 202 made after the reply"),
    ("api:http.write", "bench:cli.202", "client: 202 read and parsed"),
    ("bench:cli.get", "api:api.wait.in", "GET reaches the long-poll"),
    ("worker:redis.send", "worker:redis.recv", "worker: commit script's round trip"),
)


def _first(job: list[tuple[int, str, str, int]], label: str, after: int) -> int | None:
    return next((ns for ns, name, _, _ in job if name == label and ns >= after), None)


def path_budget(jobs: list[list[tuple[int, str, str, int]]]) -> list[str]:
    """Median µs of each hop of ``PATH`` over the jobs where every hop was seen."""
    steps: dict[str, list[float]] = collections.defaultdict(list)
    totals: list[float] = []
    early = 0
    for job in jobs:
        t0 = at = job[0][0]
        found = []
        for label, _ in PATH[1:]:
            t = _first(job, label, at)
            if t is None:
                break
            found.append((label, (t - at) / 1000))
            at = t
        else:
            for label, step in found:
                steps[label].append(step)
            totals.append((at - t0) / 1000)
            wait_in = _first(job, "api:api.wait.in", t0)
            done = _first(job, "api:hub.msg", t0)
            if wait_in is not None and done is not None and done < wait_in:
                early += 1
    lines = [
        f"The way of one job: {len(totals)} jobs with every hop seen, median µs of each"
        f" (total {statistics.median(totals):.0f}; the job had ended before its GET"
        f" reached the long-poll in {early}):",
        "",
        "| hop | ends when | median µs | p25 | p75 |",
        "|---|---|---:|---:|---:|",
    ]
    for label, what in PATH[1:]:
        values = steps[label]
        q = statistics.quantiles(values, n=4)
        lines.append(
            f"| {label} | {what} | {statistics.median(values):.0f} | {q[0]:.0f} | {q[2]:.0f} |"
        )
    lines += ["", "Beside the way:", "", "| from | to | what | median µs |", "|---|---|---|---:|"]
    for start, end, what in BESIDE:
        values = []
        for job in jobs:
            a = _first(job, start, job[0][0])
            b = None if a is None else _first(job, end, a)
            if a is not None and b is not None:
                values.append((b - a) / 1000)
        if values:
            lines.append(f"| {start} | {end} | {what} | {statistics.median(values):.0f} |")
    return [*lines, ""]


def budget(events: list[tuple[int, str, str, int]], show: int) -> list[str]:
    """Each job's events from its POST to its answer; each hop's median offset."""
    jobs: list[list[tuple[int, str, str, int]]] = []
    current: list[tuple[int, str, str, int]] | None = None
    for event in events:
        if event[1] == "bench:cli.post":
            current = [event]
            jobs.append(current)
        elif current is not None:
            current.append(event)
            if event[1] == "bench:cli.got" and event[2] not in ("queued", "in_progress"):
                current = None
    jobs = [j for j in jobs if j[-1][1] == "bench:cli.got"]
    offsets: dict[str, list[float]] = collections.defaultdict(list)
    firsts: dict[str, int] = collections.Counter()
    for job in jobs:
        t0 = job[0][0]
        seen: collections.Counter[str] = collections.Counter()
        for ns, label, _, _ in job:
            seen[label] += 1
            key = label if seen[label] == 1 else f"{label}#{seen[label]}"
            offsets[key].append((ns - t0) / 1000)
            firsts[key] += 1
    lines = path_budget(jobs)
    lines += [f"{len(jobs)} traced jobs; hops seen in at least half of them, by median offset:", ""]
    lines.append("| hop | jobs | median µs from POST | p25 | p75 | step from previous |")
    lines.append("|---|---:|---:|---:|---:|---:|")
    rows = [(statistics.median(v), k, v) for k, v in offsets.items() if len(v) >= len(jobs) / 2]
    rows.sort()
    previous = 0.0
    for med, key, values in rows:
        q = statistics.quantiles(values, n=4) if len(values) > 1 else [med, med, med]
        step = med - previous
        lines.append(
            f"| {key} | {len(values)} | {med:.0f} | {q[0]:.0f} | {q[2]:.0f} | {step:+.0f} |"
        )
        previous = med
    for job in jobs[len(jobs) // 2 : len(jobs) // 2 + show]:
        t0 = job[0][0]
        lines += ["", f"one job ({(job[-1][0] - t0) / 1000:.0f} µs):", ""]
        last = t0
        for ns, label, detail, pid in job:
            at, step = (ns - t0) / 1000, (ns - last) / 1000
            lines.append(f"  {at:8.0f}  {step:+7.0f}  {label:28s} {detail} [{pid}]")
            last = ns
    return lines


def main() -> int:
    ns = _arguments()
    if ns.analyze is not None:
        rows = [line.split("\t") for line in ns.analyze.read_text().splitlines()]
        read = [(int(ns_), label, detail, int(pid)) for ns_, label, detail, pid in rows]
        print("\n".join(budget(read, ns.show)))
        return 0
    out = Path(tempfile.mkdtemp(prefix="rp-latency-"))
    tracer = None if ns.no_trace else _setup_trace(out)

    from bench.common import raise_fd_limit

    raise_fd_limit()
    trees: dict[str, Path | None] = {"this": None}
    if ns.before is not None:
        trees["before"] = ns.before
    p50s, events = _rounds(ns, trees, out, tracer)
    print()
    for name, values in p50s.items():
        what = "p50" if name == "direct" else "added p50"
        print(
            f"{name}: {what}, median over {len(values)} rounds {statistics.median(values):+.2f} ms"
        )
    if tracer is not None:
        saved = out / "events.tsv"
        saved.write_text("".join(f"{a}\t{b}\t{c}\t{d}\n" for a, b, c, d in events))
        print(f"\n(events in {saved}: --analyze {saved})\n")
        print("\n".join(budget(events, ns.show)))
    return 0


def _arguments() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--n", type=int, default=200, help="jobs (and direct calls) per round")
    parser.add_argument("--show", type=int, default=2, help="print this many jobs' timelines")
    parser.add_argument("--no-trace", action="store_true")
    parser.add_argument(
        "--before", type=Path, help="also run this source tree's services, interleaved"
    )
    parser.add_argument("--serve", action="store_true", help="one serve process, not split")
    parser.add_argument("--analyze", type=Path, help="only report the events a run saved")
    return parser.parse_args()


def _rounds(
    ns: argparse.Namespace, trees: dict[str, Path | None], out: Path, tracer: Any
) -> tuple[dict[str, list[float]], list[tuple[int, str, str, int]]]:
    """Each tree's deployment beside the simulator, ``ns.rounds`` rounds of calls
    alternating between them; per target its p50 (added, for the trees) each round, and
    the traced events."""
    from bench.common import Stack
    from bench.overhead import capture_messages, deploy

    mark = _quiet if tracer is None else tracer.mark
    p50s: dict[str, list[float]] = collections.defaultdict(list)
    events: list[tuple[int, str, str, int]] = []
    kind = "serve" if ns.serve else "split"
    with Stack() as stack:
        sim = stack.sim(latency_ms=0, jitter_ms=0, seed=1)
        deployments = {}
        for name, code in trees.items():
            dstack = stack.enter_context(Stack(code) if code is not None else Stack())
            url, procs, _, _ = deploy(dstack, kind, sim.url)
            deployments[name] = (url, [p.pid for p in procs])
        messages = capture_messages(next(iter(deployments.values()))[0])
        pids = [sim.pid, *(p for _, ps in deployments.values() for p in ps)]
        if tracer is not None:
            _collect(out, pids, tracer)  # start-up and warm-up events out of the way
        targets = [("direct", sim.url), *((name, url) for name, (url, _) in deployments.items())]
        for rnd in range(ns.rounds):
            lat = asyncio.run(_alternating(targets, sim.url, messages, ns.n, mark))
            d50 = statistics.median(lat["direct"]) * 1000
            p50s["direct"].append(d50)
            line = [f"round {rnd}: direct p50 {d50:.2f} ms"]
            for name in deployments:
                j50 = statistics.median(lat[name]) * 1000
                p50s[name].append(j50 - d50)
                line.append(f"{name} jobs p50 {j50:.2f} (+{j50 - d50:.2f})")
            if tracer is not None:
                events += _collect(out, pids, tracer)
            print(" | ".join(line), flush=True)
    return p50s, events


if __name__ == "__main__":
    raise SystemExit(main())
