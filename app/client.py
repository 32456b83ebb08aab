"""A small synchronous client for reprompt's HTTP API (used by ``reprompt submit`` and ``get``).

api = ApiClient("http://127.0.0.1:8080", key=None)
job = api.submit(spec)                        # 202: {"id": ..., "status": "queued", ...}
for event in api.events(job["id"]): ...       # Server-Sent Events until job_end
api.get(job["id"], wait_ms=30_000)

A job with client tools pauses in ``requires_action``; ``run`` answers its calls from a
mapping of Python callables (a callable that raises answers with an ``error``)::

    job = api.run(spec, tools={"lookup": lambda args: {"price": 12.5}})

A 429 (too fast, queue full, too many open waits) or a 503 (Redis or the model provider
not reachable) is retried after its ``Retry-After`` (at most ``max_wait_s`` a wait, at most
``max_attempts`` tries; ``on_retry`` hears each). A submission is retried after a 503 only
with an ``idempotency_key``: the first attempt may have stored the job.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any

import httpx

# Runs a client tool: the call's arguments in, its output (any JSON value) out.
ToolFunction = Callable[[dict[str, Any]], Any]
TERMINAL = ("succeeded", "failed", "cancelled")
RETRIED = (429, 503)
# Told of each retry: the status and how long the client waits before the next attempt.
OnRetry = Callable[[int, float], None]


class ApiError(Exception):
    """A problem+json answer: ``status`` and the problem's ``detail``."""

    def __init__(self, status: int, problem: dict[str, Any]) -> None:
        self.status = status
        self.problem = problem
        detail = problem.get("detail") or problem.get("title") or "request failed"
        fields = "; ".join(
            f"{e.get('field')}: {e.get('message')}" for e in problem.get("errors", [])
        )
        super().__init__(f"{status} {detail}" + (f" ({fields})" if fields else ""))


@dataclass(frozen=True, slots=True)
class ServerEvent:
    id: str | None
    name: str
    data: dict[str, Any]


class ApiClient:
    def __init__(
        self,
        base_url: str,
        *,
        key: str | None = None,
        timeout_s: float = 120.0,
        max_attempts: int = 4,
        max_wait_s: float = 30.0,
        on_retry: OnRetry | None = None,
    ) -> None:
        headers = {"authorization": f"Bearer {key}"} if key else {}
        self._http = httpx.Client(base_url=base_url, headers=headers, timeout=timeout_s)
        self.max_attempts = max(1, max_attempts)
        self.max_wait_s = max_wait_s
        self.on_retry = on_retry

    def _send(self, method: str, url: str, *, retry_503: bool = True, **kwargs: Any) -> Any:
        """The request's JSON answer, retried on 429/503 after ``Retry-After`` (bounded)."""
        for attempt in range(1, self.max_attempts + 1):
            response = self._http.request(method, url, **kwargs)
            retried = response.status_code == 429 or (response.status_code == 503 and retry_503)
            if not retried or attempt == self.max_attempts:
                return self._json(response)
            wait_s = min(retry_after_s(response.headers.get("retry-after")), self.max_wait_s)
            if self.on_retry is not None:
                self.on_retry(response.status_code, wait_s)
            time.sleep(wait_s)
        raise AssertionError("unreachable: the last attempt returns")

    def close(self) -> None:
        self._http.close()

    def __enter__(self) -> ApiClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def submit(self, spec: dict[str, Any], *, idempotency_key: str | None = None) -> dict[str, Any]:
        headers = {"idempotency-key": idempotency_key} if idempotency_key else {}
        return dict(
            self._send(
                "POST", "/v1/jobs", json=spec, headers=headers, retry_503=bool(idempotency_key)
            )
        )

    def get(self, job_id: str, *, wait_ms: int = 0) -> dict[str, Any]:
        params = {"waitMs": wait_ms} if wait_ms else {}
        return dict(self._send("GET", f"/v1/jobs/{job_id}", params=params))

    def submit_tool_outputs(self, job_id: str, outputs: list[dict[str, Any]]) -> dict[str, Any]:
        """Answer a job's ``requiredAction``: one ``{toolCallId, output | error}`` per call
        (a retry after a 503 is safe: the same outputs again are answered as the first were)."""
        return dict(
            self._send("POST", f"/v1/jobs/{job_id}/tool-outputs", json={"outputs": outputs})
        )

    def run(
        self,
        spec: dict[str, Any],
        *,
        tools: Mapping[str, ToolFunction],
        timeout_s: float = 600.0,
        wait_ms: int = 30_000,
    ) -> dict[str, Any]:
        """Submit ``spec`` and answer its tool calls with ``tools`` until it ends."""
        job = self.submit(spec)
        deadline = time.monotonic() + timeout_s
        while job["status"] not in TERMINAL:
            if time.monotonic() > deadline:
                raise TimeoutError(f"job {job['id']} did not end within {timeout_s}s")
            if job["status"] == "requires_action" and job.get("requiredAction"):
                outputs = answer_calls(job["requiredAction"]["toolCalls"], tools)
                self.submit_tool_outputs(job["id"], outputs)
            job = self.get(job["id"], wait_ms=wait_ms)
        return job

    def ready(self) -> bool:
        try:
            return self._http.get("/readyz", timeout=2.0).status_code == 200
        except httpx.TransportError:
            return False

    def events(self, job_id: str, *, last_event_id: str | None = None) -> Iterator[ServerEvent]:
        """The job's events as they happen, ending with ``job_end``."""
        headers = {"last-event-id": last_event_id} if last_event_id else {}
        return self._sse(f"/v1/jobs/{job_id}/events", headers)

    # -- streamed partials (#31) --------------------------------------------------------------

    def generate_stream(
        self, spec: dict[str, Any], *, idempotency_key: str | None = None
    ) -> Iterator[ServerEvent]:
        """Submit ``spec`` to ``/v1/generate`` streaming: its events as they come, the
        ``partial`` ones (answer so far: complete, checked values) among them, ending with
        ``job_end``. Leaving the loop early closes the stream, which cancels the job."""
        headers = {"accept": "text/event-stream"}
        if idempotency_key:
            headers["idempotency-key"] = idempotency_key
        return self._sse("/v1/generate", headers, body={**spec, "stream": True})

    # -- batches (#30) --------------------------------------------------------------------

    def submit_batch(
        self,
        options: dict[str, Any],
        items: Iterable[dict[str, Any]],
        *,
        idempotency_key: str | None = None,
    ) -> dict[str, Any]:
        """Submit a batch as JSONL (its options, then one item per line), streamed: the
        items are never all in memory here."""

        def lines() -> Iterator[bytes]:
            yield (json.dumps(options) + "\n").encode()
            for item in items:
                yield (json.dumps(item) + "\n").encode()

        headers = {"content-type": "application/x-ndjson"}
        if idempotency_key:
            headers["idempotency-key"] = idempotency_key
        return self._json(self._http.post("/v1/batches", content=lines(), headers=headers))

    def get_batch(self, batch_id: str) -> dict[str, Any]:
        return self._json(self._http.get(f"/v1/batches/{batch_id}"))

    def batch_items(
        self,
        batch_id: str,
        *,
        status: str | None = None,
        cursor: str | None = None,
        limit: int = 50,
    ) -> dict[str, Any]:
        """One page of items (``{"items", "next"}``), with their turn records."""
        params: dict[str, Any] = {"limit": limit}
        if status:
            params["status"] = status
        if cursor:
            params["cursor"] = cursor
        return self._json(self._http.get(f"/v1/batches/{batch_id}/items", params=params))

    def batch_results(self, batch_id: str) -> Iterator[dict[str, Any]]:
        """Every item's ``{customId, status, result}``, streamed line by line."""
        with self._http.stream("GET", f"/v1/batches/{batch_id}/results", timeout=None) as r:
            if r.status_code != 200:
                r.read()
                self._json(r)
            for line in r.iter_lines():
                if line.strip():
                    yield json.loads(line)

    def cancel_batch(self, batch_id: str) -> dict[str, Any]:
        return self._json(self._http.post(f"/v1/batches/{batch_id}/cancel"))

    def batch_events(self, batch_id: str) -> Iterator[ServerEvent]:
        """``progress`` events (the batch, each time it changes) until it ends."""
        return self._sse(f"/v1/batches/{batch_id}/events", {})

    def _sse(
        self, path: str, headers: dict[str, str], *, body: dict[str, Any] | None = None
    ) -> Iterator[ServerEvent]:
        """Server-Sent Events from ``path`` (a POST of ``body`` when given)."""
        method = "GET" if body is None else "POST"
        with self._http.stream(method, path, json=body, headers=headers, timeout=None) as response:
            if response.status_code != 200:
                response.read()
                self._json(response)
            event_id: str | None = None
            name = "message"
            data: list[str] = []
            for line in response.iter_lines():
                if not line:
                    if data:
                        yield ServerEvent(event_id, name, json.loads("\n".join(data)))
                    event_id, name, data = None, "message", []
                elif line.startswith(":"):
                    continue
                else:
                    field, _, value = line.partition(":")
                    value = value.removeprefix(" ")
                    if field == "id":
                        event_id = value
                    elif field == "event":
                        name = value
                    elif field == "data":
                        data.append(value)

    @staticmethod
    def _json(response: httpx.Response) -> dict[str, Any]:
        try:
            body = response.json()
        except ValueError:
            body = {"detail": response.text[:500]}
        if response.status_code >= 400:
            raise ApiError(response.status_code, body if isinstance(body, dict) else {})
        return dict(body)


def retry_after_s(value: str | None) -> float:
    """``Retry-After`` in seconds (delta-seconds; 1 s when absent or an HTTP date)."""
    try:
        return max(0.0, float(value)) if value is not None else 1.0
    except ValueError:
        return 1.0


def answer_calls(
    calls: list[dict[str, Any]], tools: Mapping[str, ToolFunction]
) -> list[dict[str, Any]]:
    """The outputs for ``requiredAction.toolCalls``, each call run by its function.

    An unknown tool or a function that raises answers with an ``error`` the model reads.
    """
    outputs: list[dict[str, Any]] = []
    for call in calls:
        function = tools.get(call["name"])
        if function is None:
            outputs.append({"toolCallId": call["id"], "error": f"no tool {call['name']!r} here"})
            continue
        try:
            result = function(call.get("arguments") or {})
        except Exception as exc:  # the model reads it as the tool's error
            outputs.append(
                {"toolCallId": call["id"], "error": f"{type(exc).__name__}: {exc}"[:2000]}
            )
        else:
            outputs.append({"toolCallId": call["id"], "output": result})
    return outputs
