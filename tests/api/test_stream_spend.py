"""A job cancelled mid-stream bills what it spent (#31), through the HTTP API: cancelled
with ``POST /v1/jobs/{id}/cancel``, or by leaving a ``/v1/generate`` stream.

The simulator streams token by token; one of them stalls after a few tokens, its connection
open, so a cancel lands knowing every token it sent has arrived. The cancelled job's record
holds the call cut short: its output tokens are the ones the simulator sent, its cost the
model's price times its tokens, counted once. A cancel that comes as the answer has arrived
(while a webhook validator checks it) bills the whole answer, once.
"""

from __future__ import annotations

import json
import re
import threading
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from app.assembly import api_app as create_app
from app.core.turn.cut import ESTIMATED, UNUSED
from app.providers.config import ModelConfig, ProviderConfig, ProvidersConfig
from reprompt_sim.server import SimConfig, serve_in_background
from tests.outbound.receiver import Receiver, Reply, Seen
from tests.service import KEYS, api_keys, client, serve, settings_for
from tests.waiting import sync_until

pytestmark = pytest.mark.slow

STALL = 12  # tokens a stalling stream sends before it stalls
IN_USD, OUT_USD = 3.0, 15.0  # per million tokens
WIDE = "{" + ", ".join(f"field{i} :string" for i in range(20)) + "}"


@pytest.fixture(scope="module")
def stalling_sim() -> Iterator[str]:
    with serve_in_background(SimConfig(seed=31, token_delay_ms=1, stall_after_tokens=STALL)) as url:
        yield url


@pytest.fixture(scope="module")
def whole_sim() -> Iterator[str]:
    with serve_in_background(SimConfig(seed=31, token_delay_ms=1)) as url:
        yield url


@pytest.fixture(scope="module")
def receiver() -> Iterator[Receiver]:
    with Receiver() as running:
        yield running


@pytest.fixture(scope="module")
def spend_api(stalling_sim: str, whole_sim: str, redis_url: str, data_dir: Path) -> Iterator[str]:
    providers = ProvidersConfig(
        default="stall-openai",
        providers={
            "stall": ProviderConfig(kind="openai", base_url=f"{stalling_sim}/v1"),
            "stall-claude": ProviderConfig(kind="anthropic", base_url=stalling_sim),
            "whole": ProviderConfig(kind="openai", base_url=f"{whole_sim}/v1"),
        },
        models={
            "stall-openai": ModelConfig(
                provider="stall",
                structured="prompt",
                input_usd_per_mtok=IN_USD,
                output_usd_per_mtok=OUT_USD,
            ),
            "stall-anthropic": ModelConfig(
                provider="stall-claude",
                structured="tool",
                input_usd_per_mtok=IN_USD,
                output_usd_per_mtok=OUT_USD,
            ),
            "whole-openai": ModelConfig(
                provider="whole",
                structured="prompt",
                input_usd_per_mtok=IN_USD,
                output_usd_per_mtok=OUT_USD,
            ),
        },
    )
    settings = settings_for(
        redis_url,
        data_dir,
        key_prefix="spend",
        api_keys=api_keys(),
        stream_interval_ms=0,
        outbound_allow=["127.0.0.1"],
    )
    with serve(create_app(settings, embedded_worker=True, providers=providers)) as url:
        yield url


def job(task: str, model: str, **extra: Any) -> dict[str, Any]:
    directive = json.dumps({"script": ["ok"], "counter": "requests"})
    return {
        "task": f"{task} ({uuid.uuid4().hex[:8]})\n[[sim {directive}]]",
        "signature": WIDE,
        "budget": {"maxTurns": 1, "returnRetries": 1},
        "model": model,
        "stream": True,
        **extra,
    }


def streams(sim: httpx.Client, before: int) -> list[dict[str, Any]]:
    entries: list[dict[str, Any]] = sim.get("/sim/streams").json()[before:]
    return entries


def billed(http: httpx.Client, job_id: str) -> dict[str, Any] | None:
    """The job once its cancel has been billed: cancelled, with a cancelled turn."""
    view: dict[str, Any] = http.get(f"/v1/jobs/{job_id}").json()
    cut = [t for t in view.get("turns") or () if t["outcome"] == "cancelled"]
    return view if view["status"] == "cancelled" and cut else None


def cost_of(usage: dict[str, Any]) -> float:
    return float(usage["inputTokens"] * IN_USD + usage["outputTokens"] * OUT_USD) / 1e6


def metric(api: str, name: str, model: str) -> float:
    """The value of ``name``'s series for ``model`` (0 before the first call)."""
    text = httpx.get(f"{api}/metrics").text
    found = re.search(rf'^{name}\{{[^}}]*model="{model}"[^}}]*\}} (\S+)$', text, re.MULTILINE)
    return float(found.group(1)) if found is not None else 0.0


@pytest.mark.parametrize("model", ["stall-openai", "stall-anthropic"])
def test_a_job_cancelled_mid_stream_bills_only_the_tokens_it_streamed(
    spend_api: str, stalling_sim: str, model: str
) -> None:
    spent_before = metric(spend_api, "reprompt_llm_cost_usd_total", model)
    wasted_before = metric(spend_api, "reprompt_wasted_cost_usd_total", model)
    with client(stalling_sim) as sim, client(spend_api, KEYS["alice"]) as http:
        before = len(sim.get("/sim/streams").json())
        created = http.post("/v1/jobs", json=job("Fill a wide form", model))
        assert created.status_code == 202, created.text
        job_id = created.json()["id"]
        sync_until(
            lambda: any(s["sent"] == STALL for s in streams(sim, before)),
            what="the stream to stall",
        )
        assert http.post(f"/v1/jobs/{job_id}/cancel").status_code == 200
        view = sync_until(lambda: billed(http, job_id), what="the cancelled call to be billed")
        (stream,) = streams(sim, before)
    assert stream["clientClosed"]
    assert stream["sent"] == STALL < stream["tokens"]
    (cut,) = view["turns"]
    usage = cut["usage"]
    assert usage["outputTokens"] == STALL  # what arrived, not the whole answer
    assert usage["inputTokens"] > 0
    # The prompt's tokens: Anthropic reports them at the stream's start; OpenAI's only at
    # its end, so they are the service's estimate, and the record says so.
    assert (ESTIMATED in cut["warnings"]) is (model == "stall-openai")
    if model == "stall-openai":
        assert usage["inputTokens"] == cut["promptTokensEstimate"]
    assert cut["costUsd"] == pytest.approx(cost_of(usage))
    assert cut["costUsd"] > 0
    result = view["result"]
    assert result["error"] == "cancelled"
    execution = result["execution"]
    assert execution["outputTokens"] == STALL
    assert execution["llmCalls"] == 1
    assert execution["cost"] == pytest.approx(cut["costUsd"])
    assert execution["wastedCost"] == pytest.approx(cut["costUsd"])
    # The metrics count it, once.
    spent = metric(spend_api, "reprompt_llm_cost_usd_total", model) - spent_before
    wasted = metric(spend_api, "reprompt_wasted_cost_usd_total", model) - wasted_before
    assert spent == pytest.approx(cut["costUsd"])
    assert wasted == pytest.approx(cut["costUsd"])


def test_leaving_a_generate_stream_mid_answer_bills_what_it_streamed(
    spend_api: str, stalling_sim: str
) -> None:
    with client(stalling_sim) as sim, client(spend_api, KEYS["alice"]) as http:
        before = len(sim.get("/sim/streams").json())
        with http.stream(
            "POST", "/v1/generate", json=job("Fill a long form", "stall-openai")
        ) as response:
            assert response.status_code == 200
            job_id = response.headers["location"].rsplit("/", 1)[1]
            sync_until(
                lambda: any(s["sent"] == STALL for s in streams(sim, before)),
                what="the stream to stall",
            )
        # Left: the job is cancelled, and billed.
        view = sync_until(lambda: billed(http, job_id), what="the cancelled call to be billed")
    (cut,) = view["turns"]
    assert cut["usage"]["outputTokens"] == STALL
    assert view["result"]["execution"]["cost"] == pytest.approx(cost_of(cut["usage"]))


def test_a_cancel_as_the_answer_arrives_bills_the_whole_answer_once(
    spend_api: str, whole_sim: str, receiver: Receiver
) -> None:
    checking, release = threading.Event(), threading.Event()

    def hold(seen: Seen) -> Reply:
        checking.set()
        release.wait(60)
        return Reply(200, b'{"ok": true}')

    receiver.script(hold)
    validators = [{"kind": "webhook", "url": receiver.url}]
    try:
        with client(whole_sim) as sim, client(spend_api, KEYS["alice"]) as http:
            before = len(sim.get("/sim/streams").json())
            spec = job("Fill a checked form", "whole-openai", validators=validators)
            created = http.post("/v1/jobs", json=spec)
            assert created.status_code == 202, created.text
            job_id = created.json()["id"]
            sync_until(checking.is_set, what="the answer to reach its webhook validator")
            assert http.post(f"/v1/jobs/{job_id}/cancel").status_code == 200
            view = sync_until(lambda: billed(http, job_id), what="the answered call billed")
            (stream,) = streams(sim, before)
    finally:
        release.set()
    assert stream["finished"]
    (turn,) = view["turns"]  # once: the answer's call, not twice
    assert turn["diagnosis"] == UNUSED
    usage = turn["usage"]
    # The usage the stream ended with (the provider's count, not the chunks): exact.
    assert usage["outputTokens"] > 0
    assert usage["inputTokens"] > 0
    assert ESTIMATED not in turn["warnings"]
    assert turn["costUsd"] > 0
    assert turn["costUsd"] == pytest.approx(cost_of(usage))
    execution = view["result"]["execution"]
    assert execution["llmCalls"] == 1
    assert execution["cost"] == pytest.approx(turn["costUsd"])
    assert execution["outputTokens"] == usage["outputTokens"]


def test_a_resumed_job_cancelled_mid_stream_bills_only_its_own_calls(
    spend_api: str, stalling_sim: str
) -> None:
    """A run resumed after client tools starts with the turns before its pause: those are
    stored already and are not billed again."""
    directive = json.dumps(
        {
            "script": [{"call": [{"name": "lookup", "arguments": {"sku": "A1"}}]}, "ok"],
            "counter": "requests",
        }
    )
    tool = {
        "name": "lookup",
        "description": "Price of a SKU",
        "parameters": {"type": "object", "properties": {"sku": {"type": "string"}}},
    }
    spec = job("Price a SKU", "stall-openai", tools=[tool], budget={"maxTurns": 3})
    spec["task"] = f"Price A1 ({uuid.uuid4().hex[:8]})\n[[sim {directive}]]"
    with client(stalling_sim) as sim, client(spend_api, KEYS["alice"]) as http:
        job_id = http.post("/v1/jobs", json=spec).json()["id"]

        def paused() -> dict[str, Any] | None:
            view: dict[str, Any] = http.get(f"/v1/jobs/{job_id}").json()
            return view if view["status"] == "requires_action" else None

        calls = sync_until(paused, what="the job to wait for its tool")["requiredAction"]
        before = len(sim.get("/sim/streams").json())
        outputs = [{"toolCallId": c["id"], "output": {"price": 9.5}} for c in calls["toolCalls"]]
        assert http.post(f"/v1/jobs/{job_id}/tool-outputs", json={"outputs": outputs}).is_success
        sync_until(
            lambda: any(s["sent"] == STALL for s in streams(sim, before)),
            what="the resumed answer to stall",
        )
        assert http.post(f"/v1/jobs/{job_id}/cancel").status_code == 200
        view = sync_until(lambda: billed(http, job_id), what="the cancelled call to be billed")
    assert [(t["outcome"], t["index"]) for t in view["turns"]] == [
        ("tool_calls", 1),
        ("cancelled", 2),
    ]
    assert view["result"]["execution"]["llmCalls"] == 2
