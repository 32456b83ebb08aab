"""A chat request's messages as reprompt reads them: checked, as a job's task and input,
or as the model call's own messages.

    task, input = as_task(request)          # a JSON response format: the job's task and input
    messages = as_messages(request, images) # a plain call: the conversation as it is

Text parts are joined; image parts (``app.api.chat.images``, read before) go with their
message in a plain call, and into the job's ``images`` with ``[image N]`` where they were
in a job's text. Audio and file parts are refused with a 400 naming the part
(docs/openai-compatible.md).
"""

from __future__ import annotations

from typing import Any

from app.api.chat.errors import ChatError
from app.api.chat.images import Images
from app.api.chat.request import ChatMessage, ChatRequest, ImagePart, TextPart
from app.core.turn.model import Message, Role, ToolCall
from app.core.wire import codes

_ROLES: dict[str, Role] = {
    "system": "system",
    "developer": "system",
    "user": "user",
    "assistant": "assistant",
    "tool": "tool",
}


def text_of(message: ChatMessage, index: int, *, number_from: int | None = None) -> str:
    """The message's text: a string, or its text parts joined (``number_from``: each image
    part as ``[image N]``, N counted from it); other parts refused."""
    content = message.content
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    texts: list[str] = []
    number = number_from
    for j, part in enumerate(content):
        if isinstance(part, TextPart):
            texts.append(part.text)
        elif isinstance(part, ImagePart):
            if number is not None:
                texts.append(f"[image {number}]")
                number += 1
        else:
            raise ChatError(
                400,
                codes.INVALID_INPUT,
                f"messages[{index}].content[{j}]: {part.type} parts are not supported; "
                "send text or images (docs/openai-compatible.md)",
                param=f"messages[{index}].content[{j}]",
            )
    return "\n".join(texts)


def _marked_texts(request: ChatRequest) -> list[str]:
    """Every message's text, its images as ``[image N]`` (N over the request, from 1: the
    order of the job's ``images``)."""
    texts = []
    number = 1
    for i, message in enumerate(request.messages):
        texts.append(text_of(message, i, number_from=number))
        if isinstance(message.content, list):
            number += sum(isinstance(part, ImagePart) for part in message.content)
    return texts


def as_task(request: ChatRequest) -> tuple[str, Any]:
    """The job's task (the system and developer messages, then the last user message) and
    input (every other message, in order, as ``{"role", "content"}``; None when none)."""
    texts = _marked_texts(request)
    last_user = max((i for i, m in enumerate(request.messages) if m.role == "user"), default=None)
    if last_user is None:
        raise ChatError(
            400, codes.INVALID_INPUT, "messages: a user message is needed", param="messages"
        )
    instructions = [
        texts[i] for i, m in enumerate(request.messages) if m.role in ("system", "developer")
    ]
    task = "\n\n".join([*(t for t in instructions if t), texts[last_user]])
    history = [
        _entry(m, texts[i])
        for i, m in enumerate(request.messages)
        if i != last_user and m.role not in ("system", "developer")
    ]
    return task, (history or None)


def _entry(message: ChatMessage, text: str) -> dict[str, Any]:
    entry: dict[str, Any] = {"role": message.role, "content": text}
    if message.tool_calls:
        entry["toolCalls"] = [
            {"name": c.function.name, "arguments": c.function.arguments} for c in message.tool_calls
        ]
    return entry


def as_messages(request: ChatRequest, images: Images) -> tuple[Message, ...]:
    """The conversation as the model call's messages (developer messages as system ones),
    each user message with its images."""
    out: list[Message] = []
    for i, message in enumerate(request.messages):
        text = text_of(message, i)
        seen = tuple(image for (at, _), image in images.items() if at == i)
        calls = tuple(
            ToolCall(c.id, c.function.name, c.function.arguments) for c in message.tool_calls or ()
        )
        if message.role == "tool" and not message.tool_call_id:
            raise ChatError(
                400,
                codes.INVALID_INPUT,
                f"messages[{i}].tool_call_id: a tool message needs the call's id",
                param=f"messages[{i}].tool_call_id",
            )
        out.append(
            Message(
                _ROLES[message.role],
                text,
                tool_calls=calls,
                tool_call_id=message.tool_call_id,
                name=message.name if message.role != "tool" else None,
                images=seen,
            )
        )
    return tuple(out)
