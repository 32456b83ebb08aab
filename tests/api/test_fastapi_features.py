"""The job routes are served by FastAPI's own routing and middleware, like every other
route: what an embedding app sets on the app (dependency overrides, middleware, a root
path) reaches them, errors raised in them come out through the app's exception handlers
as problem+json, and uvicorn's stock HTTP protocol serves them (pipelined requests, HEAD,
``Expect: 100-continue``, chunked bodies over the cap)."""

from __future__ import annotations

import json
import socket
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from fastapi import FastAPI, Request
from starlette.exceptions import HTTPException

from app.api.resources import BEARER, BEARER_JSON, Caller, resources_of
from app.assembly import api_app as create_app
from app.core.admission.admit import admit
from app.core.answer.contract import Contract
from app.core.wire.spec import JobSpec
from app.providers.config import ProvidersConfig
from app.store.errors import QueueFull
from tests.service import KEYS, api_keys, assert_problem, serve, settings_for

VALID = {"task": "Name a city.", "signature": "{city :string}", "budget": {"maxTurns": 1}}
TENANT = "carol"


def _app(redis_url: str, data_dir: Path, providers: ProvidersConfig) -> FastAPI:
    """An API with keys on, without a worker: its jobs stay queued."""
    settings = settings_for(
        redis_url, data_dir, api_keys=api_keys(), key_prefix=f"fa{uuid.uuid4().hex[:8]}"
    )
    return create_app(settings, providers=providers)


def _client(url: str, key: str | None = KEYS["alice"]) -> httpx.Client:
    headers = {"authorization": f"Bearer {key}"} if key else {}
    return httpx.Client(base_url=url, headers=headers, timeout=30)


def test_a_dependency_override_of_the_caller_reaches_the_job_routes(
    redis_url: str, data_dir: Path, providers: ProvidersConfig
) -> None:
    """An embedding app overrides who is calling (its own auth): submit, generate and read
    take the override's tenant, without an API key."""
    app = _app(redis_url, data_dir, providers)
    seen: list[str] = []

    async def own_auth(request: Request) -> Caller:
        seen.append(f"{request.method} {request.url.path}")
        return Caller(resources_of(request), TENANT)

    app.dependency_overrides[BEARER_JSON] = own_auth
    app.dependency_overrides[BEARER] = own_auth
    with serve(app) as url, _client(url, key=None) as anonymous, _client(url) as alice:
        created = anonymous.post("/v1/jobs", json=VALID)
        assert created.status_code == 202, created.text
        job_id = created.json()["id"]
        got = anonymous.get(f"/v1/jobs/{job_id}")
        assert got.status_code == 200, got.text
        generated = anonymous.post("/v1/generate?waitMs=0", json=VALID)
        assert generated.status_code == 202, generated.text
        # alice's key is not looked at either: the override says carol, whose job it is
        assert alice.get(f"/v1/jobs/{job_id}").status_code == 200
        assert seen == [
            "POST /v1/jobs",
            f"GET /v1/jobs/{job_id}",
            "POST /v1/generate",
            f"GET /v1/jobs/{job_id}",
        ]
        # without the override, the key decides again: carol's job is not alice's
        app.dependency_overrides.clear()
        assert_problem(alice.get(f"/v1/jobs/{job_id}"), 404, "not-found")
        assert_problem(anonymous.post("/v1/jobs", json=VALID), 401, "unauthorized")


class _Stamp:
    """A middleware an embedding app might add: it marks every response it sees."""

    def __init__(self, app: Any) -> None:
        self.app = app

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        async def stamped(message: Any) -> None:
            if message["type"] == "http.response.start":
                message["headers"] = [*message["headers"], (b"x-stamp", b"1")]
            await send(message)

        await self.app(scope, receive, stamped)


def test_a_middleware_added_to_the_app_sees_the_job_routes(
    redis_url: str, data_dir: Path, providers: ProvidersConfig
) -> None:
    app = _app(redis_url, data_dir, providers)
    app.add_middleware(_Stamp)
    with serve(app) as url, _client(url) as http:
        answers = [
            created := http.post("/v1/jobs", json=VALID),
            http.get(f"/v1/jobs/{created.json()['id']}?waitMs=20"),
            http.post("/v1/generate?waitMs=0", json=VALID),
            http.post("/v1/jobs", content=b"{", headers={"content-type": "application/json"}),
            http.post("/v1/jobs", json={**VALID, "input": "x" * 40_000}),  # the body limit's
            http.get("/v1/nothing-here"),
        ]
    assert [a.status_code for a in answers] == [202, 200, 202, 422, 413, 404]
    assert [a.headers.get("x-stamp") for a in answers] == ["1"] * len(answers)


def test_under_a_root_path_the_job_routes_answer(
    redis_url: str, data_dir: Path, providers: ProvidersConfig
) -> None:
    app = _app(redis_url, data_dir, providers)
    app.root_path = "/base"
    with serve(app) as url, _client(url) as http:
        created = http.post("/base/v1/jobs", json=VALID)
        assert created.status_code == 202, created.text
        got = http.get(f"/base/v1/jobs/{created.json()['id']}")
        assert got.status_code == 200, got.text
        bad = http.post("/base/v1/jobs", content=b"{", headers={"content-type": "application/json"})
        assert bad.status_code == 422
        assert bad.json()["errors"][0]["field"] == "body"


@pytest.fixture
def raising(monkeypatch: pytest.MonkeyPatch) -> None:
    """A job whose task names an exception has the submit endpoints raise it."""

    def check(spec: JobSpec, **outside: Any) -> Contract:
        if spec.task == "raise RuntimeError":
            raise RuntimeError("an unexpected failure")
        if spec.task == "raise HTTPException":
            raise HTTPException(418, "short and stout", headers={"X-Teapot": "yes"})
        if spec.task == "raise QueueFull":
            raise QueueFull(7, retry_after_s=2.5)
        return admit(spec, **outside)

    monkeypatch.setattr("app.api.resources.admit", check)


@pytest.mark.usefixtures("raising")
@pytest.mark.parametrize("path", ["/v1/jobs", "/v1/generate?waitMs=0"])
def test_errors_raised_in_a_job_route_are_problems(
    redis_url: str, data_dir: Path, providers: ProvidersConfig, path: str
) -> None:
    with serve(_app(redis_url, data_dir, providers)) as url, _client(url) as http:
        # (the server closes the connection after a 500: a client that knows)
        closing = {"connection": "close"}
        failed = http.post(path, json={**VALID, "task": "raise RuntimeError"}, headers=closing)
        teapot = http.post(path, json={**VALID, "task": "raise HTTPException"})
        full = http.post(path, json={**VALID, "task": "raise QueueFull"})
    body = assert_problem(failed, 500, "internal-error")
    assert "unexpected failure" not in failed.text
    assert body["detail"] == "the service failed to handle the request; it has been logged"
    assert_problem(teapot, 418, "i'm-a-teapot")  # the status phrase as a slug
    assert teapot.headers["x-teapot"] == "yes"
    assert teapot.json()["detail"] == "short and stout"
    assert_problem(full, 429, "queue-full")
    assert full.headers["retry-after"] == "3"  # whole seconds, up


# -- over a raw socket: uvicorn's own protocol ---------------------------------------------


def _request(
    method: str, path: str, body: bytes = b"", *, chunked: bool = False, **headers: str
) -> bytes:
    """A request's bytes; ``headers`` by name with ``_`` for ``-``."""
    lines = [f"{method} {path} HTTP/1.1", "Host: x", f"Authorization: Bearer {KEYS['alice']}"]
    lines += [f"{name.replace('_', '-')}: {value}" for name, value in headers.items()]
    if chunked:
        lines.append("Transfer-Encoding: chunked")
        body = f"{len(body):x}\r\n".encode() + body + b"\r\n0\r\n\r\n"
    elif body:
        lines.append(f"Content-Length: {len(body)}")
    return ("\r\n".join(lines) + "\r\n\r\n").encode() + body


def _exchange(url: str, sent: bytes, heads: tuple[int, ...] = ()) -> list[tuple[str, bytes]]:
    """``sent`` in one write; each answer until the server closes the connection: its
    status and its head (``heads``: the numbers of the answers to HEAD, without a body)."""
    port = int(url.rsplit(":", 1)[1])
    with socket.create_connection(("127.0.0.1", port), timeout=10) as sock:
        sock.sendall(sent)
        received = b""
        while data := sock.recv(65536):
            received += data
    answers: list[tuple[str, bytes]] = []
    rest = received
    while rest:
        head, _, rest = rest.partition(b"\r\n\r\n")
        length = 0
        for line in head.split(b"\r\n")[1:]:
            if len(answers) not in heads and line.lower().startswith(b"content-length:"):
                length = int(line.split(b":", 1)[1])
        rest = rest[length:]
        answers.append((head.split(b" ", 2)[1].decode(), head.lower()))
    return answers


@pytest.fixture
def queued_api(
    redis_url: str, data_dir: Path, providers: ProvidersConfig
) -> Iterator[tuple[str, str]]:
    """An API and one of its jobs, queued."""
    with serve(_app(redis_url, data_dir, providers)) as url, _client(url) as http:
        created = http.post("/v1/jobs", json=VALID)
        assert created.status_code == 202
        yield url, created.json()["id"]


def test_pipelined_requests_and_odd_framing_get_their_answers(
    queued_api: tuple[str, str],
) -> None:
    url, job_id = queued_api
    valid = json.dumps(VALID).encode()
    json_type = "application/json"
    kept = b"".join(
        [
            _request("POST", "/v1/jobs", valid, Content_Type=json_type),
            _request("POST", "/v1/generate?waitMs=0", valid, Content_Type=json_type),
            _request("POST", "/v1/jobs", b'{"task": "caf\xe9"}', Content_Type=json_type),
            _request("POST", "/v1/jobs", b"{", Content_Type=json_type),
            _request("POST", "/v1/jobs", valid, Content_Type="text/plain"),
            _request("POST", "/v1/jobs", valid, Idempotency_Key="raw", Content_Type=json_type),
            _request("POST", "/v1/jobs", valid, Idempotency_Key="raw", Content_Type=json_type),
            _request("GET", f"/v1/jobs/{job_id}?waitMs=20"),
            _request("HEAD", f"/v1/jobs/{job_id}"),
            _request("GET", f"/v1/jobs/{job_id}", Connection="close"),
        ]
    )
    answers = _exchange(url, kept, heads=(8,))
    closed = _request("POST", "/v1/jobs", valid, Connection="close", Content_Type=json_type)
    answers += _exchange(url, closed)
    # over the cap (32 KiB) in chunks, all sent: counted as read
    big = _request("POST", "/v1/jobs", b"x" * 40_000, chunked=True, Content_Type=json_type)
    answers += _exchange(url, big)
    expecting = _request(
        "POST", "/v1/jobs", valid, Expect="100-continue", Connection="close", Content_Type=json_type
    )
    answers += _exchange(url, expecting)
    statuses = [status for status, _ in answers]
    assert statuses == [
        "202", "202", "422", "422", "415", "202", "200", "200", "405", "200",
        "202", "413", "100", "202",
    ]  # fmt: skip
    problems = [head for status, head in answers if status[0] == "4"]
    assert all(b"content-type: application/problem+json" in head for head in problems)
    assert b"idempotent-replayed: true" in answers[6][1]
    assert b"connection: close" in answers[9][1]
    assert b"connection: close" in answers[10][1]
