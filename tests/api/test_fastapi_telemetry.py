"""FastAPI's own telemetry with a global OpenTelemetry provider: FastAPI's request spans
are made for the job routes too, one server span per request (reprompt makes none of its
own in the API: no double). A global provider cannot be unset, so the API runs in a
process of its own. (FastAPI versions before its native telemetry: skipped.)"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("fastapi.telemetry")  # FastAPI's native telemetry (newer releases)

ROOT_DIR = Path(__file__).resolve().parents[2]

CHILD = """
import json, sys
from pathlib import Path

import httpx
from opentelemetry import trace
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from app.assembly import api_app
from app.providers.config import ModelConfig, ProviderConfig, ProvidersConfig
from tests.service import serve, settings_for

redis_url, data_dir, sim_url = sys.argv[1:4]
exporter = InMemorySpanExporter()
provider = TracerProvider()
provider.add_span_processor(SimpleSpanProcessor(exporter))
trace.set_tracer_provider(provider)
providers = ProvidersConfig(
    default="sim-model",
    providers={"sim": ProviderConfig(kind="openai", base_url=f"{sim_url}/v1")},
    models={"sim-model": ModelConfig(provider="sim", structured="prompt")},
)
app = api_app(settings_for(redis_url, Path(data_dir), key_prefix="otel"), providers=providers)
body = {"task": "Name a city.", "signature": "{city :string}", "budget": {"maxTurns": 1}}
with serve(app) as url, httpx.Client(base_url=url, timeout=30) as http:
    created = http.post("/v1/jobs", json=body)
    job = http.get(f"/v1/jobs/{created.json()['id']}")
    bad = http.post("/v1/generate", content=b"{", headers={"content-type": "application/json"})
spans = [
    {"name": s.name, "kind": s.kind.name, "scope": s.instrumentation_scope.name}
    for s in exporter.get_finished_spans()
]
print(json.dumps({
    "statuses": [created.status_code, job.status_code, bad.status_code],
    "spans": spans,
}))
"""


def test_a_global_provider_gets_fastapis_request_spans(
    redis_url: str, data_dir: Path, sim_url: str
) -> None:
    done = subprocess.run(
        [sys.executable, "-c", CHILD, redis_url, str(data_dir), sim_url],
        cwd=ROOT_DIR,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    seen = json.loads(done.stdout.strip().splitlines()[-1])
    assert seen["statuses"] == [202, 200, 422]
    server = [(s["name"], s["scope"]) for s in seen["spans"] if s["kind"] == "SERVER"]
    assert server == [
        ("POST /v1/jobs", "fastapi"),
        ("GET /v1/jobs/{job_id}", "fastapi"),
        ("POST /v1/generate", "fastapi"),
    ]
