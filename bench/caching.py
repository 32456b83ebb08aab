"""Prompt caching on a retry-heavy set: input tokens and cost with the cache on and off.

Real processes on loopback: the simulator and ``reprompt serve`` (with its embedded
redis-server), whose providers file has four models on the simulator: each wire protocol
(OpenAI chat completions, Anthropic messages) with ``prompt_cache`` on and off, at list
prices (gpt-4o-mini; claude-sonnet-4-5 with its cache-write price). Each job extracts
from a document (three sizes: one under the 1,024-token minimum a prefix needs to be
cached, two over it) and is re-asked 1 to 4 times (the simulator drops a required field
as scripted), so most of its calls are re-asks that repeat the system prompt and the task.
The same jobs (seeded) run on every model; the page compares what the providers report.

    .venv/bin/python bench/caching.py            # writes docs/benchmarks/caching.md
    .venv/bin/python bench/caching.py --quick    # a smoke run to a temp dir
"""

from __future__ import annotations

import argparse
import asyncio
import json
import random
import sys
import tempfile
from pathlib import Path
from typing import Any

import httpx

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.common import DOCS, Stack, machine, page_end, with_notes

NOTES = Path(__file__).with_name("caching_notes.md")
SIZES = {"small": 1_500, "medium": 8_000, "large": 24_000}  # characters of input
SENTENCE = (
    "Consignment {n}: {q} pallets of {item} from {city}, received at dock {d} "
    "and checked by the night shift. "
)
ITEMS = ("copper pipe", "roof tiles", "oak planks", "glass panes", "steel rods", "cement")
CITIES = ("Bergen", "Lyon", "Porto", "Gdansk", "Turku", "Ghent", "Bilbao")
# (model name in the providers file, wire protocol, cache on)
MODELS = (
    ("openai-cached", "openai", True),
    ("openai-plain", "openai", False),
    ("anthropic-cached", "anthropic", True),
    ("anthropic-plain", "anthropic", False),
)
# USD per million tokens: input, output, cached input, cache write (list prices).
PRICES = {
    "openai": ("gpt-4o-mini", 0.15, 0.60, 0.075, None),
    "anthropic": ("claude-sonnet-4-5", 3.0, 15.0, 0.30, 3.75),
}


def providers_file(path: Path, sim_url: str) -> Path:
    lines = [
        f'[providers.openai]\nkind = "openai"\nbase_url = "{sim_url}/v1"\n',
        f'[providers.anthropic]\nkind = "anthropic"\nbase_url = "{sim_url}"\n',
    ]
    for name, kind, cache in MODELS:
        upstream, price_in, price_out, cached, write = PRICES[kind]
        lines.append(
            f'[models.{name}]\nprovider = "{kind}"\nname = "{upstream}"\nstructured = "prompt"\n'
            f"prompt_cache = {str(cache).lower()}\n"
            f"input_usd_per_mtok = {price_in}\noutput_usd_per_mtok = {price_out}\n"
            f"cached_input_usd_per_mtok = {cached}\n"
            + ("" if write is None else f"cache_write_usd_per_mtok = {write}\n")
        )
    path.write_text("\n".join(lines))
    return path


def document(rnd: random.Random, chars: int) -> str:
    parts: list[str] = []
    n = 0
    while sum(map(len, parts)) < chars:
        n += 1
        parts.append(
            SENTENCE.format(
                n=n,
                q=rnd.randint(1, 40),
                item=rnd.choice(ITEMS),
                city=rnd.choice(CITIES),
                d=rnd.randint(1, 12),
            )
        )
    return "".join(parts)[:chars]


def jobs(count: int, seed: int) -> list[dict[str, Any]]:
    """``count`` jobs per size: a document, and 1 to 4 rejected answers before a good one."""
    rnd = random.Random(seed)
    out = []
    for size, chars in SIZES.items():
        for i in range(count):
            out.append(
                {
                    "size": size,
                    "rejections": rnd.randint(1, 4),
                    "input": document(rnd, chars),
                    "tag": f"{size}-{i:03d}",
                }
            )
    return out


def body(job: dict[str, Any], model: str) -> dict[str, Any]:
    script = ["missing_field"] * job["rejections"] + ["ok"]
    directive = json.dumps({"script": script, "counter": "requests"})
    # The tag names the model too (the simulator counts answers per task), at a fixed width
    # so that every model reads prompts of the same size.
    return {
        "task": f"Which city shipped the most pallets? [{model:>16}/{job['tag']}]\n"
        f"[[sim {directive}]]",
        "input": job["input"],
        "signature": "{city :string, pallets :int, consignments :int}",
        "budget": {"maxTurns": 1, "returnRetries": 4},
        "model": model,
        # Whole re-asks, as scripted: a field-level one would ask for the missing field
        # alone, and this set measures the cache under repeated whole prompts.
        "retryMode": "whole",
    }


async def run_model(
    http: httpx.AsyncClient, model: str, work: list[dict[str, Any]], concurrency: int
) -> list[dict[str, Any]]:
    gate = asyncio.Semaphore(concurrency)

    async def one(job: dict[str, Any]) -> dict[str, Any]:
        async with gate:
            submitted = await http.post("/v1/jobs", json=body(job, model))
            submitted.raise_for_status()
            job_id = submitted.json()["id"]
            for _ in range(60):
                got = (await http.get(f"/v1/jobs/{job_id}", params={"waitMs": 10_000})).json()
                if got["status"] in ("succeeded", "failed", "cancelled"):
                    break
            else:
                raise RuntimeError(f"job {job_id} did not finish")
            execution = got["result"]["execution"]
            return {
                "size": job["size"],
                "status": got["status"],
                "calls": execution["llmCalls"],
                "input": execution["inputTokens"],
                "cached": execution["cachedInputTokens"],
                "written": execution["cacheWriteTokens"],
                "output": execution["outputTokens"],
                "cost": execution["cost"],
            }

    return list(await asyncio.gather(*(one(job) for job in work)))


def totals(rows: list[dict[str, Any]]) -> dict[str, Any]:
    keys = ("calls", "input", "cached", "written", "output", "cost")
    out: dict[str, Any] = {k: sum(r[k] for r in rows) for k in keys}
    out["jobs"] = len(rows)
    out["succeeded"] = sum(r["status"] == "succeeded" for r in rows)
    out["cost"] = round(out["cost"], 8)
    return out


def run(args: argparse.Namespace) -> dict[str, Any]:
    work = jobs(args.jobs, args.seed)
    results: dict[str, Any] = {"machine": machine(), "args": vars(args), "models": {}}
    with Stack() as stack:
        sim = stack.sim(seed=args.seed)
        path = providers_file(stack.tmp / "caching-providers.toml", sim.url)
        serve = stack.service("serve", stack.env(sim.url, None, REPROMPT_PROVIDERS=path))

        async def all_models() -> None:
            async with httpx.AsyncClient(base_url=serve.url, timeout=60.0, trust_env=False) as http:
                for name, _, _ in MODELS:
                    rows = await run_model(http, name, work, args.concurrency)
                    results["models"][name] = {
                        "all": totals(rows),
                        **{s: totals([r for r in rows if r["size"] == s]) for s in SIZES},
                    }

        asyncio.run(all_models())
    return results


def _row(label: str, t: dict[str, Any]) -> str:
    share = 100 * t["cached"] / max(t["input"], 1)
    return (
        f"| {label} | {t['jobs']} | {t['calls']} | {t['input']:,} | {t['cached']:,} "
        f"({share:.0f} %) | {t['written']:,} | ${t['cost']:.4f} |"
    )


def page(results: dict[str, Any], command: str) -> str:
    models = results["models"]
    lines = [
        "# Prompt caching on a retry-heavy set",
        "",
        f"Produced by `{command}`. Real processes on loopback: the simulator (seed "
        f"{results['args']['seed']}) and `reprompt serve`; {results['args']['jobs']} jobs per "
        f"input size ({', '.join(f'{k} {v:,} characters' for k, v in SIZES.items())}), each "
        "re-asked 1 to 4 times (seeded), run on four models: each wire protocol with "
        "`prompt_cache` on and off. Prices are the providers file's, at list prices: "
        "gpt-4o-mini $0.15 / $0.60 per million input / output tokens, $0.075 cached; "
        "claude-sonnet-4-5 $3 / $15, $0.30 cached, $3.75 for a cache write. Tokens are what "
        "the simulator reports, the way each provider does (docs/simulator.md): OpenAI "
        "reads a repeated prefix of 1,024+ tokens in 128-token steps under the job's "
        "`prompt_cache_key`; Anthropic writes the prefix marked `cache_control` and reads it "
        "back on the next call.",
        "",
        "## Totals",
        "",
        "| model | jobs | calls | input tokens | of which cached | cache writes | cost |",
        "|---|---|---|---|---|---|---|",
    ]
    for name, _, _ in MODELS:
        lines.append(_row(name, models[name]["all"]))
    lines += ["", "| protocol | input tokens billed at full price, on ÷ off | cost, on ÷ off |"]
    lines += ["|---|---|---|"]
    for kind in ("openai", "anthropic"):
        on, off = models[f"{kind}-cached"]["all"], models[f"{kind}-plain"]["all"]
        full = on["input"] - on["cached"] - on["written"]
        lines.append(
            f"| {kind} | {full / max(off['input'], 1):.2f} | "
            f"**{on['cost'] / max(off['cost'], 1e-12):.2f}** |"
        )
    lines += [
        "",
        "## By input size",
        "",
        "| model | size | jobs | calls | input tokens | of which cached | cache writes | cost |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for name, _, _ in MODELS:
        for size in SIZES:
            row = _row(name, models[name][size]).replace(f"| {name} |", f"| {name} | {size} |", 1)
            lines.append(row)
    lines += [""]
    lines += page_end(results["machine"])
    return "\n".join(lines)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="small run, output to a temp dir")
    parser.add_argument("--jobs", type=int, default=30, help="jobs per input size")
    parser.add_argument("--concurrency", type=int, default=4)
    parser.add_argument("--seed", type=int, default=5)
    args = parser.parse_args()
    if args.quick:
        args.jobs = 3
    command = "python bench/caching.py" + (" --quick" if args.quick else "")
    results = run(args)
    out = Path(tempfile.mkdtemp()) if args.quick else DOCS
    (out / "caching.json").write_text(json.dumps(results, indent=1))
    (out / "caching.md").write_text(with_notes(page(results, command), NOTES, quick=args.quick))
    print(json.dumps({name: m["all"] for name, m in results["models"].items()}, indent=1))
    print(f"wrote {out / 'caching.md'}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
