"""Streamed chat completions with a JSON response format: when the first validated
partial (reprompt's extension chunk) arrives vs the first content delta, through the
official ``openai`` Python SDK.

    .venv/bin/python bench/openai_partials.py -n 15

One API process with an in-process worker, its embedded redis-server, the simulator
streaming at ``--token-ms`` per token (a perfect model: one turn); a 12-field form. Prints
the medians as one JSON line.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
import uuid
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import openai

from app.assembly import api_app
from app.providers.config import ModelConfig, ProviderConfig, ProvidersConfig
from app.redis_server import EmbeddedRedis
from reprompt_sim.server import SimConfig, serve_in_background
from tests.service import serve, settings_for

FIELDS = [f"f{i}" for i in range(12)]
SCHEMA = {
    "type": "object",
    "properties": {name: {"type": "string"} for name in FIELDS},
    "required": FIELDS,
    "additionalProperties": False,
}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("-n", type=int, default=15, help="streamed requests")
    parser.add_argument("--token-ms", type=float, default=10.0, help="simulated ms per token")
    args = parser.parse_args()
    tmp = Path(tempfile.mkdtemp())
    sim_config = SimConfig(seed=1, token_delay_ms=args.token_ms)
    with EmbeddedRedis(tmp / "redis") as redis, serve_in_background(sim_config) as sim:
        providers = ProvidersConfig(
            default="m",
            providers={"sim": ProviderConfig(kind="openai", base_url=f"{sim}/v1")},
            models={"m": ModelConfig(provider="sim", structured="prompt")},
        )
        settings = settings_for(redis.url, tmp / "data", key_prefix="bench")
        with serve(api_app(settings, embedded_worker=True, providers=providers)) as url:
            client = openai.OpenAI(base_url=f"{url}/v1", api_key="none", max_retries=0)
            partial, content, done = [], [], []
            for _ in range(args.n):
                started = time.perf_counter()
                first: float | None = None
                text: float | None = None
                stream = client.chat.completions.create(
                    model="m",
                    stream=True,
                    messages=[{"role": "user", "content": f"Fill the form {uuid.uuid4().hex}"}],
                    response_format={
                        "type": "json_schema",
                        "json_schema": {"name": "form", "schema": SCHEMA},
                    },
                )
                for chunk in stream:
                    now = time.perf_counter() - started
                    event = (chunk.model_extra or {}).get("reprompt") or {}
                    if first is None and event.get("event") == "partial":
                        first = now
                    if text is None and chunk.choices and chunk.choices[0].delta.content:
                        text = now
                assert first is not None, "no partial came"
                assert text is not None, "no content came"
                partial.append(first)
                content.append(text)
                done.append(time.perf_counter() - started)

    def ms(values: list[float]) -> int:
        return round(statistics.median(values) * 1000)

    print(
        json.dumps(
            {
                "n": args.n,
                "token_ms": args.token_ms,
                "first_partial_ms": ms(partial),
                "first_content_ms": ms(content),
                "done_ms": ms(done),
            }
        )
    )


if __name__ == "__main__":
    main()
