"""The simulator's HTTP server: OpenAI and Anthropic endpoints over one behaviour.

The state it keeps is how many times it has seen each conversation, so that a transport
retry of the same body gets the next scripted fault, the prompt prefixes each provider's
cache would hold (``reprompt_sim.cache``), and a bounded journal of recent requests
(``GET /sim/requests``) for tests to read back. In tests::

    from reprompt_sim.server import SimConfig, serve_in_background

    with serve_in_background(SimConfig(seed=1)) as base_url:
        httpx.post(f"{base_url}/v1/chat/completions", json={...})
"""

from __future__ import annotations

import asyncio
import json
import logging
import time
from collections import OrderedDict
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, Final

from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse, Response, StreamingResponse
from starlette.exceptions import HTTPException

from app.loopback import serve_in_thread
from reprompt_sim import anthropic_wire, batch, behaviour, chance, openai_wire, streaming
from reprompt_sim.behaviour import Fault, Reply
from reprompt_sim.cache import PromptCache
from reprompt_sim.config import SimConfig
from reprompt_sim.directive import OPENER
from reprompt_sim.errors import InvalidRequest
from reprompt_sim.journal import RECENT_MESSAGE_CHARS, Entry, Journal
from reprompt_sim.scenario import Scenario

__all__ = ["SimConfig", "create_app", "serve_in_background"]

log = logging.getLogger("reprompt.sim")

_MAX_TRACKED: Final = 100_000


@dataclass(frozen=True, slots=True)
class _Wire:
    """One provider's wire format, as the request handler needs it."""

    api: str
    parse: Callable[[object], Scenario]
    reply: Callable[[Reply, Scenario, Sequence[Reply]], dict[str, Any]]
    error: Callable[[int, str], dict[str, Any]]
    rate_limit_headers: Callable[[float], dict[str, str]]
    overloaded_status: int
    # The reply's usage as the provider reports it with its prompt cache.
    cached_usage: Callable[[PromptCache, dict[str, Any], dict[str, Any]], dict[str, Any]]


_OPENAI: Final = _Wire(
    api="openai",
    parse=openai_wire.parse_request,
    reply=lambda reply, scenario, more: openai_wire.render_reply(
        reply, scenario, created=int(time.time()), more=more
    ),
    error=openai_wire.render_error,
    rate_limit_headers=openai_wire.rate_limit_headers,
    overloaded_status=503,
    cached_usage=openai_wire.cached_usage,
)
_ANTHROPIC: Final = _Wire(
    api="anthropic",
    parse=anthropic_wire.parse_request,
    reply=lambda reply, scenario, more: anthropic_wire.render_reply(reply, scenario),
    error=anthropic_wire.render_error,
    rate_limit_headers=lambda s: anthropic_wire.rate_limit_headers(s, datetime.now(UTC)),
    overloaded_status=anthropic_wire.OVERLOADED_STATUS,
    cached_usage=anthropic_wire.cached_usage,
)


class _Tally:
    """Counts per key, forgetting the oldest keys past a bound."""

    def __init__(self, bound: int = _MAX_TRACKED) -> None:
        self._counts: OrderedDict[str, int] = OrderedDict()
        self._bound = bound

    def get(self, key: str) -> int:
        return self._counts.get(key, 0)

    def bump(self, key: str) -> int:
        """Increment ``key``; returns the count before this call."""
        before = self._counts.pop(key, 0)
        self._counts[key] = before + 1
        if len(self._counts) > self._bound:
            self._counts.popitem(last=False)
        return before


def _recent(body: dict[str, Any]) -> tuple[str, ...]:
    """The texts of the request's messages after the last assistant one (a string content,
    or the text of its parts)."""
    recent: list[str] = []
    for message in reversed(body.get("messages") or []):
        if not isinstance(message, dict) or message.get("role") == "assistant":
            break
        content = message.get("content")
        if isinstance(content, list):
            content = "".join(
                str(part.get("text", part.get("content", "")))
                for part in content
                if isinstance(part, dict)
            )
        recent.append(str(content or "")[:RECENT_MESSAGE_CHARS])
    return tuple(reversed(recent))


def _images(body: dict[str, Any]) -> tuple[str, ...]:
    """The media type of each image part (OpenAI's ``image_url`` data URL, Anthropic's
    base64 ``image`` block), or "url"; the wires' parsers have checked their shape."""
    out: list[str] = []
    for message in body.get("messages") or []:
        content = message.get("content") if isinstance(message, dict) else None
        for part in content if isinstance(content, list) else []:
            if not isinstance(part, dict):
                continue
            if part.get("type") == "image_url":
                url = str(part["image_url"]["url"])
                out.append(url[5:].partition(";")[0] if url.startswith("data:") else "url")
            elif part.get("type") == "image":
                source = part["source"]
                out.append(str(source.get("media_type")) if source["type"] == "base64" else "url")
    return tuple(out)


class _Simulator:
    """One app's behaviour and memory: how often it saw each conversation, answered each task,
    and the journal of recent requests."""

    def __init__(self, config: SimConfig) -> None:
        self.config = config
        self.seen = _Tally()
        self.answered = _Tally()
        self.cache = PromptCache(keyless=config.cache_keyless)
        self.journal = Journal()
        self.streams = streaming.StreamLog()

    async def serve(self, request: Request, wire: _Wire) -> Response:
        """One chat request: the scripted fault, after the simulated latency, or the answer."""
        read = await _read_scenario(request, wire)
        if isinstance(read, JSONResponse):
            return read
        return await self.answer(read[0], read[1], wire)

    async def answer_body(self, body: object, wire: _Wire) -> Response:
        """One request given as its JSON body (a batch's line): the answer or the error."""
        try:
            scenario = wire.parse(body)
        except InvalidRequest as exc:
            return JSONResponse(wire.error(exc.status, exc.message), exc.status)
        assert isinstance(body, dict)  # parse accepts only an object
        return await self.answer(body, scenario, wire)

    async def answer(self, body: dict[str, Any], scenario: Scenario, wire: _Wire) -> Response:
        """The answer to a parsed request, journalled."""
        response = await self._respond(body, scenario, wire)
        self.journal.add(
            Entry(
                api=wire.api,
                attempt=int(response.headers["x-sim-attempt"]),
                outcome=response.headers["x-sim-outcome"],
                tools_offered=scenario.client_tools,
                output_tool=scenario.tool_name,
                tool_choice=body.get("tool_choice"),
                messages=len(body["messages"]),
                schema_keys=_schema_keys(scenario),
                n=scenario.n,
                recent=_recent(body),
                images=_images(body),
            )
        )
        if body.get("stream") is True and response.status_code == 200:
            return self._streamed(body, response, wire)
        return response

    def _streamed(self, body: dict[str, Any], answer: JSONResponse, wire: _Wire) -> Response:
        """The answer a token at a time, as the provider streams (``reprompt_sim.streaming``)."""
        payload = json.loads(bytes(answer.body))
        if wire.api == "openai":
            options = body.get("stream_options")
            usage = isinstance(options, dict) and options.get("include_usage") is True
            pieces = list(streaming.openai_chunks(payload, include_usage=usage))
        else:
            pieces = list(streaming.anthropic_events(payload))
        stream = streaming.Stream(wire.api, streaming.count_tokens(pieces))
        self.streams.add(stream)
        headers = {k: v for k, v in answer.headers.items() if k.startswith("x-sim-")}
        return StreamingResponse(
            streaming.sse(
                iter(pieces),
                stream,
                self.config.token_delay_ms / 1000,
                self.config.stall_after_tokens,
            ),
            media_type="text/event-stream",
            headers={**headers, "cache-control": "no-cache"},
        )

    async def _respond(self, body: dict[str, Any], scenario: Scenario, wire: _Wire) -> JSONResponse:
        convo = scenario.conversation
        hits = self.seen.bump(convo.digest)
        task_key = chance.digest("task", _stable_task(convo.task))
        attempt = behaviour.attempt_of(scenario, self.answered.get(task_key))
        fault = behaviour.fault_for(self.config, scenario, hits=hits, attempt=attempt)
        delay = behaviour.latency_s(self.config, scenario, hits=hits)
        if fault is not None and fault.kind == "slow":
            delay += fault.delay_s
        if delay > 0:
            await asyncio.sleep(delay)
        headers = {
            "x-sim-attempt": str(attempt),
            "x-sim-tools-offered": str(len(scenario.client_tools)),
        }
        failure = _fault_response(wire, fault, headers) if fault is not None else None
        if failure is not None:
            return failure
        try:
            reply = behaviour.answer(self.config, scenario, attempt=attempt)
            more = [
                behaviour.answer(self.config, scenario, attempt=attempt, choice=k)
                for k in range(1, scenario.n)
            ]
        except Exception as exc:  # a simulator bug must not look like a simulated fault
            log.exception("reprompt sim failed to answer")
            headers["x-sim-outcome"] = "sim_bug"
            message = f"reprompt sim bug: {type(exc).__name__}: {exc}"
            return JSONResponse(wire.error(500, message), 500, headers=headers)
        self.answered.bump(task_key)
        headers["x-sim-outcome"] = ",".join(r.outcome for r in (reply, *more))
        payload = wire.reply(reply, scenario, more)
        payload["usage"] = wire.cached_usage(self.cache, body, payload["usage"])
        return JSONResponse(payload, headers=headers)


def _schema_keys(scenario: Scenario) -> tuple[str, ...]:
    """The top-level property names of the schema the request asked for (at most 32)."""
    properties = scenario.schema.get("properties") if scenario.schema is not None else None
    return tuple(str(k) for k in list(properties)[:32]) if isinstance(properties, dict) else ()


async def _read_scenario(
    request: Request, wire: _Wire
) -> tuple[dict[str, Any], Scenario] | JSONResponse:
    """The request's body and scenario, or the provider's error response for a malformed one."""
    try:
        body = await request.json()
    except ValueError:
        return JSONResponse(wire.error(400, "the request body is not valid JSON"), 400)
    try:
        scenario = wire.parse(body)
    except InvalidRequest as exc:
        return JSONResponse(wire.error(exc.status, exc.message), exc.status)
    return body, scenario  # parse accepts only an object with a list of messages


def _fault_response(wire: _Wire, fault: Fault, headers: dict[str, str]) -> JSONResponse | None:
    """The error response a fault replaces the answer with; ``None`` when it only delays it."""
    if fault.kind == "rate_limit":
        headers |= wire.rate_limit_headers(fault.retry_after_s) | {"x-sim-outcome": "rate_limit"}
        return JSONResponse(wire.error(429, _RATE_LIMITED), 429, headers=headers)
    if fault.kind == "overloaded":
        headers |= {"retry-after": f"{fault.retry_after_s:g}", "x-sim-outcome": "overloaded"}
        status = wire.overloaded_status
        return JSONResponse(wire.error(status, _OVERLOADED), status, headers=headers)
    if fault.kind == "server_error":
        headers["x-sim-outcome"] = "server_error"
        return JSONResponse(wire.error(500, _SERVER_ERROR), 500, headers=headers)
    return None


def create_app(config: SimConfig | None = None) -> FastAPI:
    """The simulator as an ASGI app (a fresh one per call: its counters start at zero)."""
    config = config or SimConfig()
    sim = _Simulator(config)
    app = FastAPI(title="reprompt sim", docs_url=None, redoc_url=None, openapi_url=None)
    app.state.sim_config = config

    @app.post("/v1/chat/completions")
    async def chat_completions(request: Request) -> Response:
        return await sim.serve(request, _OPENAI)

    @app.post("/v1/messages")
    async def messages(request: Request) -> Response:
        return await sim.serve(request, _ANTHROPIC)

    @app.get("/v1/models")
    async def models(request: Request) -> JSONResponse:
        if "anthropic-version" in request.headers:
            return JSONResponse(anthropic_wire.models_body())
        return JSONResponse(openai_wire.models_body())

    batch.mount(
        app,
        batch.BatchSim(
            config,
            openai=lambda body: sim.answer_body(body, _OPENAI),
            anthropic=lambda body: sim.answer_body(body, _ANTHROPIC),
        ),
    )

    @app.get("/sim/requests")
    async def requests() -> JSONResponse:
        return JSONResponse(sim.journal.entries())

    @app.delete("/sim/requests", status_code=204)
    async def forget_requests() -> Response:
        sim.journal.clear()
        return Response(status_code=204)

    @app.get("/sim/streams")
    async def streams() -> JSONResponse:
        return JSONResponse(sim.streams.entries())

    @app.get("/healthz")
    async def healthz() -> dict[str, Any]:
        return {"status": "ok", "seed": config.seed}

    @app.exception_handler(HTTPException)
    async def http_error(request: Request, exc: HTTPException) -> JSONResponse:
        anthropic = (
            request.url.path.startswith("/v1/messages") or "anthropic-version" in request.headers
        )
        wire = _ANTHROPIC if anthropic else _OPENAI
        status = exc.status_code
        message = f"{request.method} {request.url.path}: {exc.detail}"
        return JSONResponse(wire.error(status, message), status, headers=exc.headers)

    return app


_RATE_LIMITED: Final = "Rate limit reached for requests (simulated by reprompt sim)."
_OVERLOADED: Final = "The model is overloaded (simulated by reprompt sim). Please retry."
_SERVER_ERROR: Final = (
    "The server had an error processing your request (simulated by reprompt sim)."
)


@contextmanager
def serve_in_background(
    config: SimConfig | None = None, *, host: str = "127.0.0.1", startup_timeout_s: float = 10.0
) -> Iterator[str]:
    """Run the simulator on a free port of ``host`` in a thread; yields its base URL.

    Waits until it accepts connections and shuts it down cleanly on exit.
    """
    with serve_in_thread(
        create_app(config), name="reprompt-sim", host=host, startup_timeout_s=startup_timeout_s
    ) as url:
        yield url


# A compact re-ask is one fresh user turn that opens with the rejection, then the task.
_FRESH_REASK = "The last answer was rejected:"


def _stable_task(task: str) -> str:
    """The task up to the end of its directive: the same task across turns.

    Clients append turn notes after it, and a fresh re-ask puts the rejection before it.
    """
    if task.startswith(_FRESH_REASK) and "\n\n" in task:
        task = task.split("\n\n", 1)[1]
    start = task.find(OPENER)
    end = task.find("]]", start) if start != -1 else -1
    return task[: end + 2] if end != -1 else task
