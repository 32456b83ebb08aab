"""The hot endpoints read a plain, valid request themselves (app.api.lean) and answer it as
FastAPI's general handling does: the same requests, sent to an API that reads them lean
and to one that solves every request generically (any dependency override sends each
request down FastAPI's general path), get the same answers, valid or not."""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from fastapi import FastAPI

from app.api.lean import LeanRoute
from app.assembly import api_app as create_app
from app.providers.config import ProvidersConfig
from tests.service import KEYS, api_keys, serve, settings_for

HOT = {("POST", "/v1/jobs"), ("GET", "/v1/jobs/{job_id}"), ("POST", "/v1/generate")}
VALID = {"task": "Name a city.", "signature": "{city :string}", "budget": {"maxTurns": 1}}
# What differs between two runs of one request: the job's id and its moments.
VARYING = ("id", "createdAt", "startedAt", "finishedAt")


def _general_path() -> None:
    """Overridden by nothing that is used: its presence sends requests down FastAPI's
    general path."""


def _app(redis_url: str, data_dir: Path, providers: ProvidersConfig, *, lean: bool) -> FastAPI:
    settings = settings_for(
        redis_url, data_dir, api_keys=api_keys(), key_prefix=f"lean{uuid.uuid4().hex[:8]}"
    )
    app = create_app(settings, providers=providers)
    if not lean:
        app.dependency_overrides[_general_path] = _general_path
    return app


@pytest.fixture
def both(redis_url: str, data_dir: Path, providers: ProvidersConfig) -> Iterator[tuple[str, str]]:
    with (
        serve(_app(redis_url, data_dir, providers, lean=True)) as lean,
        serve(_app(redis_url, data_dir, providers, lean=False)) as general,
    ):
        yield lean, general


def answer(response: httpx.Response, job_id: str) -> tuple[int, str, dict[str, str], Any]:
    """What a client sees, without what differs between two runs (``job_id``: the job
    the requests name, different in each)."""
    headers = {
        name: response.headers[name]
        for name in (
            "content-type",
            "retry-after",
            "idempotent-replayed",
            "www-authenticate",
            "allow",
        )
        if name in response.headers
    }
    if "location" in response.headers:
        headers["location"] = response.headers["location"].rsplit("/", 1)[0] + "/…"
    text = response.text.replace(job_id, "{job_id}")
    try:
        body = json.loads(text)
    except json.JSONDecodeError:
        body = text
    if isinstance(body, dict):
        body = {k: v for k, v in body.items() if k not in VARYING}
    return response.status_code, response.request.method, headers, body


def exchange(http: httpx.Client, job_id: str) -> list[tuple[int, str, dict[str, str], Any]]:
    """A run of requests, valid and not, against one API; ``job_id``: one of its jobs."""
    answers = []
    bodies: list[tuple[dict[str, str], bytes]] = [
        ({}, json.dumps(VALID).encode()),
        ({"content-type": "application/json; charset=utf-8"}, json.dumps(VALID).encode()),
        ({"content-type": "application/problem+json"}, json.dumps(VALID).encode()),
        ({}, json.dumps({**VALID, "budget": {"maxTurns": 0}}).encode()),
        ({}, json.dumps({**VALID, "budget": {"maxTurns": "1"}, "extra": 1}).encode()),
        ({}, json.dumps({**VALID, "signature": "{city :nope}"}).encode()),
        ({}, json.dumps({**VALID, "model": "no-such-model"}).encode()),
        ({}, b'{"task": "x", '),
        ({}, b'{"task": "\\ud800", "signature": "{a :string}"}'),
        ({}, b""),
        ({}, b"[]"),
        ({"content-type": "text/plain"}, json.dumps(VALID).encode()),
        ({"authorization": ""}, json.dumps(VALID).encode()),
        ({"authorization": "Bearer nope"}, json.dumps(VALID).encode()),
        ({"authorization": "Bearer nope"}, b"{"),
        ({"idempotency-key": "first-key"}, json.dumps(VALID).encode()),
        ({"idempotency-key": ""}, json.dumps(VALID).encode()),
        ({"idempotency-key": "k" * 256}, json.dumps(VALID).encode()),
    ]
    for path in ("/v1/jobs", "/v1/generate?waitMs=0", "/v1/generate?waitMs=x"):
        for headers, body in bodies:
            sent = {"content-type": "application/json", **headers}
            answers.append(answer(http.post(path, content=body, headers=sent), job_id))
    replayed = {"idempotency-key": "replayed-key"}
    for _ in range(2):
        answers.append(answer(http.post("/v1/jobs", json=VALID, headers=replayed), job_id))
    queries = ("", "?waitMs=0", "?waitMs=20", "?waitMs=00", "?waitMs=-1", "?waitMs=1.5")
    odd = ("?waitMs", "?waitMs=%32", "?waitMs=+2", "?waitMs=1&waitMs=x", "?x=1&waitMs=2&")
    for query in queries + odd:
        answers.append(answer(http.get(f"/v1/jobs/{job_id}{query}"), job_id))
        again = f"{query}&waitMs=abc" if query else "?waitMs=abc"
        answers.append(answer(http.get(f"/v1/jobs/{job_id}{again}"), job_id))
    answers.append(answer(http.get("/v1/jobs/job_nope"), job_id))
    two_keys = [("authorization", f"Bearer {KEYS['bob']}"), ("authorization", "Bearer x")]
    answers.append(answer(http.get(f"/v1/jobs/{job_id}", headers=two_keys), job_id))
    answers.append(answer(http.get(f"/v1/jobs/{job_id}", headers={"authorization": "x"}), job_id))
    answers.append(answer(http.delete(f"/v1/jobs/{job_id}"), job_id))
    return answers


def test_the_hot_endpoints_answer_as_fastapi_does(both: tuple[str, str]) -> None:
    runs = []
    for url in both:
        with httpx.Client(
            base_url=url, headers={"authorization": f"Bearer {KEYS['alice']}"}, timeout=30
        ) as http:
            created = http.post("/v1/jobs", json=VALID)
            assert created.status_code == 202
            runs.append(exchange(http, created.json()["id"]))
    lean, general = runs
    assert len(lean) == len(general)
    for mine, theirs in zip(lean, general, strict=True):
        assert mine == theirs
    statuses = {status for status, *_ in lean}
    assert {200, 202, 401, 404, 405, 415, 422} <= statuses  # valid and invalid, both ways


def test_the_hot_routes_have_lean_readers(
    redis_url: str, data_dir: Path, providers: ProvidersConfig
) -> None:
    app = _app(redis_url, data_dir, providers, lean=True)
    found = {
        (method, route.path)
        for route in app.routes
        if isinstance(route, LeanRoute) and hasattr(route.endpoint, "__lean_reader__")
        for method in route.methods or ()
    }
    assert found == HOT
