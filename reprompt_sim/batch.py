"""The providers' batch APIs, simulated: OpenAI's Files + Batch API and Anthropic's Message
Batches, answering each line exactly as the live endpoint would (the same flaky model).

OpenAI: ``POST /v1/files`` (multipart, ``purpose=batch``), ``GET /v1/files/{id}[/content]``,
``POST /v1/batches``, ``GET /v1/batches[/{id}]``, ``POST /v1/batches/{id}/cancel``; the
output and error files are JSONL of ``{id, custom_id, response: {status_code, request_id,
body}, error}``. Anthropic: ``POST /v1/messages/batches`` (``requests: [{custom_id,
params}]``), ``GET /v1/messages/batches[/{id}]``, ``…/{id}/results`` (JSONL of
``{custom_id, result: {type, message|error}}``), ``POST …/{id}/cancel``.

A batch waits ``SimConfig.batch_turnaround_ms``, then answers its lines one by one; a
cancel stops it between lines; with ``batch_expire_after`` it expires after that many
lines (the rest come back expired). ``Idempotency-Key`` on create returns the batch made
with that key. ``GET /sim/batches`` lists every batch made and how many creates each key
saw (tests prove "never submitted twice" with it).
"""

from __future__ import annotations

import asyncio
import json
import secrets
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any, Final, Literal

from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse, Response

from reprompt_sim import anthropic_wire, openai_wire
from reprompt_sim.config import SimConfig

Answer = Callable[[object], Awaitable[Response]]
Api = Literal["openai", "anthropic"]

MAX_FILE_BYTES: Final = 200 * 1024 * 1024  # OpenAI's limit per batch input file
MAX_LINES: Final = 100_000
WINDOW_S: Final = 24 * 3600


@dataclass(slots=True)
class _File:
    id: str
    filename: str
    purpose: str
    data: bytes
    created_at: int

    def body(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "object": "file",
            "bytes": len(self.data),
            "created_at": self.created_at,
            "filename": self.filename,
            "purpose": self.purpose,
            "status": "processed",
        }


@dataclass(slots=True)
class _Batch:
    id: str
    api: Api
    lines: list[tuple[str, Any]]  # (custom_id, request body)
    created_at: int
    input_file_id: str | None = None
    metadata: dict[str, str] | None = None
    idempotency_key: str | None = None
    status: str = "in_progress"  # OpenAI's words; Anthropic's derived in its body
    results: dict[str, dict[str, Any]] = field(default_factory=dict)  # custom_id → outcome
    cancel_requested: bool = False
    ended_at: int | None = None
    output_file_id: str | None = None
    error_file_id: str | None = None

    def counts(self) -> dict[str, int]:
        kinds = [r["kind"] for r in self.results.values()]
        return {k: kinds.count(k) for k in ("succeeded", "errored", "canceled", "expired")}


class BatchSim:
    """Every file and batch one simulator holds, and the task answering each batch."""

    def __init__(self, config: SimConfig, *, openai: Answer, anthropic: Answer) -> None:
        self.config = config
        self.answer: dict[Api, Answer] = {"openai": openai, "anthropic": anthropic}
        self.files: dict[str, _File] = {}
        self.batches: dict[str, _Batch] = {}
        self.by_key: dict[str, str] = {}
        self.creates: dict[str, int] = {}  # creates seen per Idempotency-Key
        self._tasks: set[asyncio.Task[None]] = set()

    def add_file(self, filename: str, purpose: str, data: bytes) -> _File:
        file = _File(f"file-{secrets.token_hex(12)}", filename, purpose, data, int(time.time()))
        self.files[file.id] = file
        return file

    def create(
        self,
        api: Api,
        lines: list[tuple[str, Any]],
        *,
        key: str | None,
        input_file_id: str | None = None,
        metadata: dict[str, str] | None = None,
    ) -> _Batch:
        if key is not None:
            self.creates[key] = self.creates.get(key, 0) + 1
            if key in self.by_key:
                return self.batches[self.by_key[key]]
        prefix = "batch_" if api == "openai" else "msgbatch_"
        batch = _Batch(
            f"{prefix}{secrets.token_hex(12)}",
            api,
            lines,
            int(time.time()),
            input_file_id=input_file_id,
            metadata=metadata,
            idempotency_key=key,
        )
        self.batches[batch.id] = batch
        if key is not None:
            self.by_key[key] = batch.id
        task = asyncio.create_task(self._run(batch), name=f"sim-batch-{batch.id}")
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)
        return batch

    async def _run(self, batch: _Batch) -> None:
        """Wait the turnaround, then answer each line until cancelled or expired."""
        waited = 0.0
        turnaround = self.config.batch_turnaround_ms / 1000
        while waited < turnaround and not batch.cancel_requested:
            step = min(0.05, turnaround - waited)
            await asyncio.sleep(step)
            waited += step
        expire_after = self.config.batch_expire_after
        answer = self.answer[batch.api]
        for n, (custom_id, body) in enumerate(batch.lines):
            if batch.cancel_requested:
                batch.results[custom_id] = {"kind": "canceled"}
                continue
            if expire_after is not None and n >= expire_after:
                batch.results[custom_id] = {"kind": "expired"}
                continue
            response = await answer(body)
            reply = json.loads(bytes(response.body))
            kind = "succeeded" if response.status_code == 200 else "errored"
            batch.results[custom_id] = {
                "kind": kind,
                "status": response.status_code,
                "body": reply,
            }
            if n % 64 == 63:
                await asyncio.sleep(0)  # let polls and cancels in
        if batch.cancel_requested:
            batch.status = "cancelled"
        elif expire_after is not None and expire_after < len(batch.lines):
            batch.status = "expired"
        else:
            batch.status = "completed"
        batch.ended_at = int(time.time())
        if batch.api == "openai":
            self._openai_files(batch)

    def _openai_files(self, batch: _Batch) -> None:
        """The output file (answered lines) and error file (the rest), as OpenAI writes them."""
        out: list[str] = []
        errors: list[str] = []
        for custom_id, result in batch.results.items():
            line: dict[str, Any] = {
                "id": f"batch_req_{secrets.token_hex(8)}",
                "custom_id": custom_id,
            }
            if result["kind"] in ("succeeded", "errored"):
                line["response"] = {
                    "status_code": result["status"],
                    "request_id": secrets.token_hex(8),
                    "body": result["body"],
                }
                line["error"] = None
                (out if result["kind"] == "succeeded" else errors).append(json.dumps(line))
            else:
                code = "batch_expired" if result["kind"] == "expired" else "batch_cancelled"
                line["response"] = None
                line["error"] = {"code": code, "message": f"This request was {result['kind']}."}
                errors.append(json.dumps(line))
        if out:
            name = f"{batch.id}_output.jsonl"
            batch.output_file_id = self.add_file(name, "batch_output", _jsonl(out)).id
        if errors:
            name = f"{batch.id}_error.jsonl"
            batch.error_file_id = self.add_file(name, "batch_output", _jsonl(errors)).id

    # -- the resources as each provider shows them ----------------------------------------

    def openai_body(self, batch: _Batch) -> dict[str, Any]:
        counts = batch.counts()
        ended = batch.ended_at
        status = batch.status
        if status == "in_progress" and batch.cancel_requested:
            status = "cancelling"
        return {
            "id": batch.id,
            "object": "batch",
            "endpoint": "/v1/chat/completions",
            "errors": None,
            "input_file_id": batch.input_file_id,
            "completion_window": "24h",
            "status": status,
            "output_file_id": batch.output_file_id,
            "error_file_id": batch.error_file_id,
            "created_at": batch.created_at,
            "in_progress_at": batch.created_at,
            "expires_at": batch.created_at + WINDOW_S,
            "finalizing_at": ended,
            "completed_at": ended if status == "completed" else None,
            "failed_at": None,
            "expired_at": ended if status == "expired" else None,
            "cancelling_at": batch.created_at if batch.cancel_requested else None,
            "cancelled_at": ended if status == "cancelled" else None,
            "request_counts": {
                "total": len(batch.lines),
                "completed": counts["succeeded"],
                "failed": len(batch.results) - counts["succeeded"],
            },
            "metadata": batch.metadata,
        }

    def anthropic_body(self, batch: _Batch, base_url: str) -> dict[str, Any]:
        counts = batch.counts()
        ended = batch.ended_at is not None
        if ended:
            status = "ended"
        elif batch.cancel_requested:
            status = "canceling"
        else:
            status = "in_progress"
        return {
            "id": batch.id,
            "type": "message_batch",
            "processing_status": status,
            "request_counts": {
                "processing": len(batch.lines) - len(batch.results),
                "succeeded": counts["succeeded"],
                "errored": counts["errored"],
                "canceled": counts["canceled"],
                "expired": counts["expired"],
            },
            "ended_at": None if batch.ended_at is None else _iso(batch.ended_at),
            "created_at": _iso(batch.created_at),
            "expires_at": _iso(batch.created_at + WINDOW_S),
            "archived_at": None,
            "cancel_initiated_at": _iso(batch.created_at) if batch.cancel_requested else None,
            "results_url": f"{base_url}v1/messages/batches/{batch.id}/results" if ended else None,
        }

    def anthropic_results(self, batch: _Batch) -> bytes:
        lines = []
        for custom_id, result in batch.results.items():
            kind = result["kind"]
            body: dict[str, Any] = {"type": kind}
            if kind == "succeeded":
                body["message"] = result["body"]
            elif kind == "errored":
                body["error"] = result["body"]
            lines.append(json.dumps({"custom_id": custom_id, "result": body}))
        return _jsonl(lines)


def _jsonl(lines: list[str]) -> bytes:
    return ("\n".join(lines) + "\n").encode() if lines else b""


def _iso(ts: int) -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(ts))


def _oai_error(status: int, message: str) -> JSONResponse:
    return JSONResponse(openai_wire.render_error(status, message), status)


def _ant_error(status: int, message: str) -> JSONResponse:
    return JSONResponse(anthropic_wire.render_error(status, message), status)


def mount(app: FastAPI, sim: BatchSim) -> None:
    """Add both providers' batch endpoints (and ``/sim/batches``) to the simulator's app."""
    _mount_files(app, sim)
    _mount_openai(app, sim)
    _mount_anthropic(app, sim)
    _mount_sim(app, sim)


def _openai_lines(data: bytes) -> list[tuple[str, Any]] | JSONResponse:
    lines: list[tuple[str, Any]] = []
    seen: set[str] = set()
    for number, raw in enumerate(data.splitlines(), 1):
        if not raw.strip():
            continue
        try:
            line = json.loads(raw)
            custom_id, request_body = line["custom_id"], line["body"]
        except (ValueError, KeyError, TypeError):
            return _oai_error(400, f"line {number} of the input file is not a request")
        if not isinstance(custom_id, str) or custom_id in seen:
            return _oai_error(400, f"line {number}: custom_id missing or repeated")
        seen.add(custom_id)
        lines.append((custom_id, request_body))
    if not lines or len(lines) > MAX_LINES:
        return _oai_error(400, f"a batch has 1 to {MAX_LINES} requests")
    return lines


def _anthropic_lines(body: Any) -> list[tuple[str, Any]] | JSONResponse:
    requests = body.get("requests") if isinstance(body, dict) else None
    if not isinstance(requests, list) or not 1 <= len(requests) <= MAX_LINES:
        return _ant_error(400, f"requests: an array of 1 to {MAX_LINES} requests")
    lines: list[tuple[str, Any]] = []
    seen: set[str] = set()
    for n, item in enumerate(requests):
        custom_id = item.get("custom_id") if isinstance(item, dict) else None
        params = item.get("params") if isinstance(item, dict) else None
        if not isinstance(custom_id, str) or custom_id in seen or not isinstance(params, dict):
            return _ant_error(400, f"requests.{n}: custom_id missing or repeated, or no params")
        seen.add(custom_id)
        lines.append((custom_id, params))
    return lines


def _mount_files(app: FastAPI, sim: BatchSim) -> None:
    @app.post("/v1/files")
    async def upload(request: Request) -> JSONResponse:
        if int(request.headers.get("content-length") or 0) > MAX_FILE_BYTES + 65536:
            return _oai_error(400, "file too large")
        # The body's size is bounded above; the JSONL comes as a file part, which Starlette's
        # max_part_size (0.44+, for fields only) does not limit.
        async with request.form(max_files=1, max_fields=4) as form:
            upload = form.get("file")
            purpose = form.get("purpose")
            if upload is None or isinstance(upload, str) or purpose != "batch":
                return _oai_error(400, "expected a 'file' part and purpose=batch")
            data = await upload.read()
            name = upload.filename or "upload.jsonl"
        return JSONResponse(sim.add_file(name, "batch", data).body())

    @app.get("/v1/files/{file_id}")
    async def file_info(file_id: str) -> JSONResponse:
        file = sim.files.get(file_id)
        if file is None:
            return _oai_error(404, f"No such File object: {file_id}")
        return JSONResponse(file.body())

    @app.get("/v1/files/{file_id}/content")
    async def file_content(file_id: str) -> Response:
        file = sim.files.get(file_id)
        if file is None:
            return _oai_error(404, f"No such File object: {file_id}")
        return Response(file.data, media_type="application/octet-stream")


def _mount_openai(app: FastAPI, sim: BatchSim) -> None:
    @app.post("/v1/batches")
    async def create_openai(request: Request) -> JSONResponse:
        body = await request.json()
        if not isinstance(body, dict):
            return _oai_error(400, "the request body must be a JSON object")
        file = sim.files.get(str(body.get("input_file_id")))
        if file is None:
            return _oai_error(400, "input_file_id: no such file")
        if body.get("endpoint") != "/v1/chat/completions" or body.get("completion_window") != "24h":
            return _oai_error(400, "endpoint must be /v1/chat/completions, completion_window 24h")
        lines = _openai_lines(file.data)
        if isinstance(lines, JSONResponse):
            return lines
        metadata = body.get("metadata")
        batch = sim.create(
            "openai",
            lines,
            key=request.headers.get("idempotency-key"),
            input_file_id=file.id,
            metadata=metadata if isinstance(metadata, dict) else None,
        )
        return JSONResponse(sim.openai_body(batch))

    @app.get("/v1/batches")
    async def list_openai(limit: int = 20) -> JSONResponse:
        batches = [b for b in sim.batches.values() if b.api == "openai"][::-1][: max(limit, 1)]
        data = [sim.openai_body(b) for b in batches]
        return JSONResponse(
            {
                "object": "list",
                "data": data,
                "first_id": data[0]["id"] if data else None,
                "last_id": data[-1]["id"] if data else None,
                "has_more": False,
            }
        )

    @app.get("/v1/batches/{batch_id}")
    async def get_openai(batch_id: str) -> JSONResponse:
        batch = sim.batches.get(batch_id)
        if batch is None or batch.api != "openai":
            return _oai_error(404, f"No such Batch object: {batch_id}")
        return JSONResponse(sim.openai_body(batch))

    @app.post("/v1/batches/{batch_id}/cancel")
    async def cancel_openai(batch_id: str) -> JSONResponse:
        batch = sim.batches.get(batch_id)
        if batch is None or batch.api != "openai":
            return _oai_error(404, f"No such Batch object: {batch_id}")
        if batch.ended_at is None:
            batch.cancel_requested = True
        return JSONResponse(sim.openai_body(batch))


def _mount_anthropic(app: FastAPI, sim: BatchSim) -> None:
    @app.post("/v1/messages/batches")
    async def create_anthropic(request: Request) -> JSONResponse:
        lines = _anthropic_lines(await request.json())
        if isinstance(lines, JSONResponse):
            return lines
        batch = sim.create("anthropic", lines, key=request.headers.get("idempotency-key"))
        return JSONResponse(sim.anthropic_body(batch, str(request.base_url)))

    @app.get("/v1/messages/batches")
    async def list_anthropic(request: Request, limit: int = 20) -> JSONResponse:
        batches = [b for b in sim.batches.values() if b.api == "anthropic"][::-1][: max(limit, 1)]
        data = [sim.anthropic_body(b, str(request.base_url)) for b in batches]
        return JSONResponse(
            {
                "data": data,
                "has_more": False,
                "first_id": data[0]["id"] if data else None,
                "last_id": data[-1]["id"] if data else None,
            }
        )

    @app.get("/v1/messages/batches/{batch_id}")
    async def get_anthropic(request: Request, batch_id: str) -> JSONResponse:
        batch = sim.batches.get(batch_id)
        if batch is None or batch.api != "anthropic":
            return _ant_error(404, f"No such message batch: {batch_id}")
        return JSONResponse(sim.anthropic_body(batch, str(request.base_url)))

    @app.get("/v1/messages/batches/{batch_id}/results")
    async def results_anthropic(batch_id: str) -> Response:
        batch = sim.batches.get(batch_id)
        if batch is None or batch.api != "anthropic":
            return _ant_error(404, f"No such message batch: {batch_id}")
        if batch.ended_at is None:
            return _ant_error(400, "the batch is still processing")
        return Response(sim.anthropic_results(batch), media_type="application/x-jsonl")

    @app.post("/v1/messages/batches/{batch_id}/cancel")
    async def cancel_anthropic(request: Request, batch_id: str) -> JSONResponse:
        batch = sim.batches.get(batch_id)
        if batch is None or batch.api != "anthropic":
            return _ant_error(404, f"No such message batch: {batch_id}")
        if batch.ended_at is None:
            batch.cancel_requested = True
        return JSONResponse(sim.anthropic_body(batch, str(request.base_url)))


def _mount_sim(app: FastAPI, sim: BatchSim) -> None:
    @app.get("/sim/batches")
    async def sim_batches() -> JSONResponse:
        return JSONResponse(
            {
                "batches": [
                    {
                        "id": b.id,
                        "api": b.api,
                        "idempotencyKey": b.idempotency_key,
                        "lines": len(b.lines),
                        "status": b.status,
                        "cancelRequested": b.cancel_requested,
                        "counts": b.counts(),
                    }
                    for b in sim.batches.values()
                ],
                "creates": sim.creates,
            }
        )
