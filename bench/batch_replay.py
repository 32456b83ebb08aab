"""The CPU a batch item's replay costs (#30): each round, every pending item runs its job's
loop again from its first turn over the answers it has (app/core/batch/replay.py). This
times that replay alone, per item, for a few answer histories, with no I/O.

    .venv/bin/python bench/batch_replay.py            # a table of medians, ms per item
    .venv/bin/python bench/batch_replay.py --profile wrong_then_fixed
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import cProfile
import pstats
import statistics
import sys
import time
from pathlib import Path

import httpx

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from app.core.batch.replay import Deferred, ReplayClient  # noqa: E402
from app.core.turn.loop import Runtime, run_job  # noqa: E402
from app.core.turn.model import LLMResponse, Usage  # noqa: E402
from app.core.wire.batch import BatchItem, item_spec  # noqa: E402
from app.providers.config import ModelConfig, ProviderConfig, ProvidersConfig  # noqa: E402
from app.providers.router import build_router  # noqa: E402

CONFIG = ProvidersConfig(
    default="oa",
    providers={"o": ProviderConfig(kind="openai", base_url="http://127.0.0.1:9/v1")},
    models={
        "oa": ModelConfig(
            provider="o", structured="prompt", input_usd_per_mtok=0.15, output_usd_per_mtok=0.6
        )
    },
)
# bench/batches.py's template.
TEMPLATE = {
    "task": "Name the city the input is about and its population (bench).",
    "signature": "{city :string, population :int}",
    "model": "oa",
    "budget": {"maxTurns": 1, "returnRetries": 3},
}


def _answer(text: str) -> LLMResponse:
    usage = Usage(120, 20, 0, 0)
    return LLMResponse(
        content=text, finish_reason="stop", model="oa", provider="o", usage=usage, cost_usd=3e-5
    )


OK = '{"city": "Paris", "population": 2100000}'
HISTORIES = {
    "accepted": [OK],
    "broken_then_fixed": ['{"city": "Paris", "population": 21', OK],
    "wrong_then_fixed": ['{"city": "Paris", "population": "2.1 million"}', '{"/population": 7}'],
    "missing_then_fixed": ['{"city": "Paris"}', '{"/population": 2100000}'],
    "wrong_pending": ['{"city": "Paris", "population": "2.1 million"}'],
}


async def replay(history: list[str], n: int) -> float:
    """Milliseconds per item to replay ``n`` items with ``history``."""
    answers = [_answer(text) for text in history]
    async with httpx.AsyncClient() as http:
        router = build_router(CONFIG, http)
        started = time.perf_counter()
        for i in range(n):
            item = BatchItem.model_validate({"customId": f"doc-{i}", "input": {"doc": i}})
            client = ReplayClient(router, answers)
            with contextlib.suppress(Deferred):  # the item's next call: the next round's
                await run_job(item_spec(TEMPLATE, item), Runtime(client=client))
        return (time.perf_counter() - started) * 1000 / n


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--items", type=int, default=200)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--profile", choices=sorted(HISTORIES))
    args = parser.parse_args()
    if args.profile:
        asyncio.run(replay(HISTORIES[args.profile], 20))  # caches warm, as in a round
        profile = cProfile.Profile()
        profile.enable()
        asyncio.run(replay(HISTORIES[args.profile], args.items))
        profile.disable()
        pstats.Stats(profile).sort_stats("cumulative").print_stats(40)
        return 0
    print(f"| history | ms per item (median of {args.repeats}) |")
    print("|---|---|")
    for name, history in HISTORIES.items():
        asyncio.run(replay(history, 20))
        runs = [asyncio.run(replay(history, args.items)) for _ in range(args.repeats)]
        print(f"| {name} | {statistics.median(runs):.2f} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
