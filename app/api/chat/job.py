"""A chat request with a JSON response format as a job: the schema, the conversation as its
task and input, the request's settings and reprompt's options.

    spec = job_spec(request)    # ChatError (400, naming the field) when it cannot be one
"""

from __future__ import annotations

from typing import Any, Final

from pydantic import ValidationError

from app.api.chat.conversation import as_task
from app.api.chat.errors import ChatError
from app.api.chat.images import Images
from app.api.chat.request import ChatRequest
from app.core.wire import codes
from app.core.wire.spec import JobSpec

# json_object: any JSON object, as OpenAI's JSON mode promises.
ANY_OBJECT: Final = {"type": "object"}
# JobSpec's fields that reprompt's options set, by their alias there.
_BUDGET: Final = ("maxTurns", "returnRetries", "maxCostUsd", "maxTokens", "deadlineMs")


def job_spec(request: ChatRequest, images: Images | None = None) -> JobSpec:
    """The job that answers ``request`` (which has a JSON response format); ``images``, read
    from its image parts, are the job's, in order (``[image N]`` in its text)."""
    response_format = request.response_format
    assert response_format is not None
    if response_format.type == "json_schema":
        if response_format.json_schema is None:
            raise ChatError(
                400,
                codes.INVALID_INPUT,
                "response_format.json_schema: needed with type json_schema",
                param="response_format.json_schema",
            )
        schema = response_format.json_schema.schema_ or ANY_OBJECT
    else:
        schema = ANY_OBJECT
    task, data = as_task(request)
    body: dict[str, Any] = {"task": task, "schema": schema, "model": request.model}
    if data is not None:
        body["input"] = data
    if request.output_tokens is not None:
        body["maxOutputTokens"] = request.output_tokens
    if request.temperature is not None:
        body["temperature"] = request.temperature
    if request.seed is not None:
        body["seed"] = request.seed
    if request.metadata:
        body["metadata"] = dict(request.metadata)
    if request.stream:
        body["stream"] = True  # validated partials (#31), sent as reprompt's chunks
    body.update(_tools(request))
    if images:
        body["images"] = [{"mediaType": i.media_type, "data": i.data} for i in images.values()]
    options = request.reprompt.model_dump(by_alias=True, exclude_none=True, exclude_defaults=True)
    budget = {key: options.pop(key) for key in _BUDGET if key in options}
    if budget:
        body["budget"] = budget
    body.update(options)
    try:
        return JobSpec.model_validate(body)
    except ValidationError as exc:
        error = ChatError.invalid(exc)
        error.param = chat_param(error.param or "")
        raise error from None


def _tools(request: ChatRequest) -> dict[str, Any]:
    """The job's ``tools`` and ``toolChoice``: client tools, so the job pauses on a call and
    the route hands it to the caller."""
    out: dict[str, Any] = {}
    if request.tools:
        out["tools"] = [
            {
                "name": tool.function.name,
                "description": tool.function.description,
                "parameters": tool.function.parameters,
            }
            for tool in request.tools
        ]
    choice = request.tool_choice
    if choice is not None:
        out["toolChoice"] = choice if isinstance(choice, str) else {"name": choice.function.name}
    return out


# Where a JobSpec field came from in the chat request, for the error's ``param``.
_FROM: Final = {
    "task": "messages",
    "input": "messages",
    "schema": "response_format.json_schema.schema",
    "maxOutputTokens": "max_completion_tokens",
    "temperature": "temperature",
    "seed": "seed",
    "metadata": "metadata",
    "model": "model",
    "tools": "tools",
    "toolChoice": "tool_choice",
    "images": "messages",
}


def chat_param(field: str) -> str:
    """Where a job's field (``budget.maxTurns``, ``schema``) came from in the request."""
    head, _, rest = field.partition(".")
    if head == "budget":
        return "reprompt." + rest
    bare = head.split("[", 1)[0]
    if bare == "tools" and head != bare:  # tools[0].parameters → tools[0].function.parameters
        return ".".join((head, "function", rest)) if rest else head
    if bare in _FROM:
        return _FROM[bare]
    return "reprompt." + field if field else "reprompt"
