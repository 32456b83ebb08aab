"""Prompt tokens per retry, collapsed vs full feedback, through the real HTTP path.

    .venv/bin/python bench/context_growth.py

Runs one job against the simulator with a script of rejected answers, once with the
default collapsed context and once with ``feedback: "full"``, and prints the prompt
tokens the simulator counted for each call.
"""

from __future__ import annotations

import asyncio
import json
import tempfile
from pathlib import Path

from app.core.turn.loop import Runtime, run_job
from app.core.wire.spec import JobSpec
from app.providers.config import ModelConfig, ProviderConfig, ProvidersConfig
from app.providers.embedded import open_router
from app.providers.http import make_client
from reprompt_sim.server import SimConfig, serve_in_background

SCRIPT = ["missing_field", "wrong_type", "broken_json", "missing_field", "extra_field", "ok"]


async def prompt_tokens(url: str, feedback: str) -> list[int]:
    directive = json.dumps({"script": SCRIPT, "counter": "requests"})
    spec = JobSpec.model_validate(
        {
            "task": f"Extract the invoice ({feedback}) [[sim {directive}]]",
            "input": "ACME Tools: 2 hammers at 12.50, 1 saw at 20.00, total 45.00",
            "signature": "{vendor :string, lines [{sku :string, qty :int}], total :float}",
            "budget": {"maxTurns": 1, "returnRetries": len(SCRIPT) - 1},
            "feedback": feedback,
            "strict": True,
        }
    )
    config = ProvidersConfig(
        providers={"sim": ProviderConfig(kind="openai", base_url=f"{url}/v1")},
        models={"sim": ModelConfig(provider="sim", structured="prompt")},
    )
    with tempfile.TemporaryDirectory() as tmp:
        async with (
            make_client() as http,
            open_router(http, data_dir=Path(tmp), config=config) as router,
        ):
            result = await run_job(spec, Runtime(client=router))
    return [t.usage.input_tokens for t in result.turns]


def main() -> None:
    with serve_in_background(SimConfig(seed=1)) as url:
        collapsed = asyncio.run(prompt_tokens(url, "collapsed"))
        full = asyncio.run(prompt_tokens(url, "full"))
    print("call | collapsed | full")
    for i, (c, f) in enumerate(zip(collapsed, full, strict=False), start=1):
        print(f"{i:4} | {c:9} | {f:4}")
    print(
        f"retry {len(collapsed) - 1} vs retry 1: collapsed {collapsed[-1] / collapsed[1]:.2f}x, "
        f"full {full[-1] / full[1]:.2f}x; total prompt tokens {sum(collapsed)} vs {sum(full)}"
    )


if __name__ == "__main__":
    main()
