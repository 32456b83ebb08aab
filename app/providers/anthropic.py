"""The Anthropic Messages wire format: one attempt, translated both ways.

System messages become the top-level ``system``; tool calls and results become
``tool_use`` / ``tool_result`` blocks; structured output is a forced tool whose
``input_schema`` is the output schema, its ``input`` handed back as JSON text.
``seed`` has no Anthropic equivalent and is not sent. The job's stable prefix
(``LLMRequest.cache_prefix``) is marked for the prompt cache (``cache_control`` on its
last block) when the model has ``prompt_cache`` and the prefix is long enough to be
cached; ``cache_read_input_tokens`` and ``cache_creation_input_tokens`` come back as
``Usage.cached_input_tokens`` and ``cache_write_tokens``. Rate-limit waits come from
``retry-after`` and ``anthropic-ratelimit-*-reset`` (see ``transport.retry_after_seconds``)::

    adapter = AnthropicAdapter(http, provider="anthropic", config=provider_config)
    response = await adapter.send(request, model="claude-haiku", spec=model_config,
                                  mechanism="tool", timeout_s=30.0)
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any, Final

from app.core.turn.budget import estimate_tokens
from app.core.turn.model import (
    FinishReason,
    LLMRequest,
    LLMResponse,
    Message,
    StreamTally,
    TextSink,
    ToolCall,
    Usage,
)
from app.providers.adapter import HttpAdapter, reported_model
from app.providers.config import ModelConfig, ProviderConfig
from app.providers.streaming import malformed
from app.providers.structured import (
    OUTPUT_TOOL,
    OUTPUT_TOOL_DESCRIPTION,
    Capability,
    seam_mode,
    tool_parameters,
    unwrap,
)
from app.providers.transport import Edge

MESSAGES_PATH: Final = "/v1/messages"
REFUSED: Final = "the model declined to answer (stop_reason: refusal)"
_LENGTH_STOPS: Final = frozenset({"max_tokens", "model_context_window_exceeded"})
EPHEMERAL: Final = {"type": "ephemeral"}
# The shortest prefix Anthropic caches, by model family (a shorter one marked is not
# cached, and costs nothing more): 1024 tokens for most models.
_CACHE_MINIMUMS: Final = (
    (("haiku-4-5", "haiku-4.5", "opus-4-5", "opus-4.5", "opus-4-6", "opus-4.6"), 4096),
    (("sonnet-4-6", "sonnet-4.6", "haiku"), 2048),
)
DEFAULT_CACHE_MINIMUM: Final = 1024


def request_body(
    request: LLMRequest, *, spec: ModelConfig, mechanism: Capability
) -> tuple[dict[str, Any], bool]:
    """The JSON body for ``request`` and whether the output schema was wrapped."""
    max_tokens = request.max_output_tokens
    if spec.max_output_tokens is not None:
        max_tokens = min(max_tokens, spec.max_output_tokens)
    tools = [
        {"name": t.name, "description": t.description, "input_schema": dict(t.parameters)}
        for t in request.tools
    ]
    choice = _tool_choice(request)
    wrapped = False
    if request.output_schema is not None and mechanism == "tool":
        # The answer is a call of the output tool, beside any work tools: the model must
        # call one of them (the output tool alone when it may not work).
        parameters, wrapped = tool_parameters(request.output_schema)
        if request.tool_choice == "none":
            tools = []
        output = {"name": OUTPUT_TOOL, "description": OUTPUT_TOOL_DESCRIPTION}
        tools.append({**output, "input_schema": parameters})
        if len(tools) == 1:
            choice = {"type": "tool", "name": OUTPUT_TOOL}
        elif request.forced_tool is None:
            choice = {"type": "any"}
    cached = (
        spec.prompt_cache
        and request.cache_prefix > 0
        and _prefix_tokens(request, tools) >= cache_minimum(spec.name or "")
    )
    system, messages = _conversation(request.messages, request.cache_prefix if cached else 0)
    body: dict[str, Any] = {"model": spec.name, "max_tokens": max_tokens, "messages": messages}
    if system:
        body["system"] = system
    if request.temperature is not None:
        body["temperature"] = request.temperature
    if tools:
        body["tools"] = tools
        if choice is not None:
            body["tool_choice"] = choice
    return body, wrapped


def cache_minimum(model: str) -> int:
    """The fewest tokens of a prefix ``model`` caches."""
    name = model.lower()
    for families, minimum in _CACHE_MINIMUMS:
        if any(family in name for family in families):
            return minimum
    return DEFAULT_CACHE_MINIMUM


def _prefix_tokens(request: LLMRequest, tools: list[dict[str, Any]]) -> int:
    """The cached prefix's size (tools first), estimated as the loop estimates prompts."""
    messages = request.messages[: request.cache_prefix]
    tokens = sum(estimate_tokens(m.content) + 4 for m in messages)
    return tokens + (estimate_tokens(json.dumps(tools)) if tools else 0)


def _tool_choice(request: LLMRequest) -> dict[str, Any] | None:
    """Anthropic's ``tool_choice`` for the work tools (None: the default, "auto")."""
    if request.forced_tool is not None:
        return {"type": "tool", "name": request.forced_tool}
    if request.tool_choice == "required":
        return {"type": "any"}
    return None if request.tool_choice == "auto" else {"type": "none"}


def parse_response(
    body: Mapping[str, Any],
    *,
    model: str,
    provider: str,
    mechanism: Capability,
    wrapped: bool = False,
) -> LLMResponse:
    """Our response for a Messages body; raises ``KeyError``/``TypeError`` on nonsense."""
    blocks = body["content"]
    if not isinstance(blocks, list):
        raise TypeError("content is not a list of blocks")
    text = "".join(b["text"] for b in blocks if b.get("type") == "text") or None
    uses = [b for b in blocks if b.get("type") == "tool_use"]
    content = text
    if mechanism == "tool":
        answer = next((b for b in uses if b.get("name") == OUTPUT_TOOL), None)
        if answer is not None:
            uses.remove(answer)
            content = json.dumps(unwrap(answer.get("input", {}), wrapped))
    calls = tuple(
        ToolCall(id=str(b["id"]), name=str(b["name"]), arguments=json.dumps(b.get("input", {})))
        for b in uses
    )
    stop = body.get("stop_reason")
    refusal: str | None = None
    reason: FinishReason
    if stop == "refusal":
        reason, refusal = "refusal", text or REFUSED
    elif stop in _LENGTH_STOPS:
        reason = "length"
    elif calls:
        reason = "tool_calls"
    else:
        reason = "stop"
    return LLMResponse(
        content=content,
        finish_reason=reason,
        model=model,
        provider=provider,
        usage=_usage(body.get("usage")),
        tool_calls=calls,
        refusal=refusal,
        structured_mode=seam_mode(mechanism),
        response_model=reported_model(body),
    )


def _conversation(
    messages: tuple[Message, ...], cache_prefix: int = 0
) -> tuple[str | list[dict[str, Any]], list[dict[str, Any]]]:
    """``(system, messages)``: the system text apart, consecutive same-role turns merged.

    The last block of the first ``cache_prefix`` messages carries ``cache_control`` (the
    system becomes a list of one text block when the prefix ends there).
    """
    system: list[str] = []
    out: list[dict[str, Any]] = []
    marked: dict[str, Any] | None = None
    system_marked = False
    for i, m in enumerate(messages):
        in_prefix = i < cache_prefix
        if m.role == "system":
            if m.content:
                system.append(m.content)
                if in_prefix:
                    marked, system_marked = None, True
            continue
        role = "assistant" if m.role == "assistant" else "user"
        blocks = _blocks(m)
        if not blocks:
            continue
        if in_prefix:
            marked, system_marked = blocks[-1], False
        if out and out[-1]["role"] == role:
            out[-1]["content"].extend(blocks)
        else:
            out.append({"role": role, "content": blocks})
    for turn in out:
        # Anthropic wants a user turn's tool results before any text in it.
        turn["content"].sort(key=lambda b: b["type"] != "tool_result")
    text = "\n\n".join(system)
    if marked is not None:
        marked["cache_control"] = dict(EPHEMERAL)
    elif system_marked:
        return [{"type": "text", "text": text, "cache_control": dict(EPHEMERAL)}], out
    return text, out


def _blocks(m: Message) -> list[dict[str, Any]]:
    if m.role == "tool":
        return [{"type": "tool_result", "tool_use_id": m.tool_call_id or "", "content": m.content}]
    # Anthropic rejects empty text blocks.
    blocks: list[dict[str, Any]] = [{"type": "text", "text": m.content}] if m.content else []
    blocks += [
        {"type": "image", "source": {"type": "base64", "media_type": i.media_type, "data": i.data}}
        for i in m.images
    ]
    if m.role == "assistant":
        blocks += [
            {"type": "tool_use", "id": c.id, "name": c.name, "input": _input(c.arguments)}
            for c in m.tool_calls
        ]
    return blocks


def _input(arguments: str) -> dict[str, Any]:
    """A tool_use ``input`` must be an object; keep what the model sent even when it was not."""
    try:
        value = json.loads(arguments) if arguments else {}
    except ValueError:
        return {"raw_arguments": arguments}
    return value if isinstance(value, dict) else {"value": value}


def _usage(raw: Any) -> Usage | None:
    """Our usage from Anthropic's: ``input_tokens`` counts every prompt token, cached or not.

    Anthropic's leaves out the tokens read from and written to the cache; ours counts them,
    as OpenAI's ``prompt_tokens`` does.
    """
    if not isinstance(raw, Mapping):
        return None
    read, written, plain = (
        max(int(raw.get(key) or 0), 0)
        for key in ("cache_read_input_tokens", "cache_creation_input_tokens", "input_tokens")
    )
    return Usage(
        input_tokens=plain + read + written,
        output_tokens=int(raw.get("output_tokens") or 0),
        cached_input_tokens=read,
        cache_write_tokens=written,
    )


class EventReader:
    """A streamed message (``message_start``, per content block ``content_block_start``,
    ``content_block_delta``s and ``content_block_stop``, ``message_delta`` with the stop
    reason and the usage, ``message_stop``; ``ping`` between) read into the body Anthropic
    would have sent whole. The answer's text (a text block's, or the output tool's input
    JSON when that is how the answer comes) goes to ``sink`` as it arrives."""

    def __init__(
        self,
        sink: TextSink,
        tally: StreamTally,
        *,
        mechanism: Capability,
        wrapped: bool,
        edge: Edge,
    ):
        self.sink = sink
        self.tally = tally
        self.chunks = 0  # deltas received
        self.reported = 0  # output tokens the provider has reported so far
        self.edge = edge
        self.tool_answer = mechanism == "tool"
        self.wrapped = wrapped
        self.message: dict[str, Any] = {}
        self.usage: dict[str, Any] = {}
        self.blocks: dict[int, dict[str, Any]] = {}
        self.parts: dict[int, list[str]] = {}
        self.stop: Any = None
        self.whole: dict[str, Any] | None = None

    def event(self, name: str | None, data: str) -> None:
        try:
            payload = json.loads(data)
        except ValueError:
            raise malformed(self.edge, "an event that is not JSON") from None
        if not isinstance(payload, dict):
            raise malformed(self.edge, "an event that is not a JSON object")
        kind = payload.get("type", name)
        if name == "whole":
            self.whole = payload
        elif kind == "message_start":
            self.message = dict(payload.get("message") or {})
            self.usage.update(self.message.get("usage") or {})
            self._tally()  # the prompt's tokens, known from the start
        elif kind == "content_block_start":
            index = int(payload["index"])
            self.blocks[index] = dict(payload.get("content_block") or {})
            self.parts[index] = []
        elif kind == "content_block_delta":
            self._delta(int(payload["index"]), payload.get("delta") or {})
        elif kind == "message_delta":
            self.stop = (payload.get("delta") or {}).get("stop_reason", self.stop)
            self.usage.update(payload.get("usage") or {})  # cumulative counts
            self._tally()
        elif kind == "error":
            error = payload.get("error") or {}
            said = self.edge.scrub(str(error.get("message", "")))[:300]
            raise malformed(self.edge, f"an error event ({error.get('type')}): {said}")

    def _tally(self) -> None:
        """The usage reported so far, into the tally (for a stream closed before its end)."""
        usage = _usage(self.usage)
        if usage is None:
            return
        tally = self.tally
        tally.input_tokens = usage.input_tokens
        tally.cached_input_tokens = usage.cached_input_tokens
        tally.cache_write_tokens = usage.cache_write_tokens
        self.reported = usage.output_tokens
        tally.output_tokens = max(self.chunks, self.reported)

    def _delta(self, index: int, delta: Mapping[str, Any]) -> None:
        block = self.blocks.get(index)
        if block is None:
            raise malformed(self.edge, f"a delta for content block {index}, never started")
        # A chunk of output (a token or a few); the provider's own count, when larger.
        self.chunks += 1
        self.tally.output_tokens = max(self.chunks, self.reported)
        if delta.get("type") == "text_delta":
            text = str(delta.get("text", ""))
            self.parts[index].append(text)
            if not self.tool_answer and text:
                self.sink.text(text)
        elif delta.get("type") == "input_json_delta":
            text = str(delta.get("partial_json", ""))
            self.parts[index].append(text)
            if self.tool_answer and not self.wrapped and block.get("name") == OUTPUT_TOOL:
                self.sink.text(text)

    def body(self) -> Mapping[str, Any]:
        if self.whole is not None:
            return self.whole
        content = []
        for index, block in sorted(self.blocks.items()):
            text = "".join(self.parts[index])
            if block.get("type") == "text":
                content.append({**block, "text": text})
            elif block.get("type") == "tool_use":
                try:
                    content.append({**block, "input": json.loads(text) if text else {}})
                except ValueError:  # cut short (max_tokens): the text goes to repair as is
                    content.append({"type": "text", "text": text})
        return {**self.message, "content": content, "stop_reason": self.stop, "usage": self.usage}


class AnthropicAdapter(HttpAdapter):
    """Speaks ``POST {base_url}/v1/messages`` with ``x-api-key`` and ``anthropic-version``."""

    path = MESSAGES_PATH
    noun = "message"

    def fixed_headers(self, config: ProviderConfig) -> dict[str, str]:
        return {"anthropic-version": config.anthropic_version, **config.headers}

    def auth_headers(self, key: str) -> dict[str, str]:
        return {"x-api-key": key}

    request_body = staticmethod(request_body)
    parse_response = staticmethod(parse_response)

    stream_reader = EventReader

    def streaming_body(self, body: dict[str, Any]) -> dict[str, Any]:
        return {**body, "stream": True}
