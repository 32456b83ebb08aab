"""The simulator's batch APIs driven by the vendors' own SDKs (openai, anthropic): files
up and down, create, poll, results, cancel, list, parsed into the SDKs' types."""

from __future__ import annotations

import json
from collections.abc import Iterator

import anthropic
import openai
import pytest

from reprompt_sim.server import SimConfig, serve_in_background
from tests.waiting import sync_until

SCHEMA_TASK = 'Give a city as JSON. [[sim {"script": ["ok"]}]]'


@pytest.fixture(scope="module")
def sim() -> Iterator[str]:
    with serve_in_background(SimConfig(seed=8)) as url:
        yield url


@pytest.fixture(scope="module")
def slow_sim() -> Iterator[str]:
    with serve_in_background(SimConfig(seed=9, batch_turnaround_ms=60_000)) as url:
        yield url


def _openai_lines(n: int) -> bytes:
    lines = [
        {
            "custom_id": f"req-{i}",
            "method": "POST",
            "url": "/v1/chat/completions",
            "body": {
                "model": "gpt-4o-mini",
                "messages": [{"role": "user", "content": f"{SCHEMA_TASK} ({i})"}],
            },
        }
        for i in range(n)
    ]
    return "\n".join(json.dumps(line) for line in lines).encode()


def test_openai_sdk_runs_a_batch_through_files_and_batches(sim: str) -> None:
    client = openai.OpenAI(base_url=f"{sim}/v1", api_key="sk-test")
    uploaded = client.files.create(file=("in.jsonl", _openai_lines(5)), purpose="batch")
    assert uploaded.purpose == "batch"
    assert uploaded.bytes > 0
    created = client.batches.create(
        input_file_id=uploaded.id,
        endpoint="/v1/chat/completions",
        completion_window="24h",
        metadata={"k": "v"},
    )
    assert created.object == "batch"
    assert created.metadata == {"k": "v"}

    def done() -> openai.types.Batch | None:
        batch = client.batches.retrieve(created.id)
        return batch if batch.status == "completed" else None

    batch = sync_until(done, what="the batch to complete")
    assert batch.request_counts is not None
    assert batch.request_counts.total == 5
    assert batch.request_counts.completed == 5
    assert batch.output_file_id is not None
    output = client.files.content(batch.output_file_id).text
    lines = [json.loads(line) for line in output.splitlines()]
    assert sorted(line["custom_id"] for line in lines) == [f"req-{i}" for i in range(5)]
    for line in lines:
        assert line["response"]["status_code"] == 200
        completion = openai.types.chat.ChatCompletion.model_validate(line["response"]["body"])
        assert completion.choices[0].message.content
    assert created.id in [b.id for b in client.batches.list(limit=10)]


def test_openai_sdk_cancels_a_batch(slow_sim: str) -> None:
    client = openai.OpenAI(base_url=f"{slow_sim}/v1", api_key="sk-test")
    uploaded = client.files.create(file=("in.jsonl", _openai_lines(3)), purpose="batch")
    created = client.batches.create(
        input_file_id=uploaded.id, endpoint="/v1/chat/completions", completion_window="24h"
    )
    assert client.batches.cancel(created.id).status in ("cancelling", "cancelled")
    batch = sync_until(
        lambda: ((b := client.batches.retrieve(created.id)).status == "cancelled" and b) or None,
        what="the batch to be cancelled",
    )
    assert batch.error_file_id is not None
    errors = client.files.content(batch.error_file_id).text.splitlines()
    assert {json.loads(e)["error"]["code"] for e in errors} == {"batch_cancelled"}


def _anthropic_requests(n: int) -> list[anthropic.types.messages.batch_create_params.Request]:
    return [
        {
            "custom_id": f"req-{i}",
            "params": {
                "model": "claude-haiku-4-5",
                "max_tokens": 256,
                "messages": [{"role": "user", "content": f"{SCHEMA_TASK} ({i})"}],
            },
        }
        for i in range(n)
    ]


def test_anthropic_sdk_runs_a_message_batch(sim: str) -> None:
    client = anthropic.Anthropic(base_url=sim, api_key="sk-ant-test")
    created = client.messages.batches.create(requests=_anthropic_requests(4))
    assert created.type == "message_batch"

    def done() -> anthropic.types.messages.MessageBatch | None:
        batch = client.messages.batches.retrieve(created.id)
        return batch if batch.processing_status == "ended" else None

    batch = sync_until(done, what="the message batch to end")
    assert batch.request_counts.succeeded == 4
    results = list(client.messages.batches.results(created.id))
    assert sorted(r.custom_id for r in results) == [f"req-{i}" for i in range(4)]
    for entry in results:
        assert entry.result.type == "succeeded"
        text = entry.result.message.content[0]
        assert text.type == "text"
        assert text.text
    assert created.id in [b.id for b in client.messages.batches.list(limit=10)]


def test_anthropic_sdk_cancels_a_message_batch(slow_sim: str) -> None:
    client = anthropic.Anthropic(base_url=slow_sim, api_key="sk-ant-test")
    created = client.messages.batches.create(requests=_anthropic_requests(2))
    assert client.messages.batches.cancel(created.id).processing_status in ("canceling", "ended")
    sync_until(
        lambda: client.messages.batches.retrieve(created.id).processing_status == "ended" or None,
        what="the message batch to end",
    )
    results = list(client.messages.batches.results(created.id))
    assert {r.result.type for r in results} == {"canceled"}
