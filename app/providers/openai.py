"""The OpenAI-compatible chat completions wire format (OpenAI, vLLM, llama.cpp server,
Ollama, Groq, Together, OpenRouter): one attempt, translated both ways.

Prompt caching is OpenAI's own (automatic for a repeated prefix): a model with
``prompt_cache`` sends the job's ``prompt_cache_key`` so its calls reach the same cache,
and ``usage.prompt_tokens_details.cached_tokens`` says what was read from it.

The adapter decides nothing: retries, fallback and cost belong to the router. Refusals,
content filtering and truncation are answers (``finish_reason`` "refusal",
"content_filter", "length"), not exceptions; transport and HTTP failures are mapped by
``app.providers.transport``::

    adapter = OpenAIAdapter(http, provider="openai", config=provider_config)
    response = await adapter.send(request, model="gpt-4o-mini", spec=model_config,
                                  mechanism="json_schema", timeout_s=30.0)
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from dataclasses import replace
from typing import Any, Final

from app.core.turn.model import (
    Choice,
    FinishReason,
    LLMRequest,
    LLMResponse,
    Logprobs,
    Message,
    StreamTally,
    TextSink,
    ToolCall,
    Usage,
)
from app.providers.adapter import HttpAdapter, reported_model
from app.providers.config import ModelConfig
from app.providers.grammar import bounded_grammar
from app.providers.streaming import malformed
from app.providers.structured import (
    OUTPUT_TOOL,
    OUTPUT_TOOL_DESCRIPTION,
    Capability,
    bound_arrays,
    seam_mode,
    tool_parameters,
    unwrap,
)
from app.providers.transport import Edge

CHAT_PATH: Final = "/chat/completions"
SCHEMA_NAME: Final = "output"
CONTENT_FILTERED: Final = "the provider's content filter stopped the answer"


def request_body(
    request: LLMRequest, *, spec: ModelConfig, mechanism: Capability
) -> tuple[dict[str, Any], bool]:
    """The JSON body for ``request`` and whether the output schema was wrapped ("tool" mode)."""
    max_tokens = request.max_output_tokens
    if spec.max_output_tokens is not None:
        max_tokens = min(max_tokens, spec.max_output_tokens)
    body: dict[str, Any] = {
        "model": spec.name,
        "messages": [
            _message(m) for m in _join_users(_fold_system(request.messages, spec.system_role))
        ],
        spec.max_tokens_field: max_tokens,
    }
    body.update(_sampling(request, spec))
    tools = [_function(t.name, t.description, dict(t.parameters)) for t in request.tools]
    choice = _tool_choice(request)
    wrapped = False
    schema = dict(request.output_schema) if request.output_schema is not None else None
    if schema is not None and mechanism == "tool":
        # The answer is a call of the output tool, beside any work tools: the model must
        # call one of them (the output tool alone when it may not work).
        parameters, wrapped = tool_parameters(schema)
        if request.tool_choice == "none":
            tools = []
        tools.append(_function(OUTPUT_TOOL, OUTPUT_TOOL_DESCRIPTION, parameters))
        if len(tools) == 1:
            choice = {"type": "function", "function": {"name": OUTPUT_TOOL}}
        elif request.forced_tool is None:
            choice = "required"
    elif schema is not None and mechanism != "prompt":
        if mechanism == "json_object_schema" and request.max_items is not None:
            schema = bound_arrays(schema, request.max_items)
        grammar = (
            bounded_grammar(schema) if mechanism == "json_object_schema" and spec.grammar else None
        )
        if grammar is not None:
            body["grammar"] = grammar  # llama.cpp: the schema's grammar, numbers bounded
        else:
            body["response_format"] = _response_format(schema, mechanism, strict=spec.strict)
    if tools:
        body["tools"] = tools
        if choice is not None:
            body["tool_choice"] = choice
    return body, wrapped


def _sampling(request: LLMRequest, spec: ModelConfig) -> dict[str, Any]:
    """The optional fields of the body that say how to sample (and what may be cached)."""
    fields: dict[str, Any] = {}
    if spec.prompt_cache and request.cache_key:
        fields["prompt_cache_key"] = request.cache_key
    if request.temperature is not None:
        fields["temperature"] = request.temperature
    if request.seed is not None:
        fields["seed"] = request.seed
    if request.n > 1:
        fields["n"] = request.n
    if spec.logprobs:
        # top_logprobs too: llama-cpp-python's server returns none without it.
        fields["logprobs"] = True
        fields["top_logprobs"] = 0
    return fields


def _response_format(schema: dict[str, Any], mechanism: Capability, *, strict: bool) -> Any:
    if mechanism == "json_schema":
        return {
            "type": "json_schema",
            "json_schema": {"name": SCHEMA_NAME, "schema": schema, "strict": strict},
        }
    if mechanism == "json_object_schema":
        return {"type": "json_object", "schema": schema}
    return {"type": "json_object"}


def _tool_choice(request: LLMRequest) -> str | dict[str, Any] | None:
    """OpenAI's ``tool_choice`` for the work tools (None: the default, "auto")."""
    if request.forced_tool is not None:
        return {"type": "function", "function": {"name": request.forced_tool}}
    return None if request.tool_choice == "auto" else request.tool_choice


def parse_response(
    body: Mapping[str, Any],
    *,
    model: str,
    provider: str,
    mechanism: Capability,
    wrapped: bool = False,
) -> LLMResponse:
    """Our response for a chat completion body; ``KeyError``/``TypeError`` on nonsense.

    Several choices (a request with ``n``) come back as the first and its alternatives.
    """
    choices = body["choices"]
    first, *others = (_choice(c, mechanism=mechanism, wrapped=wrapped) for c in choices)
    return LLMResponse(
        content=first.content,
        finish_reason=first.finish_reason,
        model=model,
        provider=provider,
        usage=_usage(body.get("usage")),
        tool_calls=first.tool_calls,
        refusal=first.refusal,
        structured_mode=seam_mode(mechanism),
        alternatives=tuple(others),
        response_model=reported_model(body),
        logprobs=first.logprobs,
    )


def _choice(choice: Mapping[str, Any], *, mechanism: Capability, wrapped: bool) -> Choice:
    message = choice.get("message") or {}
    content = message.get("content")
    if content is not None and not isinstance(content, str):
        # Some servers return content parts; the text parts are the answer.
        content = "".join(part.get("text", "") for part in content if isinstance(part, dict))
    refusal = message.get("refusal") or None
    calls = [_tool_call(i, raw) for i, raw in enumerate(message.get("tool_calls") or [])]
    if mechanism == "tool":
        answer = next((c for c in calls if c.name == OUTPUT_TOOL), None)
        if answer is not None:
            calls.remove(answer)
            content = _unwrapped(answer.arguments, wrapped)
    finish = choice.get("finish_reason")
    reason: FinishReason
    if refusal:
        reason = "refusal"
    elif finish == "content_filter":
        reason, refusal = "content_filter", CONTENT_FILTERED
    elif finish == "length":
        reason = "length"
    elif calls:
        reason = "tool_calls"
    else:
        reason = "stop"
    return Choice(
        content=content,
        finish_reason=reason,
        tool_calls=tuple(calls),
        refusal=refusal,
        logprobs=None if mechanism == "tool" else token_logprobs(choice.get("logprobs")),
    )


# More tokens than an answer can have are not read (the answer itself is bounded the same way).
MAX_LOGPROB_TOKENS: Final = 65_536


def token_logprobs(raw: Any) -> Logprobs | None:
    """``choices[i].logprobs.content`` as ``(token, logprob)`` pairs; ``None`` when absent or
    not well-formed (a hostile or odd server's logprobs are dropped, never trusted)."""
    content = raw.get("content") if isinstance(raw, Mapping) else None
    if not isinstance(content, list) or not content or len(content) > MAX_LOGPROB_TOKENS:
        return None
    pairs: list[tuple[str, float]] = []
    for item in content:
        token = item.get("token") if isinstance(item, Mapping) else None
        value = item.get("logprob") if isinstance(item, Mapping) else None
        if not isinstance(token, str) or isinstance(value, bool):
            return None
        if not isinstance(value, int | float) or not math.isfinite(value) or value > 0:
            return None
        pairs.append((token, float(value)))
    return tuple(pairs)


def _fold_system(messages: tuple[Message, ...], system_role: bool) -> tuple[Message, ...]:
    if system_role:
        return messages
    system = "\n\n".join(m.content for m in messages if m.role == "system")
    rest = [m for m in messages if m.role != "system"]
    if not system:
        return tuple(rest)
    if rest and rest[0].role == "user":
        rest[0] = replace(rest[0], content=f"{system}\n\n{rest[0].content}")
    else:
        rest.insert(0, Message("user", system))
    return tuple(rest)


def _join_users(messages: tuple[Message, ...]) -> tuple[Message, ...]:
    """Consecutive user messages as one: chat templates such as Gemma's expect alternation."""
    out: list[Message] = []
    for m in messages:
        last = out[-1] if out else None
        if last is not None and m.role == last.role == "user" and not (m.name or last.name):
            out[-1] = replace(
                last, content=f"{last.content}\n\n{m.content}", images=last.images + m.images
            )
        else:
            out.append(m)
    return tuple(out)


def _message(m: Message) -> dict[str, Any]:
    if m.role == "tool":
        return {"role": "tool", "tool_call_id": m.tool_call_id or "", "content": m.content}
    out: dict[str, Any] = {"role": m.role, "content": m.content}
    if m.images:  # content parts: the text, then each image as a data URL
        out["content"] = [
            *([{"type": "text", "text": m.content}] if m.content else []),
            *(
                {"type": "image_url", "image_url": {"url": f"data:{i.media_type};base64,{i.data}"}}
                for i in m.images
            ),
        ]
    if m.name:
        out["name"] = m.name
    if m.role == "assistant" and m.tool_calls:
        out["content"] = m.content or None
        out["tool_calls"] = [
            {"id": c.id, "type": "function", "function": {"name": c.name, "arguments": c.arguments}}
            for c in m.tool_calls
        ]
    return out


def _function(name: str, description: str, parameters: dict[str, Any]) -> dict[str, Any]:
    return {
        "type": "function",
        "function": {"name": name, "description": description, "parameters": parameters},
    }


def _tool_call(index: int, raw: Mapping[str, Any]) -> ToolCall:
    function = raw["function"]
    arguments = function.get("arguments")
    if arguments is None:
        arguments = "{}"
    elif not isinstance(arguments, str):
        # Ollama sends the arguments as an object rather than JSON text.
        arguments = json.dumps(arguments)
    return ToolCall(
        id=str(raw.get("id") or f"call_{index}"), name=function["name"], arguments=arguments
    )


def _unwrapped(arguments: str, wrapped: bool) -> str:
    if not wrapped:
        return arguments
    try:
        return json.dumps(unwrap(json.loads(arguments), wrapped))
    except ValueError:
        return arguments  # truncated or broken: the loop's repair sees it as sent


def _usage(raw: Any) -> Usage | None:
    """``prompt_tokens`` counts the cached ones too (``prompt_tokens_details``)."""
    if not isinstance(raw, Mapping):
        return None
    details = raw.get("prompt_tokens_details")
    cached = details.get("cached_tokens") if isinstance(details, Mapping) else None
    prompt = max(int(raw.get("prompt_tokens") or 0), 0)
    return Usage(
        input_tokens=prompt,
        output_tokens=int(raw.get("completion_tokens") or 0),
        # A server's word, bounded: never more than the prompt, never negative.
        cached_input_tokens=min(max(int(cached or 0), 0), prompt),
    )


class ChunkReader:
    """A streamed chat completion (``chat.completion.chunk`` events, ``[DONE]`` last) read
    into the body the provider would have sent whole; the first choice's answer text (its
    content, or the output tool's arguments when that is how the answer comes) goes to
    ``sink`` as it arrives. Usage comes in the last chunk (``stream_options.include_usage``).
    """

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
        self.edge = edge
        # The answer is the output tool's arguments, streamed as they are when not wrapped.
        self.tool_answer = mechanism == "tool"
        self.wrapped = wrapped
        self.content: list[str] = []
        self.refusal: list[str] = []
        self.calls: dict[int, dict[str, Any]] = {}
        self.finish: str | None = None
        self.usage: Any = None
        self.model: Any = None
        self.whole: dict[str, Any] | None = None

    def event(self, name: str | None, data: str) -> None:
        if data == "[DONE]":
            return
        try:
            chunk = json.loads(data)
        except ValueError:
            raise malformed(self.edge, "an event that is not JSON") from None
        if not isinstance(chunk, dict):
            raise malformed(self.edge, "an event that is not a JSON object")
        if name == "whole":  # the server answered whole
            self.whole = chunk
            return
        if "error" in chunk:
            raise malformed(self.edge, f"an error: {self.edge.scrub(str(chunk['error']))[:300]}")
        self.model = chunk.get("model") or self.model
        if isinstance(chunk.get("usage"), Mapping):
            self.usage = chunk["usage"]
        for choice in chunk.get("choices") or ():
            if not isinstance(choice, Mapping) or choice.get("index", 0) != 0:
                continue
            self._delta(choice.get("delta") or {})
            if choice.get("finish_reason"):
                self.finish = str(choice["finish_reason"])

    def _delta(self, delta: Mapping[str, Any]) -> None:
        text = delta.get("content")
        if isinstance(text, str) and text:
            self.tally.output_tokens += 1  # a chunk of output: a token, on most servers
            self.content.append(text)
            if not self.tool_answer:
                self.sink.text(text)
        refusal = delta.get("refusal")
        if isinstance(refusal, str) and refusal:
            self.tally.output_tokens += 1
            self.refusal.append(refusal)
        for raw in delta.get("tool_calls") or ():
            index = int(raw.get("index", 0))
            call = self.calls.setdefault(index, {"id": None, "name": "", "arguments": []})
            if raw.get("id"):
                call["id"] = raw["id"]
            function = raw.get("function") or {}
            if function.get("name"):
                call["name"] = function["name"]
            arguments = function.get("arguments")
            if isinstance(arguments, str) and arguments:
                self.tally.output_tokens += 1
                call["arguments"].append(arguments)
                if self.tool_answer and not self.wrapped and call["name"] == OUTPUT_TOOL:
                    self.sink.text(arguments)

    def body(self) -> Mapping[str, Any]:
        if self.whole is not None:
            return self.whole
        message: dict[str, Any] = {
            "content": "".join(self.content) if self.content else None,
            "refusal": "".join(self.refusal) or None,
        }
        if self.calls:
            message["tool_calls"] = [
                {
                    "id": call["id"],
                    "type": "function",
                    "function": {"name": call["name"], "arguments": "".join(call["arguments"])},
                }
                for _, call in sorted(self.calls.items())
            ]
        body: dict[str, Any] = {
            "choices": [{"index": 0, "message": message, "finish_reason": self.finish}],
            "usage": self.usage,
        }
        if self.model is not None:
            body["model"] = self.model
        return body


class OpenAIAdapter(HttpAdapter):
    """Speaks ``POST {base_url}/chat/completions`` with a bearer key (when one is set)."""

    path = CHAT_PATH
    noun = "chat completion"
    supports_n = True  # several choices in one call (``n``)

    def auth_headers(self, key: str) -> dict[str, str]:
        return {"authorization": f"Bearer {key}"}

    request_body = staticmethod(request_body)
    parse_response = staticmethod(parse_response)

    stream_reader = ChunkReader

    def streaming_body(self, body: dict[str, Any]) -> dict[str, Any]:
        # The usage comes in a last chunk of its own: cost from the stream, exact.
        return {**body, "stream": True, "stream_options": {"include_usage": True}}
