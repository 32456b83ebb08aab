"""What one request asks of the simulated model, independent of its wire format.

Wire modules translate a body into a ``Scenario``; the behaviour answers it::

    scenario = Scenario.build(conversation, model="gpt-4o", max_tokens=256,
                              format_schema=None, tool=("extract", params), json_mode=False)
    scenario.schema, scenario.schema_source   # params, "tool"
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Literal

from reprompt_sim import directive as directives
from reprompt_sim import schema as js
from reprompt_sim.conversation import Conversation
from reprompt_sim.directive import Directive
from reprompt_sim.errors import InvalidRequest

SchemaSource = Literal["response_format", "tool", "text"]


@dataclass(frozen=True, slots=True)
class Scenario:
    """``tool_name`` is set when the answer goes through a tool call rather than text."""

    conversation: Conversation
    model: str | None
    max_tokens: int | None
    schema: dict[str, Any] | None
    schema_source: SchemaSource | None
    tool_name: str | None
    json_mode: bool
    directive: Directive | None
    prompt_chars: int

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
        tool: tuple[str, object] | None,
        json_mode: bool,
        extra_prompt_chars: int = 0,
    ) -> Scenario:
        """Finds the schema: response format, then the forced tool, then the message text."""
        schema: dict[str, Any] | None = None
        source: SchemaSource | None = None
        if format_schema is not None:
            schema, source = _checked(format_schema, "response_format schema"), "response_format"
        elif tool is not None:
            schema, source = _checked(tool[1], f"tool {tool[0]!r} schema"), "tool"
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
            tool_name=tool[0] if tool is not None else None,
            json_mode=json_mode,
            directive=Directive.find(texts),
            prompt_chars=prompt_chars,
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
