"""What a client asks for: the job specification, validated once, camelCase on the wire.

spec = JobSpec.model_validate({"task": "...", "signature": "{x :int}",
                               "budget": {"maxTurns": 1, "returnRetries": 2}})
spec.output_schema()   # the JSON Schema every answer is checked against
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Final, Literal, TypeVar, cast

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    StrictBool,
    StrictFloat,
    StrictInt,
    StrictStr,
    field_validator,
    model_validator,
)
from pydantic.alias_generators import to_camel
from pydantic_core import SchemaValidator

from app.core.schema.validation import json_path
from app.core.text.unicode import escaped, surrogate_at, surrogate_path
from app.core.turn.model import StructuredOutput
from app.core.wire.image import ImageSpec

FeedbackMode = Literal["collapsed", "full"]
# How a rejected answer is asked for again: whole, only its failing fields, or either.
RetryMode = Literal["whole", "patch", "auto"]
CandidatesOn = Literal["all", "final"]
# The hard bound of best-of-N; the service's cap (REPROMPT_MAX_CANDIDATES) may be lower.
MAX_CANDIDATES = 16


_SCALARS = frozenset({type(None), bool, int, float})


def valid_unicode(value: Any) -> Any:
    """``value``, or a ``ValueError`` saying where it holds an unpaired surrogate: JSON's
    "\ud800" escape gives Python text that no UTF-8 store or engine takes."""
    # Every field of every model comes through here: numbers, flags, ASCII text and empty
    # lists and objects (most of them) leave at once, without the walk.
    kind = type(value)
    if kind in _SCALARS:
        return value
    if kind is str:
        if value.isascii() or surrogate_at(value) is None:
            return value
    elif (kind is dict or kind is list) and not value:
        return value
    path = surrogate_path(value)
    if path is not None:
        where = f" at {escaped(json_path(path))}" if path else ""
        raise ValueError(f"holds an unpaired UTF-16 surrogate{where}; text must be valid Unicode")
    return value


class _Wire(BaseModel):
    model_config = ConfigDict(
        alias_generator=to_camel, populate_by_name=True, extra="forbid", frozen=True
    )

    @field_validator("*", mode="before")
    @classmethod
    def _valid_unicode(cls, value: Any) -> Any:
        # The commonest values (numbers, flags, ASCII text) without a second call.
        kind = type(value)
        if kind in _SCALARS or (kind is str and value.isascii()):
            return value
        return valid_unicode(value)


class Budget(_Wire):
    """Spec 000's unified budget plus the resource limits checked before every call.

    Worst case, a job makes ``max_turns + return_retries`` model calls.
    """

    max_turns: StrictInt = Field(
        default=3, ge=1, le=50, description="Work turns; the last one is must-return."
    )
    return_retries: StrictInt = Field(
        default=0, ge=0, le=20, description="Extra correction turns once work turns are spent."
    )
    max_cost_usd: StrictFloat | StrictInt | None = Field(
        default=None, gt=0, description="Stop before a call that could push cost past this."
    )
    max_tokens: StrictInt | None = Field(
        default=None, ge=1, description="Stop before a call that could push tokens past this."
    )
    deadline_ms: StrictInt | None = Field(
        default=None, ge=1, description="Wall-clock budget for the whole job."
    )

    @property
    def max_calls(self) -> int:
        return self.max_turns + self.return_retries


class FallbackSpec(_Wire):
    """Data returned (with a warning) when every attempt fails. Checked against the schema."""

    data: Any


class PassIf(_Wire):
    """When a judge's grade passes: a score of at least ``min_score`` (1–5)."""

    min_score: StrictInt = Field(ge=1, le=5)


class ValidatorSpec(_Wire):
    """A declarative semantic check run after the schema passes (see app.core.answer.validators)."""

    kind: Literal["sum", "unique", "compare", "regex", "nonempty", "grounded", "webhook", "judge"]
    path: StrictStr | None = None
    items: StrictStr | None = None
    equals: StrictStr | None = None
    left: StrictStr | None = None
    op: Literal["==", "!=", "<", "<=", ">", ">="] | None = None
    right: StrictStr | None = None
    pattern: StrictStr | None = None
    tolerance: StrictFloat | StrictInt = 1e-6
    message: StrictStr | None = Field(default=None, max_length=500)
    # webhook: the URL the worker POSTs the candidate to (signed), and its timeout.
    url: StrictStr | None = Field(default=None, max_length=2048)
    timeout_ms: StrictInt | None = Field(default=None, ge=100, le=60_000)
    # judge: the configured model (or route) that grades, the rubric, and what passes.
    model: StrictStr | None = Field(default=None, max_length=200)
    rubric: StrictStr | None = Field(default=None, min_length=1, max_length=4000)
    pass_if: PassIf | None = Field(
        default=None, description="judge: a minimum score; unset: the judge's own pass/fail."
    )
    # grounded (app.core.answer.grounding): the values at ``paths`` must be found in the input
    paths: list[StrictStr] | None = Field(default=None, min_length=1, max_length=32)
    mode: Literal["exact", "normalized", "fuzzy"] | None = None
    threshold: StrictFloat | StrictInt | None = Field(default=None, gt=0, le=1)
    numbers: StrictBool = False


# A tool name as every provider accepts it (OpenAI: ^[a-zA-Z0-9_-]{1,64}$; Anthropic the same).
TOOL_NAME = r"^[A-Za-z][A-Za-z0-9_-]{0,63}$"
# Names the service uses itself: the forced output tool of structured output.
RESERVED_TOOL_NAMES = frozenset({"final_answer"})
ToolTimeoutMode = Literal["fail", "must_return"]


class ToolDef(_Wire):
    """A tool the model may call on work turns (spec 000).

    Without ``url`` the client runs it: the job pauses in ``requires_action`` until the
    client posts the outputs. With ``url`` the service POSTs the arguments there (signed,
    through the outbound guard) and gives the model the answer.
    """

    name: StrictStr = Field(pattern=TOOL_NAME, description="Unique in the job.")
    description: StrictStr = Field(default="", max_length=2000)
    parameters: dict[str, Any] = Field(
        default_factory=lambda: {"type": "object"},
        description="JSON Schema of the arguments (an object), checked before the call.",
    )
    url: StrictStr | None = Field(
        default=None, max_length=2048, description="HTTPS endpoint the service calls."
    )
    headers: dict[str, StrictStr] = Field(
        default_factory=dict,
        max_length=16,
        description="Extra headers for an HTTP tool; values may name a tenant secret "
        "as {{secret:NAME}}.",
    )
    timeout_ms: StrictInt | None = Field(
        default=None, ge=100, le=60_000, description="Per-call timeout of an HTTP tool."
    )

    @model_validator(mode="after")
    def _http_only(self) -> ToolDef:
        if self.url is None and (self.headers or self.timeout_ms is not None):
            raise ValueError("headers and timeoutMs apply only to a tool with a url")
        return self

    @property
    def client_side(self) -> bool:
        return self.url is None


class ToolChoiceName(_Wire):
    """Force one tool (on normal work turns)."""

    name: StrictStr = Field(pattern=TOOL_NAME)


ToolChoice = Literal["auto", "none", "required"] | ToolChoiceName


class CandidatesSpec(_Wire):
    """Best-of-N: ask for ``n`` answers a call, keep the first valid one.

    N calls where the provider has no ``n``. ``on``: every call, or only the final attempt
    (the last possible call, after a rejection).
    """

    n: StrictInt = Field(ge=1, le=MAX_CANDIDATES, description="Answers asked for per call.")
    on: CandidatesOn = Field(
        default="all", description="all: every call; final: only the final attempt."
    )


_E = TypeVar("_E")


def listed_once(events: list[_E]) -> list[_E]:
    """``events`` when none stands twice (a validator of the callback specs' ``events``)."""
    for event in events:
        if events.count(event) > 1:
            raise ValueError(f"the event {event!r} is listed twice")
    return events


CallbackEvent = Literal["succeeded", "failed", "cancelled", "requires_action"]
CALLBACK_EVENTS: tuple[CallbackEvent, ...] = ("succeeded", "failed", "cancelled", "requires_action")
TERMINAL_EVENTS: tuple[CallbackEvent, ...] = ("succeeded", "failed", "cancelled")


class CallbackSpec(_Wire):
    """Where the service POSTs the job, signed, when it reaches one of ``events``
    (docs/callbacks.md): at least once, retried for the service's retry window."""

    url: StrictStr = Field(max_length=2048, description="HTTPS endpoint the service calls.")
    events: list[CallbackEvent] = Field(
        default_factory=lambda: list(TERMINAL_EVENTS),
        min_length=1,
        max_length=len(CALLBACK_EVENTS),
        description="The states that are sent (default: the three terminal ones).",
    )

    _once_each = field_validator("events")(listed_once)


class ChecksSpec(_Wire):
    """The service's default checks of an answer (docs/validators.md#plausibility-checks)."""

    # On by default: on the embedded gemma-3 270M (bench/plausibility.py, 80 tasks) they
    # take the share correct from 53.8 % to 66.2 % (docs/benchmarks/real-model.md).
    plausibility: StrictBool = Field(
        default=True,
        description="With an input: reject numbers the input never states that carry more "
        "digits than any number in it (trim one that is an input number with more decimals "
        "run on back to it), and strings that copy the prompt's own text.",
    )


class JobSpec(_Wire):
    """A generation job: a task, the shape of the answer, a budget and options."""

    task: StrictStr = Field(min_length=1, description="What the model must do.")
    input: Any = Field(default=None, description="Data for the task, shown to the model as JSON.")
    signature: StrictStr | None = Field(
        default=None, description='Compact output signature, e.g. "{name :string, age :int}".'
    )
    schema_: dict[str, Any] | None = Field(
        default=None, alias="schema", description="A JSON Schema (2020-12) instead of a signature."
    )
    budget: Budget = Field(default_factory=Budget)
    model: StrictStr | None = Field(default=None, description="A configured model or route.")
    escalate_model: StrictStr | None = Field(
        default=None, description="Model for must-return and retry turns after a rejected answer."
    )
    escalate_after: StrictInt = Field(default=1, ge=0, le=50)
    validators: list[ValidatorSpec] = Field(default_factory=list, max_length=32)
    purify: StrictBool = Field(default=False, description="Return only the clean exchange.")
    simplify_on_final_attempt: StrictBool = False
    fallback: FallbackSpec | None = None
    retry_prompt: StrictStr | None = Field(
        default=None, max_length=20_000, description="Mustache template for correction messages."
    )
    strict: StrictBool = Field(default=False, description="No repairs: the JSON must be right.")
    feedback: FeedbackMode = "collapsed"
    retry_mode: RetryMode = Field(
        default="auto",
        description="whole: re-ask for the whole answer; patch: for only its failing fields "
        "when they are known; auto: patch when they leave part of the answer untouched.",
    )
    candidates: CandidatesSpec | None = Field(
        default=None,
        description='Best-of-N, e.g. {"n": 3, "on": "final"}; a bare number N means '
        '{"n": N, "on": "all"}.',
    )
    structured_output: StructuredOutput = "auto"
    include_example: StrictBool = True
    max_output_tokens: StrictInt = Field(default=1024, ge=16, le=200_000)
    max_output_tokens_cap: StrictInt | None = Field(
        default=None, ge=16, le=200_000, description="Ceiling when a truncated answer is re-asked."
    )
    temperature: StrictFloat | StrictInt | None = Field(default=None, ge=0, le=2)
    seed: StrictInt | None = None
    plan: list[StrictStr] | None = Field(default=None, max_length=50)
    tools: list[ToolDef] = Field(
        default_factory=list, max_length=32, description="Tools offered on work turns."
    )
    tool_choice: ToolChoice = Field(
        default="auto", description="auto | none | required | {name}: on normal work turns."
    )
    tool_timeout_ms: StrictInt | None = Field(
        default=None,
        ge=1000,
        description="How long a requires_action pause waits for the outputs "
        "(default: the service's REPROMPT_TOOL_TIMEOUT_MS).",
    )
    on_tool_timeout: ToolTimeoutMode = Field(
        default="fail",
        description="fail: the job fails tool-timeout; must_return: it goes on without "
        "the outputs, on a must-return turn.",
    )
    metadata: dict[str, StrictStr] = Field(default_factory=dict, max_length=64)
    images: list[ImageSpec] = Field(
        default_factory=list,
        max_length=64,
        description="Images the model sees with the task, in order (#34); at most "
        "REPROMPT_MAX_IMAGES, each REPROMPT_MAX_IMAGE_BYTES, REPROMPT_MAX_IMAGES_BYTES in all.",
    )
    stream: StrictBool = Field(
        default=False,
        description="Stream the answer as it is written: partial events (complete, checked "
        "values only) on the job's events and on /v1/generate.",
    )
    callback: CallbackSpec | None = Field(
        default=None, description="POST the job to a URL when it ends (or pauses), signed."
    )
    checks: ChecksSpec = Field(
        default_factory=ChecksSpec,
        description='Default checks, e.g. {"plausibility": false} to turn them off.',
    )

    @model_validator(mode="after")
    def _one_shape(self) -> JobSpec:
        if self.signature is None and self.schema_ is None:
            raise ValueError("give either 'signature' or 'schema'")
        if self.signature is not None and self.schema_ is not None:
            raise ValueError("give 'signature' or 'schema', not both")
        cap = self.max_output_tokens_cap
        if cap is not None and cap < self.max_output_tokens:
            raise ValueError("maxOutputTokensCap must be at least maxOutputTokens")
        choice = self.tool_choice
        if isinstance(choice, ToolChoiceName) and choice.name not in self.tool_names:
            raise ValueError(f"toolChoice: {choice.name!r} is not one of the job's tools")
        if choice == "required" and not self.tools:
            raise ValueError("toolChoice 'required' needs tools")
        return self

    @field_validator("candidates", mode="before")
    @classmethod
    def _candidates_shorthand(cls, value: Any) -> Any:
        if isinstance(value, int) and not isinstance(value, bool):
            return {"n": value}
        return value

    @field_validator("tools")
    @classmethod
    def _unique_tools(cls, tools: list[ToolDef]) -> list[ToolDef]:
        names = [tool.name for tool in tools]
        for name in names:
            if name in RESERVED_TOOL_NAMES:
                raise ValueError(f"the tool name {name!r} is reserved")
            if names.count(name) > 1:
                raise ValueError(f"the tool name {name!r} is used twice")
        return tools

    @property
    def tool_names(self) -> tuple[str, ...]:
        return tuple(tool.name for tool in self.tools)

    @property
    def output_cap(self) -> int:
        return self.max_output_tokens_cap or max(self.max_output_tokens * 4, 4096)


def stored_spec(data: Mapping[str, Any]) -> JobSpec:
    """``JobSpec.model_validate(data)`` for a spec this service stored (a claimed job).

    Every check but the scan for unpaired surrogates, which the submission passed already.
    Anything a client sends goes through ``JobSpec.model_validate``.
    """
    global _stored_validator  # built once, on first use
    if _stored_validator is None:
        _stored_validator = SchemaValidator(_without_unicode_scan(JobSpec.__pydantic_core_schema__))
    return cast(JobSpec, _stored_validator.validate_python(data))


_stored_validator: SchemaValidator | None = None


def _without_unicode_scan(node: Any) -> Any:
    """A copy of a core schema with every ``_Wire._valid_unicode`` before-validator taken
    out (its inner schema in its place)."""
    if isinstance(node, dict):
        if node.get("type") == "function-before":
            function = node.get("function", {}).get("function")
            if getattr(function, "__func__", None) is _VALID_UNICODE:
                return _without_unicode_scan(node["schema"])
        return {key: _without_unicode_scan(value) for key, value in node.items()}
    if isinstance(node, list):
        return [_without_unicode_scan(value) for value in node]
    return node


_VALID_UNICODE: Final = _Wire.__dict__["_valid_unicode"].__func__
