"""A plain model call of a chat request, its tool calls' arguments checked and re-asked.

    answer = await checked_call(router, request, toolbox, attempts=3)

Without tools it is one call. With tools, every call the model makes is checked against
its tool's ``parameters`` (JSON Schema, ``app.core.turn.tools.Toolbox``); when one is
not valid JSON, names no offered tool or does not match, the model reads why as each
call's tool result and is asked again, up to ``attempts`` calls in all. OpenAI does not
check non-strict tools' arguments; here the caller only ever gets calls that match.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, replace

from app.api.chat.errors import ChatError
from app.api.chat.request import ChatRequest
from app.core.turn.model import LLMRequest, LLMResponse, Message, ModelClient, ToolCall, ToolSpec
from app.core.turn.tools import Tool, Toolbox
from app.core.wire import codes


@dataclass(frozen=True, slots=True)
class Called:
    """The accepted response and what every call of it spent."""

    response: LLMResponse
    calls: int
    input_tokens: int
    output_tokens: int
    cached_tokens: int
    model_ms: int
    diagnoses: tuple[str, ...]


async def checked_call(
    client: ModelClient, request: LLMRequest, toolbox: Toolbox | None, *, attempts: int
) -> Called:
    """The first response whose tool calls all match their tools; ``ChatError`` 422
    (``llm-invalid-output``, with the last diagnosis) when ``attempts`` calls gave none."""
    messages = request.messages
    spent = [0, 0, 0, 0]  # input, output, cached tokens, model ms
    diagnoses: list[str] = []
    for attempt in range(1, attempts + 1):
        response = await client.complete(replace(request, messages=messages))
        if response.usage is not None:
            spent[0] += response.usage.input_tokens
            spent[1] += response.usage.output_tokens
            spent[2] += response.usage.cached_input_tokens
        spent[3] += response.latency_ms
        problems = _problems(toolbox, response.tool_calls) if toolbox else {}
        if not problems:
            return Called(
                response, attempt, spent[0], spent[1], spent[2], spent[3], tuple(diagnoses)
            )
        diagnoses.append("; ".join(problems.values()))
        results = tuple(
            Message(
                "tool",
                problems.get(
                    call.id,
                    "Not run: another call in this turn was not valid; "
                    "make every call again with valid arguments.",
                ),
                tool_call_id=call.id,
            )
            for call in response.tool_calls
        )
        assistant = Message("assistant", response.content or "", tool_calls=response.tool_calls)
        messages = (*messages, assistant, *results)
    raise ChatError(
        422,
        codes.LLM_INVALID_OUTPUT,
        f"no valid tool call in {attempts} attempts: {diagnoses[-1]}",
        extra={"attempts": attempts},
    )


def _problems(toolbox: Toolbox, calls: tuple[ToolCall, ...]) -> dict[str, str]:
    """Each bad call's id → why, in words the model reads."""
    out: dict[str, str] = {}
    for call in calls:
        if call.name not in toolbox.tools:
            offered = ", ".join(sorted(toolbox.tools))
            out[call.id] = f"Error: there is no tool {call.name!r}; the tools are: {offered}."
            continue
        try:
            arguments = json.loads(call.arguments or "{}")
        except json.JSONDecodeError as exc:
            out[call.id] = (
                f"Error: the arguments of {call.name} are not valid JSON ({exc.msg} at "
                f"position {exc.pos}); call it again with a JSON object."
            )
            continue
        if not isinstance(arguments, dict):
            out[call.id] = f"Error: the arguments of {call.name} must be a JSON object."
            continue
        errors = toolbox.argument_errors(call.name, arguments)
        if errors:
            out[call.id] = (
                f"Error: the arguments of {call.name} do not match its parameters: "
                + "; ".join(errors)
                + ". Call it again with arguments that match."
            )
    return out


def toolbox_of(chat: ChatRequest) -> Toolbox | None:
    """The request's tools, checked (names unique, ``tool_choice`` one of them); None:
    no tools."""
    choice = chat.tool_choice
    if not chat.tools:
        if choice is not None and choice not in ("auto", "none"):
            raise ChatError(
                400,
                codes.INVALID_INPUT,
                "tool_choice: the request has no tools",
                param="tool_choice",
            )
        return None
    names = [tool.function.name for tool in chat.tools]
    for name in names:
        if names.count(name) > 1:
            raise ChatError(
                400, codes.INVALID_INPUT, f"tools: the name {name!r} is used twice", param="tools"
            )
    if choice is not None and not isinstance(choice, str) and choice.function.name not in names:
        raise ChatError(
            400,
            codes.INVALID_INPUT,
            f"tool_choice: {choice.function.name!r} is not one of the tools",
            param="tool_choice",
        )
    return Toolbox(
        Tool(ToolSpec(t.function.name, t.function.description, t.function.parameters))
        for t in chat.tools
    )
