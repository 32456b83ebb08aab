"""One tenant floods, another works as usual: how much does the quiet tenant notice?

Real processes on loopback: the simulator (a model answering in ``--latency-ms``), a
redis-server, ``reprompt api`` and two ``reprompt worker``s (the split deployment), with
API keys for two tenants. The quiet tenant runs a closed loop of jobs (``POST /v1/jobs``,
then a long-poll for the answer) and we record each job's latency:

1. **quiet**: the quiet tenant alone;
2. **flood**: the same, while the flooding tenant at the same time holds hundreds of
   long-polls open, submits jobs with 1 MB inputs as fast as it can, and lists its jobs
   in a tight loop.

The page states the quiet tenant's p50/p99 in both phases and their ratio (goal: p99
within 2× of quiet), and what the flood got: its 202s, 429s (rate, queue, bytes, waits).

3. **callbacks** (#29): the quiet tenant's jobs carry a completion callback to a receiver
   on loopback; we record each callback's delay (arrival minus the job's ``finishedAt``),
   alone, then while the flooding tenant's 100 callbacks go to a receiver that never
   answers (each attempt holds a sender slot for the outbound timeout). Goal: p99 within
   2× of alone.

    .venv/bin/python bench/fairness.py            # writes docs/benchmarks/fairness.md
    .venv/bin/python bench/fairness.py --quick    # a smoke run to a temp dir
    .venv/bin/python bench/fairness.py --callbacks-only   # the callback case again; the
                                                          # other phases kept from the JSON
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import hashlib
import json
import sys
import tempfile
import time
from collections import Counter
from datetime import datetime
from pathlib import Path
from typing import Any

import httpx

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.common import DOCS, Stack, job_body, machine, machine_md, percentile

KEYS = {"quiet": "quiet-secret-key", "flood": "flood-secret-key"}
MB_INPUT = "x" * 1_000_000


def api_keys() -> str:
    return ",".join(f"{t}:{hashlib.sha256(k.encode()).hexdigest()}" for t, k in KEYS.items())


def headers(tenant: str) -> dict[str, str]:
    return {"authorization": f"Bearer {KEYS[tenant]}"}


async def quiet_loop(url: str, n: int, concurrency: int) -> list[float]:
    latencies: list[float] = []
    counter = iter(range(n))
    limits = httpx.Limits(max_connections=concurrency + 4)
    async with httpx.AsyncClient(
        base_url=url, headers=headers("quiet"), timeout=120, limits=limits, trust_env=False
    ) as http:

        async def one() -> None:
            for i in counter:
                began = time.perf_counter()
                created = await http.post("/v1/jobs", json=job_body(i))
                created.raise_for_status()
                job_id = created.json()["id"]
                while True:
                    got = await http.get(f"/v1/jobs/{job_id}", params={"waitMs": 30000})
                    got.raise_for_status()
                    if got.json()["status"] in ("succeeded", "failed", "cancelled"):
                        break
                latencies.append(time.perf_counter() - began)

        await asyncio.gather(*(one() for _ in range(concurrency)))
    return latencies


async def flood(url: str, stop: asyncio.Event, waits: int) -> Counter[str]:
    """Long-polls, big submits and listings from the flooding tenant until ``stop``."""
    seen: Counter[str] = Counter()
    limits = httpx.Limits(max_connections=waits + 16)
    async with httpx.AsyncClient(
        base_url=url, headers=headers("flood"), timeout=120, limits=limits, trust_env=False
    ) as http:
        # A job whose model call takes minutes: the long-polls on it are held open.
        held = {**job_body(0), "task": 'Extract the person. [[sim {"script": ["slow"]}]]'}
        target = (await http.post("/v1/jobs", json=held)).json()["id"]

        def count(kind: str, response: httpx.Response) -> None:
            code = response.status_code
            if code == 429:
                seen[f"{kind} 429 {response.json().get('code')}"] += 1
            else:
                seen[f"{kind} {code}"] += 1

        holding = 0

        async def poller() -> None:
            nonlocal holding
            while not stop.is_set():
                holding += 1
                try:
                    got = await http.get(f"/v1/jobs/{target}", params={"waitMs": 60000})
                finally:
                    holding -= 1
                count("long-poll", got)

        async def submitter() -> None:
            i = 0
            while not stop.is_set():
                i += 1
                body = {**job_body(i), "input": MB_INPUT}
                response = await http.post("/v1/jobs", json=body)
                count("submit 1 MB", response)
                if response.status_code == 429:
                    await asyncio.sleep(0.05)

        async def lister() -> None:
            while not stop.is_set():
                count("list", await http.get("/v1/jobs", params={"limit": 100}))

        tasks = [asyncio.create_task(poller()) for _ in range(waits)]
        tasks += [asyncio.create_task(submitter()) for _ in range(4)]
        tasks += [asyncio.create_task(lister()) for _ in range(4)]
        await stop.wait()
        seen["long-polls still held open at the end"] = holding
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
    return seen


async def phase(url: str, n: int, concurrency: int, waits: int) -> dict[str, Any]:
    stop = asyncio.Event()
    flooding = asyncio.create_task(flood(url, stop, waits)) if waits else None
    if flooding is not None:
        await asyncio.sleep(2.0)  # the flood is in full swing
    latencies = await quiet_loop(url, n, concurrency)
    stop.set()
    seen = await flooding if flooding is not None else Counter()
    return {
        "jobs": len(latencies),
        "p50_ms": round(percentile(latencies, 0.5) * 1000, 1),
        "p99_ms": round(percentile(latencies, 0.99) * 1000, 1),
        "flood": dict(sorted(seen.items())),
    }


# The flood's phase starts once this many of its requests hang (a worker's share of slots).
FLOOD_HELD = 8


class CallbackReceivers:
    """Two plain HTTP receivers on loopback: ``healthy`` answers 200 and records when each
    job's callback arrived; ``hanging`` reads the request and never answers."""

    def __init__(self) -> None:
        self.arrived: dict[str, float] = {}  # job id -> delay (s) from its finishedAt
        self.events: dict[str, asyncio.Event] = {}
        self.hung = 0
        self.flooded = asyncio.Event()  # the flood holds at least FLOOD_HELD requests open
        self._servers: list[asyncio.Server] = []
        self.healthy_url = self.hanging_url = ""

    async def __aenter__(self) -> CallbackReceivers:
        healthy = await asyncio.start_server(self._healthy, "127.0.0.1", 0)
        hanging = await asyncio.start_server(self._hanging, "127.0.0.1", 0)
        self._servers = [healthy, hanging]
        self.healthy_url = f"http://127.0.0.1:{healthy.sockets[0].getsockname()[1]}/hook"
        self.hanging_url = f"http://127.0.0.1:{hanging.sockets[0].getsockname()[1]}/hook"
        return self

    async def __aexit__(self, *exc: object) -> None:
        for server in self._servers:
            server.close()

    @staticmethod
    async def _request(reader: asyncio.StreamReader) -> bytes:
        head = await reader.readuntil(b"\r\n\r\n")
        length = 0
        for line in head.split(b"\r\n"):
            if line.lower().startswith(b"content-length:"):
                length = int(line.split(b":", 1)[1])
        return await reader.readexactly(length)

    async def _healthy(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            body = json.loads(await self._request(reader))
            now = time.time()
            finished = datetime.fromisoformat(body["finishedAt"].replace("Z", "+00:00"))
            self.arrived.setdefault(body["id"], now - finished.timestamp())
            self.events.setdefault(body["id"], asyncio.Event()).set()
            writer.write(b"HTTP/1.1 200 OK\r\ncontent-length: 0\r\nconnection: close\r\n\r\n")
            await writer.drain()
        finally:
            writer.close()

    async def _hanging(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            await self._request(reader)
            self.hung += 1
            if self.hung >= FLOOD_HELD:
                self.flooded.set()
            # Held until the phase ends and the server closes (a cancel is the end).
            with contextlib.suppress(asyncio.CancelledError):
                await asyncio.sleep(3600)
        finally:
            writer.close()


async def callback_phase(url: str, n: int, concurrency: int, flood_jobs: int) -> dict[str, Any]:
    """The quiet tenant's callback delays, with ``flood_jobs`` hanging callbacks of the
    other tenant in the outbox (0: alone)."""
    async with (
        CallbackReceivers() as receivers,
        httpx.AsyncClient(base_url=url, timeout=60, trust_env=False) as http,
    ):
        if flood_jobs:
            for i in range(flood_jobs):
                body = {**job_body(i), "callback": {"url": receivers.hanging_url}}
                created = await http.post("/v1/jobs", json=body, headers=headers("flood"))
                created.raise_for_status()
            # Every sender slot the flood can get is held by a hanging request.
            await receivers.flooded.wait()
        counter = iter(range(n))

        async def one() -> None:
            for i in counter:
                body = {**job_body(i), "callback": {"url": receivers.healthy_url}}
                created = await http.post("/v1/jobs", json=body, headers=headers("quiet"))
                created.raise_for_status()
                job_id = created.json()["id"]
                await receivers.events.setdefault(job_id, asyncio.Event()).wait()

        await asyncio.gather(*(one() for _ in range(concurrency)))
        delays = list(receivers.arrived.values())
        return {
            "callbacks": len(delays),
            "p50_ms": round(percentile(delays, 0.5) * 1000, 1),
            "p99_ms": round(percentile(delays, 0.99) * 1000, 1),
            "flood_requests_hanging": receivers.hung,
        }


def run_callbacks(args: argparse.Namespace) -> dict[str, Any]:
    results: dict[str, Any] = {}
    with Stack() as stack:
        sim = stack.sim(latency_ms=50, jitter_ms=10)
        redis_url, _ = stack.redis()
        env = stack.env(
            sim.url,
            redis_url,
            REPROMPT_API_KEYS=api_keys(),
            REPROMPT_OUTBOUND_ALLOW="127.0.0.1",
            REPROMPT_WORKER_CONCURRENCY=str(args.worker_concurrency),
        )
        api = stack.service("api", env)
        for i in range(2):
            stack.service("worker", env, name=f"worker-{i}")
        alone = asyncio.run(callback_phase(api.url, args.callback_jobs, 2, 0))
        flooded = asyncio.run(callback_phase(api.url, args.callback_jobs, 2, 100))
    results["alone"], results["flood"] = alone, flooded
    results["p99_ratio"] = round(flooded["p99_ms"] / max(alone["p99_ms"], 0.1), 2)
    results["p50_ratio"] = round(flooded["p50_ms"] / max(alone["p50_ms"], 0.1), 2)
    return results


def run(args: argparse.Namespace) -> dict[str, Any]:
    results: dict[str, Any] = {"machine": machine(), "args": vars(args)}
    with Stack() as stack:
        sim = stack.sim(latency_ms=args.latency_ms, jitter_ms=args.latency_ms / 6, slow_ms=600_000)
        redis_url, _ = stack.redis()
        env = stack.env(
            sim.url,
            redis_url,
            REPROMPT_API_KEYS=api_keys(),
            REPROMPT_MAX_QUEUED=str(args.max_queued),
            REPROMPT_MAX_BODY_BYTES=str(2_000_000),
            REPROMPT_MAX_TENANT_BYTES=str(args.max_tenant_bytes),
            REPROMPT_MAX_WAITS_PER_TENANT=str(args.max_waits),
            REPROMPT_RATE_PER_TENANT=str(args.rate),
            REPROMPT_BURST_PER_TENANT=str(args.rate * 2),
            REPROMPT_WORKER_CONCURRENCY=str(args.worker_concurrency),
        )
        api = stack.service("api", env)
        for i in range(2):
            stack.service("worker", env, name=f"worker-{i}")
        results["quiet"] = asyncio.run(phase(api.url, args.jobs, args.concurrency, 0))
        results["flood"] = asyncio.run(phase(api.url, args.jobs, args.concurrency, args.waits))
    quiet, flooded = results["quiet"], results["flood"]
    results["p50_ratio"] = round(flooded["p50_ms"] / quiet["p50_ms"], 2)
    results["p99_ratio"] = round(flooded["p99_ms"] / quiet["p99_ms"], 2)
    results["callbacks"] = run_callbacks(args)
    return results


def page(results: dict[str, Any], command: str) -> str:
    args = results["args"]
    quiet, flooded = results["quiet"], results["flood"]
    flood_lines = "\n".join(f"| {k} | {v} |" for k, v in flooded["flood"].items())
    answered = sum(flooded["flood"].values())
    limited = sum(v for k, v in flooded["flood"].items() if " 429 " in k)
    return f"""# Fairness: one tenant floods, another works

Produced by `{command}`. Split deployment on loopback: `reprompt api` + 2 `reprompt worker`
(concurrency {args["worker_concurrency"]} each), a redis-server, the simulator answering in
{args["latency_ms"]:g} ms (± {args["latency_ms"] / 6:g}). Two tenants with their own keys.

The quiet tenant runs {args["concurrency"]} callers, {args["jobs"]} jobs per phase (submit, then
long-poll). In the flood phase the other tenant meanwhile holds {args["waits"]} long-polls
open, submits 1 MB inputs from 4 loops as fast as it is let, and lists its jobs from 4
loops. Limits: {args["rate"]} requests/s per tenant (bursts of {args["rate"] * 2}),
{args["max_waits"]} open waits per tenant, {args["max_queued"]} queued jobs per tenant,
{args["max_tenant_bytes"]:,} bytes of jobs per tenant per retention window.

{machine_md(results["machine"])}

## The quiet tenant's jobs

| phase | jobs | p50 | p99 |
|---|---|---|---|
| quiet (alone) | {quiet["jobs"]} | {quiet["p50_ms"]} ms | {quiet["p99_ms"]} ms |
| flood (other tenant flooding) | {flooded["jobs"]} | {flooded["p50_ms"]} ms \
| {flooded["p99_ms"]} ms |
| flood ÷ quiet | | {results["p50_ratio"]}× | **{results["p99_ratio"]}×** |

Goal: p99 within 2× of quiet.

## What the flood got

{answered} answers, {limited} of them 429 ({round(100 * limited / max(answered, 1), 1)} %).

| request and answer | count |
|---|---|
{flood_lines}

{callbacks_md(results.get("callbacks"), args)}
## What this means

Each limit does one job: the request rate and the cap on open waits bound what one
tenant's traffic costs the API process; the per-tenant queue cap and byte quota bound
what it can park in Redis; and because workers take tenants in turn (one queue per tenant,
a ring of the tenants with work), the quiet tenant's job is claimed at the next free slot,
not behind the flood's backlog. Waits hold no Redis connection, and the workers have their
own pool, so none of this reaches the workers' claims, heartbeats and commits.
"""


def callbacks_md(cb: dict[str, Any] | None, args: dict[str, Any]) -> str:
    if not cb:
        return ""
    alone, flooded = cb["alone"], cb["flood"]
    hang_row = (
        f"other tenant's 100 callbacks hang ({flooded['flood_requests_hanging']} requests held "
        f"open) | {flooded['callbacks']} | {flooded['p50_ms']} ms | {flooded['p99_ms']} ms"
    )
    return f"""## Callbacks: the other tenant's receiver hangs (#29)

The quiet tenant's jobs each carry a completion callback to a receiver on loopback
(2 callers, {args.get("callback_jobs", alone["callbacks"])} jobs per phase, each waiting
for its callback); the delay is the callback's arrival minus the job's `finishedAt`. In the
second phase the other tenant first ends 100 jobs whose callbacks go to a receiver that
reads the request and never answers: each attempt holds a sender slot for the outbound
timeout (10 s). Each of the 2 workers sends at most 16 callbacks at once
(`REPROMPT_CALLBACK_CONCURRENCY`).
The machine was shared with other work while this ran: read the ratios, not single times.

| phase | callbacks | p50 | p99 |
|---|---|---|---|
| alone | {alone["callbacks"]} | {alone["p50_ms"]} ms | {alone["p99_ms"]} ms |
| {hang_row} |
| hang ÷ alone | | {cb["p50_ratio"]}× | **{cb["p99_ratio"]}×** |

Goal: p99 within 2× of alone. Before #29 the sender leased the oldest due deliveries
first, so the other tenant's hanging callbacks took every slot and the quiet tenant's
callback waited for their timeouts (35 s seen with 72 of them). Now the lease takes
tenants in turn and each gets at most its share of a sender's slots (never all of them
while alone: half stays free for the next tenant), and a receiver host that keeps timing
out is backed off to one attempt at a time (the rest deferred, none lost).

"""


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="small run, output to a temp dir")
    parser.add_argument("--jobs", type=int, default=200)
    parser.add_argument("--concurrency", type=int, default=4)
    parser.add_argument("--waits", type=int, default=300)
    parser.add_argument("--latency-ms", type=float, default=300)
    parser.add_argument("--rate", type=int, default=50)
    parser.add_argument("--max-waits", type=int, default=100)
    parser.add_argument("--max-queued", type=int, default=200)
    parser.add_argument("--max-tenant-bytes", type=int, default=50_000_000)
    parser.add_argument("--worker-concurrency", type=int, default=16)
    parser.add_argument("--callback-jobs", type=int, default=60)
    parser.add_argument(
        "--callbacks-only",
        action="store_true",
        help="run only the callback case; the other phases are kept from fairness.json",
    )
    args = parser.parse_args()
    if args.quick:
        args.jobs, args.waits, args.callback_jobs = 30, 60, 20
    command = "python bench/fairness.py" + (" --quick" if args.quick else "")
    out = Path(tempfile.mkdtemp()) if args.quick else DOCS
    if args.callbacks_only:
        results = json.loads((DOCS / "fairness.json").read_text())
        results["callbacks"] = run_callbacks(args)
        results["args"]["callback_jobs"] = args.callback_jobs
        command = "python bench/fairness.py (--callbacks-only for the callback case)"
    else:
        results = run(args)
    (out / "fairness.json").write_text(json.dumps(results, indent=1))
    (out / "fairness.md").write_text(page(results, command))
    print(json.dumps({k: results[k] for k in ("quiet", "flood", "p50_ratio", "p99_ratio")}))
    print(f"wrote {out / 'fairness.md'}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
