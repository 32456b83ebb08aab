"""Batches vs live jobs on the same flaky items, a 50,000-item batch, and the interactive
latency an item-by-item batch (a provider without a batch API) adds.

One process on loopback: a redis-server, the simulator (a flaky model: 15 % broken JSON,
15 % wrong types, 10 % missing fields on first answers; 85 % fixed when told why) and
the API with its in-process worker and batch runner.

1. **live vs batch**: the same N items (``--items``, default 1,000) as N jobs
   (``POST /v1/jobs``) and as one batch (``POST /v1/batches``): success rate, total cost,
   wall time, Redis memory they left.
2. **scale**: a ``--scale``-item batch (default 50,000) uploaded as JSONL, run to the end,
   its results streamed back: wall time, rounds, Redis memory per item.
3. **priority**: an interactive job's latency alone and while a batch runs on the worker
   pool (a provider without a batch API), with the simulator answering in 20 ms.

    .venv/bin/python bench/batches.py                 # writes docs/benchmarks/batches.md
    .venv/bin/python bench/batches.py --quick         # a smoke run, printed only
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx
import redis

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from app.assembly import api_app  # noqa: E402
from app.loopback import serve_in_thread  # noqa: E402
from app.providers.config import ModelConfig, ProviderConfig, ProvidersConfig  # noqa: E402
from app.redis_server import EmbeddedRedis  # noqa: E402
from app.settings import Settings  # noqa: E402
from reprompt_sim.server import SimConfig, serve_in_background  # noqa: E402

FLAKY = {"broken_json": 0.15, "wrong_type": 0.15, "missing_field": 0.1}
OUT = ROOT / "docs" / "benchmarks" / "batches.md"


def providers(sim: str, slow_sim: str) -> ProvidersConfig:
    price = {"input_usd_per_mtok": 0.15, "output_usd_per_mtok": 0.60}
    return ProvidersConfig(
        default="oa",
        providers={
            "openai-sim": ProviderConfig(kind="openai", base_url=f"{sim}/v1"),
            "plain": ProviderConfig(kind="openai", base_url=f"{slow_sim}/v1", batch_api=False),
        },
        models={
            "oa": ModelConfig(provider="openai-sim", structured="prompt", **price),  # type: ignore[arg-type]
            "plain": ModelConfig(provider="plain", structured="prompt", **price),  # type: ignore[arg-type]
        },
    )


def template(tag: str, model: str = "oa") -> dict[str, Any]:
    return {
        "task": f"Name the city the input is about and its population ({tag}).",
        "signature": "{city :string, population :int}",
        "model": model,
        "budget": {"maxTurns": 1, "returnRetries": 3},
    }


def used_memory(r: redis.Redis) -> int:
    return int(r.info("memory")["used_memory"])


def wait_batch(http: httpx.Client, batch_id: str) -> dict[str, Any]:
    said = ""
    while True:
        body: dict[str, Any] = http.get(f"/v1/batches/{batch_id}").json()
        if body["status"] != "running":
            return body
        progress = f"round {body['round']} {body['phase']} {body['counts']}"
        if progress != said:  # on stderr: a long run shows where it is
            print(f"{time.strftime('%H:%M:%S')} {batch_id}: {progress}", file=sys.stderr)
            said = progress
        time.sleep(0.2)


def live_vs_batch(http: httpx.Client, r: redis.Redis, n: int) -> dict[str, Any]:
    tag = uuid.uuid4().hex[:8]
    before = used_memory(r)
    started = time.perf_counter()
    ids = []
    for i in range(n):
        body = {**template(f"live {tag}"), "input": {"doc": i}}
        while True:
            response = http.post("/v1/jobs", json=body)
            if response.status_code == 202:
                break
            time.sleep(0.05)  # 429: the per-tenant queue is full; wait a little
        ids.append(response.json()["id"])
    succeeded, cost = 0, 0.0
    for job_id in ids:
        while True:
            job = http.get(f"/v1/jobs/{job_id}", params={"waitMs": 5000}).json()
            if job["status"] in ("succeeded", "failed", "cancelled"):
                break
        succeeded += job["status"] == "succeeded"
        execution = (job.get("result") or {}).get("execution") or {}
        cost += execution.get("cost") or 0.0
    live = {
        "success": succeeded / n,
        "cost": cost,
        "wall": time.perf_counter() - started,
        "memory": used_memory(r) - before,
    }
    tag = uuid.uuid4().hex[:8]
    before = used_memory(r)
    started = time.perf_counter()
    body = {
        "template": template(f"batch {tag}"),
        "items": [{"customId": f"doc-{i}", "input": {"doc": i}} for i in range(n)],
    }
    batch_id = http.post("/v1/batches", json=body).json()["id"]
    batch = wait_batch(http, batch_id)
    batched = {
        "success": batch["counts"]["succeeded"] / n,
        "cost": batch["costUsd"],
        "wall": time.perf_counter() - started,
        "memory": used_memory(r) - before,
        "rounds": batch["round"],
    }
    return {"items": n, "live": live, "batch": batched}


def scale(http: httpx.Client, r: redis.Redis, n: int) -> dict[str, Any]:
    tag = uuid.uuid4().hex[:8]
    before = used_memory(r)
    started = time.perf_counter()

    def lines() -> Any:
        yield (json.dumps({"template": template(f"scale {tag}")}) + "\n").encode()
        for i in range(n):
            yield (json.dumps({"customId": f"doc-{i}", "input": {"doc": i}}) + "\n").encode()

    created = http.post(
        "/v1/batches", content=lines(), headers={"content-type": "application/x-ndjson"}
    )
    created.raise_for_status()
    submitted = time.perf_counter() - started
    stored = used_memory(r) - before
    batch = wait_batch(http, created.json()["id"])
    wall = time.perf_counter() - started
    at_end = used_memory(r) - before
    read_started = time.perf_counter()
    count = 0
    with http.stream("GET", f"/v1/batches/{batch['id']}/results") as response:
        for line in response.iter_lines():
            count += bool(line.strip())
    return {
        "items": n,
        "submit_s": submitted,
        "wall_s": wall,
        "rounds": batch["round"],
        "succeeded": batch["counts"]["succeeded"],
        "failed": batch["counts"]["failed"],
        "cost": batch["costUsd"],
        "stored_per_item": stored / n,
        "end_per_item": at_end / n,
        "results_s": time.perf_counter() - read_started,
        "results_lines": count,
    }


def interactive(http: httpx.Client, jobs: int) -> list[float]:
    latencies = []
    for i in range(jobs):
        body = {**template(f"interactive {uuid.uuid4().hex[:6]}", "plain"), "input": {"i": i}}
        started = time.perf_counter()
        job_id = http.post("/v1/jobs", json=body).json()["id"]
        while http.get(f"/v1/jobs/{job_id}", params={"waitMs": 5000}).json()["status"] in (
            "queued",
            "running",
        ):
            pass
        latencies.append((time.perf_counter() - started) * 1000)
    return latencies


def priority(http: httpx.Client, jobs: int, items: int) -> dict[str, Any]:
    alone = interactive(http, jobs)
    body = {
        "template": template(f"pool {uuid.uuid4().hex[:8]}", "plain"),
        "items": [{"customId": f"doc-{i}", "input": {"doc": i}} for i in range(items)],
    }
    batch_id = http.post("/v1/batches", json=body).json()["id"]
    during = interactive(http, jobs)
    state = http.get(f"/v1/batches/{batch_id}").json()
    http.post(f"/v1/batches/{batch_id}/cancel")
    wait_batch(http, batch_id)
    return {"alone": alone, "during": during, "batch_done_meanwhile": state["counts"]}


def p(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(int(q * len(ordered)), len(ordered) - 1)]


def page(results: dict[str, Any], args: argparse.Namespace) -> str:
    lb = results["live_vs_batch"]
    live, batch = lb["live"], lb["batch"]
    s = results["scale"]
    pr = results["priority"]
    return "\n".join(
        [
            "# Batches: live jobs vs a batch, 50,000 items, interactive priority",
            "",
            "`.venv/bin/python bench/batches.py` (bench/batches.py). One process on loopback: "
            "redis-server, the simulator (flaky: 15 % broken JSON, 15 % wrong types, 10 % "
            "missing fields on first answers, 85 % fixed when told why; batch turnaround 0) "
            "and the API with its worker and batch runner. The machine (2 cores) was shared "
            "with other work while this ran: read ratios, not single timings.",
            "",
            f"## {lb.get('items', args.items):,} flaky items: live jobs vs one batch",
            "",
            "| | success | total cost (USD) | wall time (s) | Redis memory left (MB) | rounds |",
            "|---|---|---|---|---|---|",
            f"| live jobs | {live['success']:.1%} | {live['cost']:.4f} | {live['wall']:.1f} | "
            f"{live['memory'] / 1e6:.1f} | — |",
            f"| batch | {batch['success']:.1%} | {batch['cost']:.4f} | {batch['wall']:.1f} | "
            f"{batch['memory'] / 1e6:.1f} | {batch['rounds']} |",
            "",
            f"Cost ratio batch/live: **{batch['cost'] / live['cost']:.2f}** (the batch price "
            "is half; the same loop re-asks, so the success rate is the same within noise).",
            "",
            f"## {s['items']:,} items in one batch (JSONL upload)",
            "",
            "| submit (s) | to the end (s) | rounds | succeeded | failed | cost (USD) | "
            "Redis bytes/item stored | at the end | results streamed (s) |",
            "|---|---|---|---|---|---|---|---|---|",
            f"| {s['submit_s']:.1f} | {s['wall_s']:.1f} | {s['rounds']} | {s['succeeded']:,} | "
            f"{s['failed']:,} | {s['cost']:.2f} | {s['stored_per_item']:.0f} | "
            f"{s['end_per_item']:.0f} | {s['results_s']:.1f} ({s['results_lines']:,} lines) |",
            "",
            "Bytes per item at the end count the item, its answers and its result line "
            "(envelope and turn records). The results are read 500 items at a time from "
            "Redis and streamed; neither the runner nor the API holds the batch.",
            "",
            "## An interactive job while a batch runs on the worker pool",
            "",
            "A provider without a batch API (the simulator answering in 20 ms): the batch's "
            "calls start only while the worker runs no interactive job, one at a time "
            "(`REPROMPT_BATCH_POOL_SLOTS=1`), so an interactive job waits at most for the one "
            "batch call in flight (bound: one model call).",
            "",
            "| | jobs | p50 (ms) | p99 (ms) | max (ms) |",
            "|---|---|---|---|---|",
            f"| alone | {len(pr['alone'])} | {statistics.median(pr['alone']):.0f} | "
            f"{p(pr['alone'], 0.99):.0f} | {max(pr['alone']):.0f} |",
            f"| during a batch | {len(pr['during'])} | {statistics.median(pr['during']):.0f} | "
            f"{p(pr['during'], 0.99):.0f} | {max(pr['during']):.0f} |",
            "",
            f"Batch items done meanwhile: {pr['batch_done_meanwhile']}.",
            "",
        ]
    )


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--items", type=int, default=1000)
    parser.add_argument("--scale", type=int, default=50_000)
    parser.add_argument("--jobs", type=int, default=40)
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--out", type=Path, default=OUT, help="the page to write")
    parser.add_argument(
        "--parts",
        default="live_vs_batch,scale,priority",
        help="which parts to run; the others' numbers are kept from the last run's JSON",
    )
    args = parser.parse_args()
    if args.quick:
        args.items, args.scale, args.jobs = 100, 1000, 10
    parts = set(args.parts.split(","))
    saved = args.out.with_suffix(".json")
    results: dict[str, Any] = {}
    if saved.exists() and not args.quick:
        results = json.loads(saved.read_text())
    with tempfile.TemporaryDirectory() as folder, EmbeddedRedis(Path(folder)) as server:
        sim_config = SimConfig(seed=30, failure_rates=FLAKY, fix_probability=0.85)
        slow_config = SimConfig(seed=31, latency_ms=20)
        with serve_in_background(sim_config) as sim, serve_in_background(slow_config) as slow:
            settings = Settings.model_validate(
                {
                    "redis_url": server.url,
                    "data_dir": Path(folder),
                    "key_prefix": "bench",
                    "batch_poll_ms": 100,
                    "batch_max_bytes": 1_073_741_824,
                    "max_queued": 100_000,
                    "worker_concurrency": 32,
                }
            )
            app = api_app(settings, embedded_worker=True, providers=providers(sim, slow))
            with (
                serve_in_thread(app, name="api", lifespan="on") as url,
                httpx.Client(base_url=url, timeout=600) as http,
            ):
                r = redis.Redis.from_url(server.url)
                runs: dict[str, Callable[[], dict[str, Any]]] = {
                    "live_vs_batch": lambda: live_vs_batch(http, r, args.items),
                    "scale": lambda: scale(http, r, args.scale),
                    "priority": lambda: priority(http, args.jobs, 300),
                }
                for name, run in runs.items():
                    if name in parts:
                        results[name] = run()
                        if not args.quick:  # each part kept as it ends
                            saved.write_text(json.dumps(results, indent=1))
    if not {"live_vs_batch", "scale", "priority"} <= results.keys():
        print(json.dumps(results, indent=1))  # a part never ran: no page yet
        return 0
    text = page(results, args)
    print(text)
    if not args.quick:
        args.out.write_text(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
