"""What one request asks of the simulated model, independent of its wire format.

Wire modules translate a body into a ``Scenario``; the behaviour answers it::

    choice = ToolChoice("required")
    scenario = Scenario.build(conversation, model="gpt-4o", max_tokens=256, format_schema=None,
                              tools={"lookup": p1, "final_answer": p2}, tool_choice=choice,
                              json_mode=False)
    scenario.schema, scenario.schema_source   # p2, "tool"
    scenario.client_tools                     # ("lookup",)

The answer goes through a tool only when that tool is the output tool (``final_answer``)
or ``tool_choice`` names it; every other tool is a client tool, called only by a script.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Final, Literal

from reprompt_sim import directive as directives
from reprompt_sim import schema as js
from reprompt_sim.config import OUTPUT_TOOL
from reprompt_sim.conversation import Conversation
from reprompt_sim.directive import Directive
from reprompt_sim.errors import InvalidRequest

SchemaSource = Literal["response_format", "tool", "text"]
ChoiceMode = Literal["auto", "none", "required", "named"]

_NO_TOOLS: Final[Mapping[str, object]] = {}


@dataclass(frozen=True, slots=True)
class ToolChoice:
    """A request's ``tool_choice``, whichever wire format carried it.

    ``required`` is OpenAI's ``"required"`` and Anthropic's ``{"type": "any"}``; ``named``
    forces the tool ``name``.
    """

    mode: ChoiceMode = "auto"
    name: str | None = None

    def output_tool(self, tools: Mapping[str, object]) -> str | None:
        """The tool the answer goes through: the one named, else the output tool if offered."""
        if self.mode == "named":
            return self.name
        if self.mode == "none":
            return None
        return OUTPUT_TOOL if OUTPUT_TOOL in tools else None

    def allows(self, name: str) -> bool:
        """Whether this choice lets the model call ``name`` (if it is offered)."""
        return self.mode != "none" and (self.mode != "named" or self.name == name)


@dataclass(frozen=True, slots=True)
class Scenario:
    """``tool_name`` is set when the answer goes through a tool call rather than text;
    ``tools`` names every tool offered, in order."""

    conversation: Conversation
    model: str | None
    max_tokens: int | None
    schema: dict[str, Any] | None
    schema_source: SchemaSource | None
    tool_name: str | None
    json_mode: bool
    directive: Directive | None
    prompt_chars: int
    tools: tuple[str, ...] = ()
    tool_choice: ToolChoice = ToolChoice()
    n: int = 1  # answers asked for (OpenAI's ``n``)
    logprobs: bool = False  # OpenAI's ``logprobs: true``: the answer's token log-probabilities

    @property
    def client_tools(self) -> tuple[str, ...]:
        """The tools offered besides the output tool (``x-sim-tools-offered`` counts them)."""
        return tuple(t for t in self.tools if t != OUTPUT_TOOL)

    def can_call(self, name: str) -> bool:
        """Whether a model could call ``name`` here: offered, and allowed by ``tool_choice``."""
        return name in self.tools and self.tool_choice.allows(name)

    @property
    def structured(self) -> bool:
        """Whether the answer is JSON (a schema, JSON mode, or a non-text expected answer)."""
        if self.schema is not None or self.json_mode or self.tool_name is not None:
            return True
        return (
            self.directive is not None
            and self.directive.has_expect
            and not isinstance(self.directive.expect, str)
        )

    @classmethod
    def build(
        cls,
        conversation: Conversation,
        *,
        model: str | None,
        max_tokens: int | None,
        format_schema: object,
        json_mode: bool,
        tools: Mapping[str, object] = _NO_TOOLS,
        tool_choice: ToolChoice = ToolChoice(),
        extra_prompt_chars: int = 0,
    ) -> Scenario:
        """Finds the schema: response format, then the output tool, then the message text.

        ``tools`` maps each offered tool's name to its parameters schema; a ``named``
        ``tool_choice`` must name one of them (the wire checks).
        """
        schema: dict[str, Any] | None = None
        source: SchemaSource | None = None
        tool = tool_choice.output_tool(tools)
        if format_schema is not None:
            schema, source = _checked(format_schema, "response_format schema"), "response_format"
        elif tool is not None:
            schema, source = _checked(tools[tool], f"tool {tool!r} schema"), "tool"
        else:
            schema = schema_in_text(conversation.prompt_texts())
            source = "text" if schema is not None else None
        texts = [t.text for t in conversation.turns if t.role != "assistant"]
        prompt_chars = sum(len(t) for t in conversation.all_texts()) + extra_prompt_chars
        return cls(
            conversation=conversation,
            model=model,
            max_tokens=max_tokens,
            schema=schema,
            schema_source=source,
            tool_name=tool,
            json_mode=json_mode,
            directive=Directive.find(texts),
            prompt_chars=prompt_chars,
            tools=tuple(tools),
            tool_choice=tool_choice,
        )


def schema_in_text(texts: list[str]) -> dict[str, Any] | None:
    """The first JSON object in ``texts`` that looks like a usable JSON Schema."""
    decoder = json.JSONDecoder()
    for text in texts:
        skip = directives.spans(text)
        start = text.find("{")
        while start != -1:
            inside = next((end for s, end in skip if s <= start < end), None)
            if inside is not None:
                start = text.find("{", inside)
                continue
            try:
                value, _ = decoder.raw_decode(text, start)
            except json.JSONDecodeError:
                value = None
            if js.looks_like_schema(value) and js.problem(value) is None:
                assert isinstance(value, dict)
                return value
            start = text.find("{", start + 1)
    return None


def _checked(schema: object, what: str) -> dict[str, Any]:
    if not isinstance(schema, Mapping):
        raise InvalidRequest(f"{what}: a JSON Schema must be an object")
    problem = js.problem(dict(schema))
    if problem is not None:
        raise InvalidRequest(f"{what}: {problem}")
    return dict(schema)
