"""The hot endpoints read a plain, valid request themselves (app.api.lean), served by the
app's front (app.api.front) without FastAPI's layers, and answer it as FastAPI's general
handling does: the same requests, sent to an API that serves them through its front, to
one whose front is off (the lean routes behind FastAPI's full stack) and to one that
solves every request generically (any dependency override sends each request down
FastAPI's general path), get the same answers, valid or not: the body limit's 413 and
422, exceptions raised in an endpoint (handled ones and the 500), odd queries and
headers."""

from __future__ import annotations

import json
import re
import socket
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from fastapi import FastAPI
from starlette.exceptions import HTTPException
from starlette.responses import Response

from app.api.front import FrontedFastAPI
from app.api.lean import LeanRoute
from app.api.limits import check_job
from app.assembly import api_app as create_app
from app.core.spec import JobSpec
from app.providers.config import ProvidersConfig
from app.settings import Settings
from app.store.errors import QueueFull
from tests.service import KEYS, api_keys, serve, settings_for

HOT = {("POST", "/v1/jobs"), ("GET", "/v1/jobs/{job_id}"), ("POST", "/v1/generate")}
VALID = {"task": "Name a city.", "signature": "{city :string}", "budget": {"maxTurns": 1}}
# What differs between two runs of one request: the job's id and its moments.
VARYING = ("id", "createdAt", "startedAt", "finishedAt")
TRACEPARENT = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"


def _general_path() -> None:
    """Overridden by nothing that is used: its presence sends requests down FastAPI's
    general path."""


def _app(
    redis_url: str,
    data_dir: Path,
    providers: ProvidersConfig,
    *,
    lean: bool,
    front: bool = True,
    root_path: str = "",
) -> FastAPI:
    settings = settings_for(
        redis_url, data_dir, api_keys=api_keys(), key_prefix=f"lean{uuid.uuid4().hex[:8]}"
    )
    app = create_app(settings, providers=providers)
    assert isinstance(app, FrontedFastAPI)
    app.front = front
    app.root_path = root_path
    if not lean:
        app.dependency_overrides[_general_path] = _general_path
    return app


@pytest.fixture
def served(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The paths of the requests the front served itself (without FastAPI's stack)."""
    paths: list[str] = []
    serve_lean = FrontedFastAPI._serve

    async def counted(self: FrontedFastAPI, *args: Any) -> None:
        paths.append(args[3]["path"])  # (front, route, params, scope, receive, send)
        await serve_lean(self, *args)

    monkeypatch.setattr(FrontedFastAPI, "_serve", counted)
    return paths


@pytest.fixture
def raising(monkeypatch: pytest.MonkeyPatch) -> None:
    """A job whose task names an exception has the submit endpoint raise it."""

    def check(spec: JobSpec, settings: Settings) -> None:
        if spec.task == "raise RuntimeError":
            raise RuntimeError("an unexpected failure")
        if spec.task == "raise HTTPException":
            raise HTTPException(418, "short and stout", headers={"X-Teapot": "yes"})
        if spec.task == "raise QueueFull":
            raise QueueFull(7)
        check_job(spec, settings)

    monkeypatch.setattr("app.api.jobs.check_job", check)


@pytest.fixture
def three(
    redis_url: str, data_dir: Path, providers: ProvidersConfig
) -> Iterator[tuple[str, str, str]]:
    with (
        serve(_app(redis_url, data_dir, providers, lean=True)) as front,
        serve(_app(redis_url, data_dir, providers, lean=True, front=False)) as lean,
        serve(_app(redis_url, data_dir, providers, lean=False)) as general,
    ):
        yield front, lean, general


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
            "connection",
            "x-teapot",
        )
        if name in response.headers
    }
    if "location" in response.headers:
        origin = f"{response.request.url.scheme}://{response.request.url.netloc.decode()}"
        location = response.headers["location"].removeprefix(origin)  # a redirect's has it
        headers["location"] = location.rsplit("/", 1)[0] + "/…"
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
        # Valid text that is not ASCII: escaped, and as UTF-8 (the full validation's way).
        ({}, b'{"task": "caf\\u00e9", "signature": "{a :string}"}'),
        ({}, '{"task": "café", "signature": "{a :string}"}'.encode()),
        ({}, b""),
        ({}, b"[]"),
        ({"content-type": "text/plain"}, json.dumps(VALID).encode()),
        ({"authorization": ""}, json.dumps(VALID).encode()),
        ({"authorization": "Bearer nope"}, json.dumps(VALID).encode()),
        ({"authorization": "Bearer nope"}, b"{"),
        ({"idempotency-key": "first-key"}, json.dumps(VALID).encode()),
        ({"idempotency-key": ""}, json.dumps(VALID).encode()),
        ({"idempotency-key": "k" * 256}, json.dumps(VALID).encode()),
        # The body limit: not UTF-8 (JSON or not); too large: ``refused``.
        ({}, b'{"task": "caf\xe9", "signature": "{a :string}"}'),
        ({"content-type": "text/plain"}, b"\xff\xfe"),
        # Exceptions raised in the endpoint (the ``raising`` fixture).
        # (the server closes the connection after a 500: a client that knows)
        ({"connection": "close"}, json.dumps({**VALID, "task": "raise RuntimeError"}).encode()),
        ({}, json.dumps({**VALID, "task": "raise HTTPException"}).encode()),
        ({}, json.dumps({**VALID, "task": "raise QueueFull"}).encode()),
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
    answers.append(answer(http.head(f"/v1/jobs/{job_id}"), job_id))
    answers.append(answer(http.options("/v1/jobs"), job_id))
    answers.append(answer(http.get(f"/v1/jobs/{job_id}/"), job_id))
    answers.append(answer(http.post("/v1/jobs/", json=VALID), job_id))
    return answers


def refused(url: str) -> list[tuple[int, str, dict[str, str], Any]]:
    """Bodies over the cap (32 KiB), over a socket of their own: one declared too large
    (refused before a byte is read) and one sent in chunks, counted as it comes (refused
    once past the cap; nothing more is sent, so the server leaves nothing unread)."""
    port = int(url.rsplit(":", 1)[1])
    auth = f"Authorization: Bearer {KEYS['alice']}"
    head = f"POST /v1/jobs HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n{auth}\r\n"
    chunk = b"x" * 40_000
    sent = [
        (head + "Content-Length: 99999\r\n\r\n").encode(),
        (head + "Transfer-Encoding: chunked\r\n\r\n").encode()
        + f"{len(chunk):x}\r\n".encode()
        + chunk
        + b"\r\n",
    ]
    answers = []
    for request in sent:
        with socket.create_connection(("127.0.0.1", port), timeout=10) as sock:
            sock.sendall(request)
            received = b""
            while data := sock.recv(65536):
                received += data
        head_part, _, body = received.partition(b"\r\n\r\n")
        status_line, *lines = head_part.decode("latin-1").split("\r\n")
        headers = dict(line.lower().split(": ", 1) for line in lines)
        headers.pop("date", None)
        answers.append((int(status_line.split()[1]), "POST", headers, json.loads(body)))
    return answers


@pytest.mark.usefixtures("raising")
def test_the_hot_endpoints_answer_as_fastapi_does(
    three: tuple[str, str, str], served: list[str]
) -> None:
    runs = []
    for url in three:
        with httpx.Client(
            base_url=url, headers={"authorization": f"Bearer {KEYS['alice']}"}, timeout=30
        ) as http:
            created = http.post("/v1/jobs", json=VALID)
            assert created.status_code == 202
            runs.append(exchange(http, created.json()["id"]))
        runs[-1].extend(refused(url))
        if url == three[0]:
            assert len(served) > 50  # the front served most of them itself
            count = len(served)
    assert len(served) == count  # and nothing when it is off, or with an override
    front, lean, general = runs
    assert len(front) == len(lean) == len(general)
    for mine, behind, theirs in zip(front, lean, general, strict=True):
        assert mine == behind == theirs
    statuses = {answer[0] for answer in front}
    # valid and invalid, both ways; the body limit; raised in the endpoint
    assert {200, 202, 401, 404, 405, 413, 415, 418, 422, 429, 500} <= statuses
    problems = [answer[-1] for answer in front if isinstance(answer[-1], dict)]
    assert {"internal-error", "queue-full", "content-too-large"} <= {
        p.get("code") for p in problems
    }


def test_under_a_root_path_fastapi_serves_every_request(
    redis_url: str, data_dir: Path, providers: ProvidersConfig, served: list[str]
) -> None:
    runs = []
    for front in (True, False):
        app = _app(redis_url, data_dir, providers, lean=True, front=front, root_path="/base")
        with (
            serve(app) as url,
            httpx.Client(
                base_url=url, headers={"authorization": f"Bearer {KEYS['alice']}"}, timeout=30
            ) as http,
        ):
            created = http.post("/base/v1/jobs", json=VALID)
            assert created.status_code == 202, created.text
            job_id = created.json()["id"]
            got = http.get(f"/base/v1/jobs/{job_id}?waitMs=5000")
            assert got.status_code == 200
            runs.append([answer(created, job_id), answer(got, job_id)])
            runs[-1].append(answer(http.post("/base/v1/jobs", content=b"{"), job_id))
    assert runs[0] == runs[1]
    assert served == []


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


class _Stamp:
    """A middleware an embedding process might add: it marks every response."""

    def __init__(self, app: Any) -> None:
        self.app = app

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        async def stamped(message: Any) -> None:
            if message["type"] == "http.response.start":
                message["headers"] = [*message["headers"], (b"x-stamp", b"1")]
            await send(message)

        await self.app(scope, receive, stamped)


def test_a_middleware_added_to_the_app_sees_every_request(
    redis_url: str, data_dir: Path, providers: ProvidersConfig, served: list[str]
) -> None:
    app = _app(redis_url, data_dir, providers, lean=True)
    app.add_middleware(_Stamp)
    with (
        serve(app) as url,
        httpx.Client(
            base_url=url, headers={"authorization": f"Bearer {KEYS['alice']}"}, timeout=30
        ) as http,
    ):
        created = http.post("/v1/jobs", json=VALID)
        assert created.status_code == 202
        got = http.get(f"/v1/jobs/{created.json()['id']}?waitMs=5000")
        assert got.status_code == 200
        assert created.headers["x-stamp"] == got.headers["x-stamp"] == "1"
    assert served == []  # the front left them to FastAPI's stack, which holds the layer


# -- over a raw socket: the front's own reading and writing (app.api.serving) ---------------

_JOB_ID = re.compile(rb"job_[0-9a-z]{26}")


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


def _answers(received: bytes, heads: tuple[int, ...]) -> list[tuple[bytes, list[bytes], Any]]:
    """Each response in ``received``: its status line, its header lines (in order, the
    date left out), its body (JSON, without what differs between runs); job ids masked.
    ``heads``: the answers to HEAD requests, by number (no body)."""
    answers: list[tuple[bytes, list[bytes], Any]] = []
    rest = _JOB_ID.sub(b"job_" + b"x" * 26, received)
    while rest:
        head, _, rest = rest.partition(b"\r\n\r\n")
        status, *lines = head.split(b"\r\n")
        length = 0
        for line in lines:
            if len(answers) not in heads and line.lower().startswith(b"content-length:"):
                length = int(line.split(b":", 1)[1])
        body, rest = rest[:length], rest[length:]
        shown: Any = json.loads(body) if body else None
        if isinstance(shown, dict):
            shown = {k: v for k, v in shown.items() if k not in VARYING}
        answers.append((status, [line for line in lines if not line.startswith(b"date:")], shown))
    return answers


def _exchange_raw(
    url: str, sent: bytes, heads: tuple[int, ...] = ()
) -> list[tuple[bytes, list[bytes], Any]]:
    """``sent`` in one write (each body with its head: the front reads it at once); what
    comes back until the server closes the connection (``heads``: as ``_answers``)."""
    port = int(url.rsplit(":", 1)[1])
    with socket.create_connection(("127.0.0.1", port), timeout=10) as sock:
        sock.sendall(sent)
        received = b""
        while data := sock.recv(65536):
            received += data
    return _answers(received, heads)


@pytest.fixture
def fast_paths(monkeypatch: pytest.MonkeyPatch) -> dict[str, int]:
    """How often the front read a whole body at once and wrote an answer in one piece."""
    from app.api.serving import respond, respond_lines, whole_body

    counts = {"body": 0, "respond": 0}

    def counted_body(receive: Any) -> bytes | None:
        body = whole_body(receive)
        counts["body"] += body is not None
        return body

    def counted_respond(*args: Any) -> bool:
        done = respond(*args)
        counts["respond"] += done
        return done

    def counted_lines(*args: Any) -> bool:
        done = respond_lines(*args)
        counts["respond"] += done
        return done

    monkeypatch.setattr("app.api.front.whole_body", counted_body)
    monkeypatch.setattr("app.api.front.respond", counted_respond)
    monkeypatch.setattr("app.api.front.respond_lines", counted_lines)
    return counts


def test_requests_read_and_answered_at_once_get_the_same_answers(
    three: tuple[str, str, str], fast_paths: dict[str, int]
) -> None:
    """Requests that arrive whole, several in one write (pipelined), kept alive or closed:
    the front reads each body at once and writes each answer in one piece
    (``serving.whole_body``, ``serving.respond``), byte for byte what uvicorn's own
    ``receive`` and ``send`` give the same app with the front off and the general path."""
    valid = json.dumps(VALID).encode()
    runs = []
    for url in three:
        with httpx.Client(
            base_url=url, headers={"authorization": f"Bearer {KEYS['alice']}"}, timeout=30
        ) as http:
            job_id = http.post("/v1/jobs", json=VALID).json()["id"]  # stays queued
        json_type = "application/json"
        kept = b"".join(
            [
                _request("POST", "/v1/jobs", valid, Content_Type=json_type),
                _request("POST", "/v1/generate?waitMs=0", valid, Content_Type=json_type),
                _request(
                    "POST", "/v1/jobs", b'{"task": "caf\xe9"}', Content_Type=json_type
                ),  # not UTF-8
                _request("POST", "/v1/jobs", b"{", Content_Type=json_type),
                _request("POST", "/v1/jobs", valid, Content_Type="text/plain"),
                _request(
                    "POST", "/v1/jobs", valid, Idempotency_Key="raw-key", Content_Type=json_type
                ),
                _request(
                    "POST", "/v1/jobs", valid, Idempotency_Key="raw-key", Content_Type=json_type
                ),
                _request("GET", f"/v1/jobs/{job_id}?waitMs=20"),
                _request("HEAD", f"/v1/jobs/{job_id}"),
                _request("GET", f"/v1/jobs/{job_id}", Traceparent=TRACEPARENT),
                _request("GET", f"/v1/jobs/{job_id}", Connection="close"),
            ]
        )
        run = _exchange_raw(url, kept, heads=(8,))
        run += _exchange_raw(
            url, _request("POST", "/v1/jobs", valid, Connection="close", Content_Type=json_type)
        )
        # over the cap (32 KiB) in chunks, all sent: counted once read
        big = _request("POST", "/v1/jobs", b"x" * 40_000, chunked=True, Content_Type=json_type)
        run += _exchange_raw(url, big)
        run += _exchange_raw(
            url,
            _request(
                "POST",
                "/v1/jobs",
                valid,
                Expect="100-continue",
                Connection="close",
                Content_Type=json_type,
            ),
        )
        runs.append(run)
        if url == three[0]:
            assert fast_paths["body"] >= 8
            assert fast_paths["respond"] >= 6
            counted = dict(fast_paths)
    assert fast_paths == counted  # nothing taken by the front when it is off
    front, lean, general = runs
    assert front == lean == general
    statuses = [answer[0].split()[1] for answer in front]
    assert statuses == [
        b"202", b"202", b"422", b"422", b"415", b"202", b"200", b"200", b"405", b"200", b"200",
        b"202", b"413", b"100", b"202",
    ]  # fmt: skip
    assert b"connection: close" in front[10][1]
    assert b"connection: close" in front[11][1]


def test_a_job_answers_header_lines_are_the_headers_starlette_writes(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A job's answer carries its head as lines (``LinedResponse``, written as they are by
    ``respond_lines``); Starlette's own way of sending it reads ``raw_headers``, made from
    those lines: the same headers in the same order. Lines uvicorn would not write as
    they are (a header it reads itself, a character it refuses) are refused when made."""
    from app.api import serving
    from app.api.jobs import JobResponse
    from app.api.serving import check_lines

    body = b'{"id":"job_x"}'
    given = b"location: /v1/jobs/job_x\r\nretry-after: 1\r\n"
    answer = JobResponse(body, 202, given)
    headers = {"location": "/v1/jobs/job_x", "retry-after": "1"}
    plain = Response(body, 202, headers, media_type="application/json")
    assert answer.raw_headers == plain.raw_headers
    assert answer.lines == b"".join(b"%s: %s\r\n" % pair for pair in plain.raw_headers)
    answer.raw_headers.append((b"x-extra", b"1"))  # the list Starlette mutates is kept
    assert answer.raw_headers[-1] == (b"x-extra", b"1")
    # ... and, once asked for, is what is written (``respond``'s checks), not the lines
    written: list[Any] = []

    def respond(*args: Any) -> bool:
        written.append(args)
        return False

    monkeypatch.setattr(serving, "respond", respond)

    async def send(message: Any) -> None:  # not uvicorn's
        raise AssertionError(message)

    assert not serving.respond_lines(send, answer)
    assert written == [(written[0][0], 202, answer.raw_headers, body)]
    assert check_lines(given) is given
    for bad in (
        b"content-length: 3\r\n",
        b"connection: close\r\n",
        b"transfer-encoding: chunked\r\n",
        b"bad name: x\r\n",
        b"x: a\nb\r\n",
        b"x: 1",
    ):
        with pytest.raises(ValueError, match="not header lines"):
            check_lines(bad)
