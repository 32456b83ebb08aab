"""The embedded llama.cpp server with and without ``--logits_all`` (issue 33): memory, speed,
and whether it returns token log-probabilities (the envelope's ``confidence``).

Starts ``LocalModelServer`` once each way and sends the same few requests reprompt sends
(a short extraction under a JSON Schema; ``logprobs: true`` with ``--logits_all``, which
the server refuses without it), one at a time::

    nice -n 19 .venv/bin/python bench/logits_all.py --runs 5

Prints one JSON line per setting: the server's RSS after start and its peak (VmHWM) after
the requests, the median request time, how many answers carried logprobs, and the first error.
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

from app.providers.local import LocalModelServer, gguf_path
from app.settings import default_data_dir

SCHEMA = {
    "type": "object",
    "properties": {"item": {"type": "string"}, "price": {"type": "number"}},
    "required": ["item", "price"],
}
PROMPT = (
    "Extract the item and its price.\n\nText: Alice bought a kettle for 45.80 euros at the "
    "market.\n\nFields: item (string), price (number)."
)


class Server(LocalModelServer):
    """The managed server, with ``--logits_all`` as asked."""

    def __init__(self, data_dir: Path, model: Path, logits_all: bool) -> None:
        super().__init__(data_dir, model_path=model, api_key=None)
        self.logits_all = logits_all

    def _command(self, model_path: Path, port: int) -> list[str]:
        argv = super()._command(model_path, port)
        argv[argv.index("--logits_all") + 1] = str(self.logits_all)
        return argv


def _memory_mb(pid: int, field: str) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1]) / 1024
    return 0.0


def measure(logits_all: bool, runs: int, model: Path) -> dict[str, Any]:
    with tempfile.TemporaryDirectory() as tmp:
        server = Server(Path(tmp), model, logits_all)
        server.start()
        try:
            pid = server.pid
            assert pid is not None
            started_mb = _memory_mb(pid, "VmRSS")
            times: list[float] = []
            with_logprobs = 0
            errors: list[str] = []
            with httpx.Client(base_url=server.base_url, timeout=600, trust_env=False) as http:
                for _ in range(runs):
                    body = {
                        "model": server.model_name,
                        "messages": [{"role": "user", "content": PROMPT}],
                        "response_format": {"type": "json_object", "schema": SCHEMA},
                        "temperature": 0,
                        "max_tokens": 48,
                    }
                    if logits_all:  # without it the server refuses logprobs (a 500)
                        body.update(logprobs=True, top_logprobs=0)
                    began = time.perf_counter()
                    response = http.post("/chat/completions", json=body)
                    times.append(time.perf_counter() - began)
                    if response.status_code != 200:
                        errors.append(f"{response.status_code}: {response.text[:200]}")
                        continue
                    choice = response.json()["choices"][0]
                    content = (choice.get("logprobs") or {}).get("content")
                    with_logprobs += bool(content)
            return {
                "logits_all": logits_all,
                "rss_after_start_mb": round(started_mb),
                "peak_rss_mb": round(_memory_mb(pid, "VmHWM")),
                "median_request_s": round(statistics.median(times), 2),
                "answers_with_logprobs": f"{with_logprobs}/{runs}",
                "errors": errors[:1],
            }
        finally:
            server.stop()


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--runs", type=int, default=5)
    args = parser.parse_args()
    model = gguf_path(default_data_dir() / "models")
    for logits_all in (False, True):
        print(json.dumps(measure(logits_all, args.runs, model)), flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
