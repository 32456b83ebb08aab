"""A small synchronous client for reprompt's HTTP API (used by ``reprompt submit`` and ``get``).

api = ApiClient("http://127.0.0.1:8080", key=None)
job = api.submit(spec)                        # 202: {"id": ..., "status": "queued", ...}
for event in api.events(job["id"]): ...       # Server-Sent Events until job_end
api.get(job["id"], wait_ms=30_000)

A job with client tools pauses in ``requires_action``; ``run`` answers its calls from a
mapping of Python callables (a callable that raises answers with an ``error``)::

    job = api.run(spec, tools={"lookup": lambda args: {"price": 12.5}})
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any

import httpx

# Runs a client tool: the call's arguments in, its output (any JSON value) out.
ToolFunction = Callable[[dict[str, Any]], Any]
TERMINAL = ("succeeded", "failed", "cancelled")


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
    def __init__(self, base_url: str, *, key: str | None = None, timeout_s: float = 120.0) -> None:
        headers = {"authorization": f"Bearer {key}"} if key else {}
        self._http = httpx.Client(base_url=base_url, headers=headers, timeout=timeout_s)

    def close(self) -> None:
        self._http.close()

    def __enter__(self) -> ApiClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def submit(self, spec: dict[str, Any], *, idempotency_key: str | None = None) -> dict[str, Any]:
        headers = {"idempotency-key": idempotency_key} if idempotency_key else {}
        return self._json(self._http.post("/v1/jobs", json=spec, headers=headers))

    def get(self, job_id: str, *, wait_ms: int = 0) -> dict[str, Any]:
        params = {"waitMs": wait_ms} if wait_ms else {}
        return self._json(self._http.get(f"/v1/jobs/{job_id}", params=params))

    def submit_tool_outputs(self, job_id: str, outputs: list[dict[str, Any]]) -> dict[str, Any]:
        """Answer a job's ``requiredAction``: one ``{toolCallId, output | error}`` per call."""
        return self._json(
            self._http.post(f"/v1/jobs/{job_id}/tool-outputs", json={"outputs": outputs})
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
        with self._http.stream(
            "GET", f"/v1/jobs/{job_id}/events", headers=headers, timeout=None
        ) as response:
            yield from self._events(response)

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
        body = {**spec, "stream": True}
        with self._http.stream(
            "POST", "/v1/generate", json=body, headers=headers, timeout=None
        ) as response:
            yield from self._events(response)

    def _events(self, response: httpx.Response) -> Iterator[ServerEvent]:
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
