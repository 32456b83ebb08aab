"""A chat completions request as the OpenAI SDKs send it, bounded, and reprompt's options.

    request = ChatRequest.model_validate_json(body)     # ValidationError names the field
    request.reprompt.return_retries, request.ignored     # the extension; fields not used

Fields the service does not use are accepted and listed in ``ignored`` (the route names
them in a warning header); fields it cannot honour are refused (``refusal``).
"""

from __future__ import annotations

from typing import Any, Final, Literal

from pydantic import BaseModel, ConfigDict, Field, StrictBool, StrictFloat, StrictInt, StrictStr
from pydantic.alias_generators import to_camel

from app.core.wire.spec import TOOL_NAME, CandidatesSpec, RetryMode, ValidatorSpec

MAX_MESSAGES: Final = 256
MAX_PARTS: Final = 64
MAX_TOOLS: Final = 32
MAX_TOOL_CALLS: Final = 32
MAX_NAME: Final = 64
# Text is capped again as the job's task and input (REPROMPT_MAX_TASK_CHARS, _INPUT_BYTES);
# this only keeps one field from holding the whole body.
MAX_TEXT: Final = 1_000_000
MAX_ARGUMENTS: Final = 100_000
# Fields of OpenAI's request the service reads; every other one is ignored, and named.
# (``stream_options`` only with ``stream``.)
USED: Final = frozenset(
    {
        "model",
        "messages",
        "response_format",
        "tools",
        "tool_choice",
        "max_tokens",
        "max_completion_tokens",
        "temperature",
        "seed",
        "n",
        "stream",
        "stream_options",
        "metadata",
        "user",
        "reprompt",
    }
)


class _OpenAI(BaseModel):
    """OpenAI's snake_case shapes; unknown keys of nested objects are ignored, as OpenAI's
    SDK types add fields release after release."""

    model_config = ConfigDict(extra="ignore", frozen=True)


class TextPart(_OpenAI):
    type: Literal["text"]
    text: StrictStr = Field(max_length=MAX_TEXT)


class ImageUrl(_OpenAI):
    url: StrictStr = Field(max_length=MAX_TEXT)
    detail: StrictStr | None = Field(default=None, max_length=16)


class ImagePart(_OpenAI):
    type: Literal["image_url"]
    image_url: ImageUrl


class OtherPart(_OpenAI):
    """A part of a kind the service refuses (audio, files): named in the 400."""

    type: Literal["input_audio", "file", "refusal"]


Part = TextPart | ImagePart | OtherPart
Content = StrictStr | list[Part]


class FunctionCall(_OpenAI):
    name: StrictStr = Field(max_length=MAX_NAME)
    arguments: StrictStr = Field(max_length=MAX_ARGUMENTS)


class ToolCallIn(_OpenAI):
    id: StrictStr = Field(min_length=1, max_length=MAX_NAME * 4)
    type: Literal["function"] = "function"
    function: FunctionCall


class ChatMessage(_OpenAI):
    role: Literal["system", "developer", "user", "assistant", "tool"]
    content: Content | None = Field(default=None)
    name: StrictStr | None = Field(default=None, max_length=MAX_NAME)
    tool_calls: list[ToolCallIn] | None = Field(default=None, max_length=MAX_TOOL_CALLS)
    tool_call_id: StrictStr | None = Field(default=None, max_length=MAX_NAME * 4)


class JsonSchemaFormat(_OpenAI):
    name: StrictStr = Field(min_length=1, max_length=MAX_NAME)
    description: StrictStr | None = Field(default=None, max_length=2000)
    schema_: dict[str, Any] = Field(default_factory=dict, alias="schema")
    strict: StrictBool | None = None


class ResponseFormat(_OpenAI):
    type: Literal["text", "json_object", "json_schema"]
    json_schema: JsonSchemaFormat | None = None


class FunctionDef(_OpenAI):
    name: StrictStr = Field(pattern=TOOL_NAME)
    description: StrictStr = Field(default="", max_length=2000)
    parameters: dict[str, Any] = Field(default_factory=lambda: {"type": "object"})
    strict: StrictBool | None = None


class ToolIn(_OpenAI):
    type: Literal["function"]
    function: FunctionDef


class NamedFunction(_OpenAI):
    name: StrictStr = Field(pattern=TOOL_NAME)


class NamedToolChoice(_OpenAI):
    type: Literal["function"]
    function: NamedFunction


class StreamOptions(_OpenAI):
    include_usage: StrictBool = False


class RepromptOptions(BaseModel):
    """reprompt's own options, sent as ``reprompt`` in the body (``extra_body`` in the
    SDKs). camelCase as in ``POST /v1/jobs``; snake_case accepted."""

    model_config = ConfigDict(
        alias_generator=to_camel, populate_by_name=True, extra="forbid", frozen=True
    )

    max_turns: StrictInt | None = Field(default=None, ge=1, le=50)
    return_retries: StrictInt | None = Field(default=None, ge=0, le=20)
    max_cost_usd: StrictFloat | StrictInt | None = Field(default=None, gt=0)
    max_tokens: StrictInt | None = Field(default=None, ge=1)
    deadline_ms: StrictInt | None = Field(default=None, ge=1)
    validators: list[ValidatorSpec] = Field(default_factory=list, max_length=32)
    retry_mode: RetryMode | None = None
    candidates: CandidatesSpec | StrictInt | None = None
    purify: StrictBool | None = None
    strict: StrictBool | None = Field(
        default=None, description="No repairs: the model's JSON must be right as sent."
    )


class ChatRequest(_OpenAI):
    """``POST /v1/chat/completions``'s body. ``model_extra`` holds the fields not used."""

    model_config = ConfigDict(extra="allow", frozen=True)

    model: StrictStr = Field(min_length=1, max_length=200)
    messages: list[ChatMessage] = Field(min_length=1, max_length=MAX_MESSAGES)
    response_format: ResponseFormat | None = None
    tools: list[ToolIn] | None = Field(default=None, max_length=MAX_TOOLS)
    tool_choice: Literal["auto", "none", "required"] | NamedToolChoice | None = None
    max_tokens: StrictInt | None = Field(default=None, ge=1)
    max_completion_tokens: StrictInt | None = Field(default=None, ge=1)
    temperature: StrictFloat | StrictInt | None = Field(default=None, ge=0, le=2)
    seed: StrictInt | None = None
    n: StrictInt | None = Field(default=None, ge=1, le=128)
    stream: StrictBool | None = None
    stream_options: StreamOptions | None = None
    metadata: dict[str, StrictStr] | None = Field(default=None, max_length=16)
    user: StrictStr | None = Field(default=None, max_length=256)
    reprompt: RepromptOptions = Field(default_factory=RepromptOptions)

    @property
    def ignored(self) -> list[str]:
        """The fields sent that the service does not use (sorted, at most 16 named)."""
        return sorted(self.model_extra or {})[:16]

    @property
    def output_tokens(self) -> int | None:
        return self.max_completion_tokens or self.max_tokens

    @property
    def structured(self) -> bool:
        """Whether the answer is a job's validated JSON (a JSON response format)."""
        return self.response_format is not None and self.response_format.type != "text"
