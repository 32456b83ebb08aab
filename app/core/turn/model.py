"""The seam between the turn loop and the providers: wire-neutral request and response.

The loop builds an ``LLMRequest`` and awaits ``ModelClient.complete``; an adapter
translates it to its wire format and back, or raises a ``ProviderError``::

    response = await client.complete(LLMRequest(messages=(Message("user", "hi"),)))
    response.content, response.finish_reason, response.usage
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from typing import Any, Literal, Protocol, runtime_checkable

Role = Literal["system", "user", "assistant", "tool"]
FinishReason = Literal["stop", "length", "tool_calls", "refusal", "content_filter"]
StructuredOutput = Literal["auto", "native", "prompt"]
# What a client actually does for a model when asked for structured output.
StructuredMode = Literal["json_schema", "json_object", "tool", "prompt"]
# How prompts are written for a model: everything spelled out, or the short form small
# models need (app.core.turn.prompting).
PromptProfile = Literal["full", "compact"]
# Whether the model may call the offered tools: as it likes, never, or it must call one.
ToolChoiceMode = Literal["auto", "none", "required"]


@dataclass(frozen=True, slots=True)
class ToolCall:
    """A function call the model asked for. ``arguments`` is the raw JSON text it sent."""

    id: str
    name: str
    arguments: str


@dataclass(frozen=True, slots=True)
class Image:
    """An image the model sees with a message: its type and its bytes as base64."""

    media_type: str
    data: str = field(repr=False)


@dataclass(frozen=True, slots=True)
class Message:
    role: Role
    content: str
    tool_calls: tuple[ToolCall, ...] = ()
    tool_call_id: str | None = None
    name: str | None = None
    images: tuple[Image, ...] = ()  # a user message's images, after its text


@dataclass(frozen=True, slots=True)
class ToolSpec:
    """A tool offered to the model on normal (work) turns. ``parameters`` is a JSON Schema."""

    name: str
    description: str
    parameters: Mapping[str, Any]


@dataclass(frozen=True, slots=True)
class Usage:
    """Tokens of one call.

    ``input_tokens`` counts every prompt token, cache reads and writes included: OpenAI's
    ``prompt_tokens``, Anthropic's ``input_tokens + cache_read_input_tokens +
    cache_creation_input_tokens``.
    """

    input_tokens: int
    output_tokens: int
    cached_input_tokens: int = 0
    cache_write_tokens: int = 0

    @property
    def total(self) -> int:
        return self.input_tokens + self.output_tokens


@dataclass(slots=True)
class StreamTally:
    """What one streamed attempt at a call has used so far, as its adapter counts it: kept
    for a call closed before its end (a cancel), whose usage never came.

    ``output_tokens``: the chunks of output received (a token each on most servers), or
    the provider's own running count when larger; ``input_tokens``: the prompt's tokens
    when the wire reports them at the stream's start (Anthropic's ``message_start``).
    """

    provider: str
    model: str  # the configured model that streams
    output_tokens: int = 0
    input_tokens: int | None = None
    cached_input_tokens: int = 0
    cache_write_tokens: int = 0


class TextSink(Protocol):
    """Where a streaming adapter sends the answer's text as it arrives (``LLMRequest.stream``)."""

    def restart(self, provider: str, model: str) -> StreamTally:
        """A new attempt at the call begins (a transport retry, a fallback model): what
        came before does not stand. The adapter counts this attempt in the tally."""
        ...

    def text(self, delta: str) -> None:
        """The next piece of the answer's text."""
        ...


@dataclass(frozen=True, slots=True)
class LLMRequest:
    """One model call; ``model`` None means the client's default.

    ``structured_output`` says whether an adapter may ("auto"), must ("native") or must
    not ("prompt") constrain decoding to ``output_schema``. ``timeout_s`` bounds the whole
    call, transport retries included. Every later call repeats the first ``cache_prefix``
    messages unchanged: an adapter may mark them for the provider's prompt cache.
    """

    messages: tuple[Message, ...]
    model: str | None = None
    tools: tuple[ToolSpec, ...] = ()
    tool_choice: ToolChoiceMode = "auto"
    forced_tool: str | None = None
    max_output_tokens: int = 1024
    temperature: float | None = None
    seed: int | None = None
    output_schema: Mapping[str, Any] | None = None
    structured_output: StructuredOutput = "auto"
    timeout_s: float | None = None
    # Best-of-N: how many answers to give (one call with ``n`` where the wire has it, else
    # ``n`` calls); they come back as the response and its ``alternatives``.
    n: int = 1
    cache_prefix: int = 0
    cache_key: str | None = None
    # After an answer ran away in a list (``app.core.answer.runaway``): a grammar that compiles the
    # schema (llama.cpp's) bounds its unbounded arrays to this many items. The answer is
    # still checked against the job's schema; other mechanisms ignore it.
    max_items: int | None = None
    # Set when the answer is to stream: an adapter that can stream sends its text here as
    # it arrives (one answer only: ``n`` is 1); one that cannot answers whole, as always.
    stream: TextSink | None = field(default=None, compare=False, repr=False)


@dataclass(frozen=True, slots=True)
class Choice:
    """One more answer of a call that asked for several (``LLMRequest.n``)."""

    content: str | None
    finish_reason: FinishReason
    tool_calls: tuple[ToolCall, ...] = ()
    refusal: str | None = None
    logprobs: Logprobs | None = None


# The answer's tokens with their log-probabilities, as the provider returned them.
Logprobs = tuple[tuple[str, float], ...]


@dataclass(frozen=True, slots=True)
class LLMResponse:
    """What came back from one call.

    ``cost_usd`` is ``None`` when the model has no known price. ``model`` is the configured
    model that answered; ``response_model`` the one the provider says it ran.
    """

    content: str | None
    finish_reason: FinishReason
    model: str
    provider: str
    usage: Usage | None = None
    tool_calls: tuple[ToolCall, ...] = ()
    refusal: str | None = None
    cost_usd: float | None = None
    structured_mode: StructuredMode = "prompt"
    transport_retries: int = 0
    transport_wait_ms: int = 0
    latency_ms: int = 0
    warnings: tuple[str, ...] = field(default_factory=tuple)
    response_model: str | None = None
    # The other answers when several were asked for, in order; ``usage`` and ``cost_usd``
    # count them all.
    alternatives: tuple[Choice, ...] = ()
    logprobs: Logprobs | None = None  # where the provider was asked for them and gave them

    def settled(
        self,
        *,
        cost_usd: float | None,
        warnings: tuple[str, ...],
        transport_retries: int,
        transport_wait_ms: int,
        latency_ms: int,
    ) -> LLMResponse:
        """``dataclasses.replace`` of what the router adds once a call is answered.

        Its price, notes and totals, without ``replace``'s look at every field.
        """
        return LLMResponse(
            self.content,
            self.finish_reason,
            self.model,
            self.provider,
            self.usage,
            self.tool_calls,
            self.refusal,
            cost_usd,
            self.structured_mode,
            transport_retries,
            transport_wait_ms,
            latency_ms,
            warnings,
            self.response_model,
            self.alternatives,
            self.logprobs,
        )

    @property
    def choices(self) -> tuple[LLMResponse, ...]:
        """Every answer of the call as a response of its own (the first is this one)."""
        return (
            self,
            *(
                replace(
                    self,
                    content=c.content,
                    finish_reason=c.finish_reason,
                    tool_calls=c.tool_calls,
                    refusal=c.refusal,
                    logprobs=c.logprobs,
                    alternatives=(),
                )
                for c in self.alternatives
            ),
        )


class ModelClient(Protocol):
    """Anything that can answer an ``LLMRequest``: a provider router, a fake, a script."""

    async def complete(self, request: LLMRequest) -> LLMResponse:
        """Answer, or raise ``app.core.wire.errors.ProviderError`` (already classified)."""
        ...

    def structured_mode(self, model: str | None, requested: StructuredOutput) -> StructuredMode:
        """How ``model`` will honour ``output_schema`` under ``requested``."""
        ...

    def estimate_cost(
        self, model: str | None, input_tokens: int, output_tokens: int
    ) -> float | None:
        """Upper-bound USD for a call of that size, ``None`` when the price is unknown."""
        ...


@dataclass(frozen=True, slots=True)
class PromptStyle:
    """How to write the prompt for a model: its ``profile``, and whether the provider
    constrains decoding to the output schema (then the prompt need not spell it out)."""

    profile: PromptProfile = "full"
    schema_enforced: bool = False


@runtime_checkable
class StyledClient(Protocol):
    """A ``ModelClient`` that knows how each model likes its prompts (the router does);
    a client without it gets the full profile."""

    def prompt_style(self, model: str | None, requested: StructuredOutput) -> PromptStyle:
        """The prompt style for ``model`` (a route: compact only if all its models are)."""
        ...
