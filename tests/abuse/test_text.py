"""Unpaired UTF-16 surrogates and invalid UTF-8: a 422 naming the field in a request, a
rejected answer (``llm-invalid-output``) with a diagnosis in a model's answer.

Before: ``"\\ud800"`` anywhere in a job was an HTTP 500, and in an answer it made the
worker's commit fail with UnicodeEncodeError.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from redis.asyncio import Redis

from app.core.turn.loop import Runtime, run_job
from app.core.wire import codes
from app.core.wire.spec import JobSpec
from app.providers.embedded import open_router
from app.providers.http import make_client
from app.redis_server import EmbeddedRedis
from app.worker import Worker
from tests.abuse.service import api, problem_field
from tests.both import Store
from tests.core.fakes import ScriptedClient, reply
from tests.providers.upstream import Reply, Upstream, one_model, recorded
from tests.worker.harness import finished, running, submit, worker_settings

SURROGATE = "\\ud800"  # as JSON text: decodes to a lone surrogate


@pytest.fixture(scope="module")
def http(tmp_path_factory: pytest.TempPathFactory) -> Iterator[httpx.Client]:
    with (
        api(tmp_path_factory.mktemp("text")) as url,
        httpx.Client(base_url=url, timeout=30) as client,
    ):
        yield client


def post_raw(http: httpx.Client, body: str | bytes) -> httpx.Response:
    content = body.encode() if isinstance(body, str) else body
    return http.post("/v1/jobs", content=content, headers={"content-type": "application/json"})


@pytest.mark.parametrize(
    ("body", "field", "where"),
    [
        (f'{{"task": "hi {SURROGATE}", "signature": "{{a :int}}"}}', "task", ""),
        (
            f'{{"task": "t", "input": {{"a": ["ok", "{SURROGATE}"]}}, "signature": "{{a :int}}"}}',
            "input",
            "$.a[1]",
        ),
        (
            f'{{"task": "t", "input": {{"{SURROGATE}": 1}}, "signature": "{{a :int}}"}}',
            "input",
            "$",
        ),
        (
            f'{{"task": "t", "schema": {{"type": "string", "pattern": "{SURROGATE}"}}}}',
            "schema",
            "$.pattern",
        ),
        (
            f'{{"task": "t", "signature": "{{a :int}}", "metadata": {{"k": "{SURROGATE}"}}}}',
            "metadata",
            "$.k",
        ),
        (
            f'{{"task": "t", "signature": "{{a :int}}", "retryPrompt": "{SURROGATE}"}}',
            "retryPrompt",
            "",
        ),
        (
            f'{{"task": "t", "signature": "{{a :string}}", "validators": [{{"kind": "regex", '
            f'"path": "$.a", "pattern": "{SURROGATE}"}}]}}',
            "validators",
            "$[0].pattern",
        ),
    ],
    ids=["task", "input", "input-key", "schema", "metadata", "retryPrompt", "validator"],
)
def test_a_lone_surrogate_in_a_request_is_a_422_naming_the_field(
    http: httpx.Client, body: str, field: str, where: str
) -> None:
    response = post_raw(http, body)
    assert problem_field(response) == field
    detail = response.json()["detail"]
    assert "unpaired UTF-16 surrogate" in detail
    assert where in detail


@pytest.mark.parametrize(
    "raw",
    [
        b'{"task": "caf\xe9", "signature": "{a :int}"}',  # Latin-1, not UTF-8
        b'{"task": "\xed\xa0\x80", "signature": "{a :int}"}',  # an encoded surrogate
        b'{"task": "x", "signature": "{a :int}"}\xff',
    ],
    ids=["latin-1", "encoded-surrogate", "stray-byte"],
)
def test_a_body_that_is_not_utf8_is_a_422_naming_the_body(http: httpx.Client, raw: bytes) -> None:
    response = post_raw(http, raw)
    assert problem_field(response) == "body"
    assert "UTF-8" in response.json()["detail"]


def test_a_valid_pair_is_fine(http: httpx.Client) -> None:
    response = post_raw(http, '{"task": "smile \\ud83d\\ude00", "signature": "{a :int}"}')
    assert response.status_code == 202, response.text


# -- in a model's answer ------------------------------------------------------------------------


def spec() -> JobSpec:
    return JobSpec.model_validate(
        {"task": "x", "signature": "{city :string}", "budget": {"maxTurns": 1, "returnRetries": 1}}
    )


async def test_a_raw_surrogate_in_an_answer_is_rejected_with_a_diagnosis() -> None:
    client = ScriptedClient([reply('{"city": "Par\ud800is"}'), reply('{"city": "Paris"}')])
    result = await run_job(spec(), Runtime(client=client))
    first, _ = result.turns
    assert first.outcome == "invalid"
    assert first.error_code == codes.LLM_INVALID_OUTPUT
    assert first.diagnosis is not None
    assert "unpaired UTF-16 surrogate (\\ud800 at character 13)" in first.diagnosis
    assert result.envelope.status == "success"
    # Everything recorded can be encoded: the answer is kept with U+FFFD in its place.
    assert first.answer == '{"city": "Par\ufffdis"}'
    for message in result.transcript:
        message.content.encode("utf-8")
    # The correction the model got names the problem.
    assert "unpaired UTF-16 surrogate" in client.requests[1].messages[-1].content


async def test_an_escaped_surrogate_in_an_answer_is_rejected_as_invalid_json() -> None:
    client = ScriptedClient([reply('{"city": "\\udc00"}'), reply('{"city": "Paris"}')])
    result = await run_job(spec(), Runtime(client=client))
    assert result.turns[0].error_code == codes.LLM_INVALID_OUTPUT
    assert result.turns[0].diagnosis is not None
    assert "unpaired UTF-16 surrogate" in result.turns[0].diagnosis
    assert result.envelope.status == "success"


async def test_surrogates_in_a_refusal_or_an_explicit_fail_are_scrubbed() -> None:
    refused = await run_job(
        spec(), Runtime(client=ScriptedClient([reply(None, finish="refusal", refusal="no\ud800")]))
    )
    assert refused.envelope.detail == "no\ufffd"
    gave_up = await run_job(
        spec(), Runtime(client=ScriptedClient([reply('{"$fail": "cannot \\ud800"}')]))
    )
    assert gave_up.envelope.detail == "cannot \ufffd"


# -- through a real worker, Redis and a provider on loopback ----------------------------------


@pytest.fixture
async def store(tmp_path: Path) -> AsyncIterator[Store]:
    with EmbeddedRedis(tmp_path / "redis") as server:
        redis = Redis.from_url(server.url)
        try:
            yield Store(redis, prefix="text", lease_ms=5000, max_attempts=3)
        finally:
            await redis.aclose()


@pytest.fixture
def upstream() -> Iterator[Upstream]:
    server = Upstream()
    server.start()
    try:
        yield server
    finally:
        server.stop()


def completion(content: str) -> Reply:
    # json.dumps escapes the surrogate as \ud800, as a provider's JSON would carry it.
    body = recorded("openai_success").body
    body["choices"][0]["message"]["content"] = content
    return Reply(200, body)


async def test_a_worker_commits_a_job_whose_answer_held_a_surrogate(
    store: Store, upstream: Upstream, tmp_path: Path
) -> None:
    upstream.script(completion('{"city": "Par\ud800is"}'), completion('{"city": "Paris"}'))
    job: dict[str, Any] = {
        "task": "Name a city",
        "signature": "{city :string}",
        "budget": {"maxTurns": 1, "returnRetries": 1},
    }
    async with (
        make_client() as http,
        open_router(
            http, data_dir=tmp_path, config=one_model(upstream.url, structured="prompt")
        ) as router,
    ):
        job_id = await submit(store, job)
        async with running(Worker(store, router, worker_settings())):
            view = await asyncio.wait_for(finished(store, job_id), 60)
    assert view.status == "succeeded"
    assert view.result.data == {"city": "Paris"}
    first = view.turns[0]
    assert first.error_code == codes.LLM_INVALID_OUTPUT
    assert first.diagnosis is not None
    assert "unpaired UTF-16 surrogate" in first.diagnosis
    assert first.answer == '{"city": "Par\ufffdis"}'
