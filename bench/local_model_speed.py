"""How fast the embedded local model is with the llama-cpp-python build this venv holds.

Starts the managed llama.cpp server (``app.providers.local.LocalModelServer``) and times,
``--runs`` times each, straight against its OpenAI-compatible endpoint:

* generation: a short prompt, 128 tokens out, unconstrained (the base model always runs to
  the limit), temperature 0 — completion tokens / wall seconds;
* prompt reading: a ~700-token prompt, 1 token out — prompt tokens / wall seconds;
* a constrained answer: ``json_object`` + a 2-field schema, what reprompt sends.

Prints one JSON line (medians) with the build's CPU features, so two builds (native and
portable) compare on one machine in one sitting::

    .venv/bin/python bench/local_model_speed.py --runs 7
    /tmp/native-venv/bin/python bench/local_model_speed.py --runs 7
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import httpx

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from app.providers.local import LocalModelServer, build_info
from app.settings import default_data_dir

SCHEMA = {
    "type": "object",
    "properties": {"name": {"type": "string"}, "age": {"type": "integer"}},
    "required": ["name", "age"],
}
LONG_PROMPT = " ".join(
    f"Line {i}: the quick brown fox jumps over the lazy dog near the river bank." for i in range(45)
)


def _post(client: httpx.Client, model: str, body: dict[str, Any]) -> tuple[float, dict[str, Any]]:
    began = time.perf_counter()
    response = client.post("/chat/completions", json={"model": model, **body})
    response.raise_for_status()
    return time.perf_counter() - began, response.json()


def measure(runs: int, data_dir: Path) -> dict[str, Any]:
    began = time.perf_counter()
    server = LocalModelServer(data_dir)
    server.start()
    try:
        start_s = time.perf_counter() - began
        gen: list[float] = []
        read: list[float] = []
        constrained: list[float] = []
        with httpx.Client(
            base_url=server.base_url, headers=server.auth_headers(), timeout=300, trust_env=False
        ) as client:
            _post(client, server.model_name, {"messages": [{"role": "user", "content": "Hi"}]})
            for i in range(runs):
                seconds, body = _post(
                    client,
                    server.model_name,
                    {
                        "messages": [{"role": "user", "content": f"Story {i}: once upon a time"}],
                        "max_tokens": 128,
                        "temperature": 0,
                    },
                )
                gen.append(body["usage"]["completion_tokens"] / seconds)
                seconds, body = _post(
                    client,
                    server.model_name,
                    {
                        "messages": [{"role": "user", "content": f"{i} {LONG_PROMPT}"}],
                        "max_tokens": 1,
                        "temperature": 0,
                    },
                )
                read.append(body["usage"]["prompt_tokens"] / seconds)
                seconds, _ = _post(
                    client,
                    server.model_name,
                    {
                        "messages": [
                            {"role": "user", "content": f"Alice is {30 + i}. Her name and age?"}
                        ],
                        "max_tokens": 32,
                        "temperature": 0,
                        "response_format": {"type": "json_object", "schema": SCHEMA},
                    },
                )
                constrained.append(seconds * 1000)
    finally:
        server.stop()
    return {
        "build": build_info(),
        "runs": runs,
        "start_s": round(start_s, 2),
        "generation_tokens_per_s": round(statistics.median(gen), 1),
        "prompt_tokens_per_s": round(statistics.median(read), 1),
        "constrained_answer_ms": round(statistics.median(constrained)),
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=7)
    parser.add_argument("--data-dir", type=Path, default=None)
    args = parser.parse_args()
    if args.data_dir is not None:
        print(json.dumps(measure(args.runs, args.data_dir)))
        return 0
    # The assembled GGUF is reused from the default data dir when it is there.
    models = default_data_dir() / "models"
    with tempfile.TemporaryDirectory(prefix="reprompt-speed-") as tmp:
        data_dir = Path(tmp)
        if models.is_dir():
            (data_dir / "models").symlink_to(models)
        print(json.dumps(measure(args.runs, data_dir)))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
