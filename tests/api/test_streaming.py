"""Streamed partials through the HTTP API, the simulator writing its answers token by token.

Partials arrive in order, hold only complete values that passed their own checks, a
rejected answer's partials are discarded before the next attempt streams, and a client
that leaves a ``/v1/generate`` stream cancels the job: the model call is closed (the
simulator sees the connection go before its last token).
"""

from __future__ import annotations

import itertools
import json
import subprocess
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from app.assembly import api_app as create_app
from app.client import ApiClient, ServerEvent
from app.core.schema.signature import compile_signature
from app.core.schema.validation import compiled
from app.providers.config import ModelConfig, ProviderConfig, ProvidersConfig
from reprompt_sim.server import SimConfig, serve_in_background
from tests.service import KEYS, api_keys, client, finished, serve, settings_for
from tests.waiting import sync_until

SIGNATURE = "{city :string, population :int, country :string, mayor :string}"
# Twenty fields: an answer of a few hundred tokens, long enough to leave in the middle of.
WIDE = "{" + ", ".join(f"field{i} :string" for i in range(20)) + "}"


@pytest.fixture(scope="module")
def streaming_sim() -> Iterator[str]:
    with serve_in_background(SimConfig(seed=31, token_delay_ms=4)) as url:
        yield url


@pytest.fixture(scope="module")
def stream_api(streaming_sim: str, redis_url: str, data_dir: Path) -> Iterator[str]:
    providers = ProvidersConfig(
        default="sim-model",
        providers={
            "sim": ProviderConfig(kind="openai", base_url=f"{streaming_sim}/v1"),
            "claude": ProviderConfig(kind="anthropic", base_url=streaming_sim),
        },
        models={
            "sim-model": ModelConfig(provider="sim", structured="prompt"),
            "sim-json": ModelConfig(provider="sim", structured="json_schema"),
            "claude-sim": ModelConfig(provider="claude", structured="tool"),
        },
    )
    settings = settings_for(
        redis_url, data_dir, key_prefix="stream", api_keys=api_keys(), stream_interval_ms=0
    )
    with serve(create_app(settings, embedded_worker=True, providers=providers)) as url:
        yield url


def job(task: str, script: list[str], signature: str = SIGNATURE, **extra: Any) -> dict[str, Any]:
    directive = json.dumps({"script": script, "counter": "requests"})
    return {
        "task": f"{task} ({uuid.uuid4().hex[:8]})\n[[sim {directive}]]",
        "signature": signature,
        "budget": {"maxTurns": 1, "returnRetries": 3},
        "stream": True,
        **extra,
    }


def shown_values_pass(data: dict[str, Any], schema: dict[str, Any]) -> bool:
    """Every value a partial shows passes its own field's schema."""
    properties = schema["properties"]
    return all(compiled(properties[key]).is_valid(value) for key, value in data.items())


def test_partials_arrive_in_order_with_only_complete_checked_values(stream_api: str) -> None:
    schema = compile_signature(SIGNATURE).output_schema
    with ApiClient(stream_api, key=KEYS["alice"]) as api:
        submitted = api.submit(job("Describe a city", ["ok"]))
        events = list(api.events(submitted["id"]))
    names = [e.name for e in events]
    partials = [e.data for e in events if e.name == "partial"]
    assert len(partials) >= 2, names
    assert names.index("turn_start") < names.index("partial") < names.index("turn_end")
    assert names[-1] == "job_end"
    assert "partial_discarded" not in names
    final = events[-1].data["result"]["data"]
    turn = events[names.index("turn_start")].data["turn"]
    for before, after in itertools.pairwise(partials):
        # Each partial says all the one before did, and more.
        assert after["complete"][: len(before["complete"])] == before["complete"]
        assert len(after["complete"]) > len(before["complete"])
    for partial in partials:
        assert partial["turn"] == turn
        assert partial["attempt"] == 1
        assert shown_values_pass(partial["data"], schema)
        # Complete values only: each one shown is the final answer's value.
        assert all(final[key] == value for key, value in partial["data"].items())
    assert partials[-1]["data"] == final
    assert partials[-1]["complete"][-1] == "$"


def test_a_rejected_answer_is_discarded_and_the_next_attempt_streams(stream_api: str) -> None:
    schema = compile_signature(SIGNATURE).output_schema
    with ApiClient(stream_api, key=KEYS["alice"]) as api:
        submitted = api.submit(job("Describe a town", ["missing_field", "ok"], retryMode="whole"))
        events = list(api.events(submitted["id"]))
    names = [e.name for e in events]
    discarded = names.index("partial_discarded")
    first_end = names.index("turn_end")
    assert discarded < first_end, names
    reason = events[discarded].data
    first_turn = events[names.index("turn_start")].data["turn"]
    assert reason["turn"] == first_turn
    assert "rejected" in reason["reason"]
    second = [e.data for e in events[first_end:] if e.name == "partial"]
    assert second
    assert all(p["turn"] == first_turn + 1 and p["attempt"] == 2 for p in second)
    first = [e.data for e in events[:discarded] if e.name == "partial"]
    # What the rejected answer showed had passed, value by value.
    assert all(shown_values_pass(p["data"], schema) for p in first)
    assert events[-1].data["status"] == "succeeded"
    assert second[-1]["data"] == events[-1].data["result"]["data"]


def read_until_partial(response: httpx.Response) -> list[ServerEvent]:
    seen: list[ServerEvent] = []
    name, data = "message", []
    for line in response.iter_lines():
        if line.startswith("event:"):
            name = line.partition(":")[2].strip()
        elif line.startswith("data:"):
            data.append(line.partition(":")[2].strip())
        elif not line and data:
            seen.append(ServerEvent(None, name, json.loads("\n".join(data))))
            if name == "partial":
                return seen
            name, data = "message", []
    return seen


def test_leaving_a_generate_stream_cancels_the_job_and_closes_the_model_call(
    stream_api: str, streaming_sim: str
) -> None:
    with client(streaming_sim) as sim:
        before = len(sim.get("/sim/streams").json())
        with (
            client(stream_api, KEYS["alice"]) as http,
            http.stream(
                "POST",
                "/v1/generate",
                json=job("Fill a wide form", ["ok"], signature=WIDE, stream=False),
                headers={"accept": "text/event-stream"},
            ) as response,
        ):
            assert response.status_code == 200
            assert response.headers["content-type"].startswith("text/event-stream")
            job_id = response.headers["location"].rsplit("/", 1)[1]
            seen = read_until_partial(response)
            assert seen[-1].name == "partial"
        # The connection is closed: the job is cancelled, its model call closed.
        with client(stream_api, KEYS["alice"]) as http:
            ended = finished(http, job_id)
        assert ended["status"] == "cancelled"

        def closed() -> dict[str, Any] | None:
            streams = sim.get("/sim/streams").json()[before:]
            done = [s for s in streams if s["clientClosed"]]
            return done[0] if done else None

        stream = sync_until(closed, what="the simulator to see the stream closed")
    assert 0 < stream["sent"] < stream["tokens"]


def test_the_python_client_streams_generate_with_partials(stream_api: str) -> None:
    with ApiClient(stream_api, key=KEYS["alice"]) as api:
        events = list(api.generate_stream(job("Describe a village", ["ok"])))
    names = [e.name for e in events]
    assert "partial" in names
    assert names[-1] == "job_end"
    assert events[-1].data["status"] == "succeeded"


def test_reprompt_submit_stream_prints_partials_as_they_come(
    stream_api: str, tmp_path: Path
) -> None:
    spec = job("Describe a harbour", ["ok"])
    del spec["stream"]  # --stream asks for it
    path = tmp_path / "job.json"
    path.write_text(json.dumps(spec))
    command = [sys.executable, "-m", "app.cli", "submit", str(path), "--stream"]
    proc = subprocess.run(
        [*command, "--url", stream_api, "--key", KEYS["alice"]],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr
    result = json.loads(proc.stdout)
    shown = [
        json.loads(line.removeprefix("[partial] "))
        for line in proc.stderr.splitlines()
        if line.startswith("[partial] ")
    ]
    assert shown
    assert shown[-1] == result["data"]


@pytest.mark.parametrize("model", ["sim-json", "claude-sim"])
def test_each_wire_streams_with_usage_from_the_stream(stream_api: str, model: str) -> None:
    with ApiClient(stream_api, key=KEYS["alice"]) as api:
        submitted = api.submit(job(f"Describe a port on {model}", ["ok"], model=model))
        events = list(api.events(submitted["id"]))
    partials = [e.data for e in events if e.name == "partial"]
    result = events[-1].data["result"]
    assert result["status"] == "success", result
    assert len(partials) >= 2
    assert partials[-1]["data"] == result["data"]
    assert not any("did not stream" in w for w in result["warnings"])
    execution = result["execution"]
    assert execution["inputTokens"] > 0  # the usage came with the stream
    assert execution["outputTokens"] > 0
