"""Which structured-output mechanism a call uses, from the model's capability and the request.

A model is configured with the best mechanism it supports (its *capability*)::

    json_schema         OpenAI-style ``response_format: {"type": "json_schema", ...}`` (strict)
    json_object_schema  llama.cpp's ``{"type": "json_object", "schema": {...}}``
    json_object         ``{"type": "json_object"}``: valid JSON, schema only in the prompt
    tool                a forced tool whose parameters are the output schema
    prompt              nothing sent; the schema lives in the prompt only

and ``mechanism(capability, request)`` says what one call sends::

    mechanism("json_schema", LLMRequest(..., output_schema=s))            -> "json_schema"
    mechanism("json_schema", LLMRequest(..., output_schema=s, tools=t))   -> "prompt"
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Final, Literal

from app.core.turn.model import LLMRequest, StructuredMode, StructuredOutput

Capability = Literal["json_schema", "json_object_schema", "json_object", "tool", "prompt"]
CAPABILITIES: Final[tuple[Capability, ...]] = (
    "json_schema",
    "json_object_schema",
    "json_object",
    "tool",
    "prompt",
)

# The forced tool that carries the answer in "tool" mode; it never reaches the loop as a call.
OUTPUT_TOOL: Final = "final_answer"
OUTPUT_TOOL_DESCRIPTION: Final = "Return the final answer. Its arguments are the answer itself."
# A forced tool's parameters must be a JSON object; other schemas are wrapped in this key.
WRAPPED_KEY: Final = "value"

# How tightly each mechanism constrains the answer, weakest first: a route reports its weakest.
_STRENGTH: Final[dict[StructuredMode, int]] = {
    "prompt": 0,
    "json_object": 1,
    "tool": 2,
    "json_schema": 3,
}


def seam_mode(capability: Capability) -> StructuredMode:
    """The seam's name for a capability.

    llama.cpp's schema form is reported as "json_object", the conservative reading (the
    loop keeps the schema in the prompt).
    """
    if capability == "json_object_schema":
        return "json_object"
    return capability


def mode_for(capability: Capability, requested: StructuredOutput) -> StructuredMode:
    """The mode a model honours ``output_schema`` with under ``requested``.

    "native" may be unmet: callers check ``is_native``.
    """
    if requested == "prompt":
        return "prompt"
    return seam_mode(capability)


def enforces_schema(capability: Capability, requested: StructuredOutput) -> bool:
    """Decoding is constrained to the output schema itself (not only to some JSON)."""
    return requested != "prompt" and capability in ("json_schema", "json_object_schema", "tool")


def is_native(mode: StructuredMode) -> bool:
    return mode != "prompt"


def weakest(modes: list[StructuredMode]) -> StructuredMode:
    return min(modes, key=_STRENGTH.__getitem__)


def mechanism(capability: Capability, request: LLMRequest) -> Capability:
    """What to send for this call, if anything.

    Nothing when there is no schema, when the caller asked for "prompt", or when work tools
    are offered (a constrained answer would forbid calling them).
    """
    if request.output_schema is None or request.structured_output == "prompt" or request.tools:
        return "prompt"
    return capability


def tool_parameters(schema: Mapping[str, Any]) -> tuple[dict[str, Any], bool]:
    """Parameters for the forced output tool and whether the schema had to be wrapped."""
    if schema.get("type") == "object":
        return dict(schema), False
    return (
        {"type": "object", "properties": {WRAPPED_KEY: dict(schema)}, "required": [WRAPPED_KEY]},
        True,
    )


def unwrap(arguments: Any, wrapped: bool) -> Any:
    """The answer inside the forced tool's arguments."""
    if wrapped and isinstance(arguments, dict) and WRAPPED_KEY in arguments:
        return arguments[WRAPPED_KEY]
    return arguments


_VALUE_KEYS = frozenset({"const", "enum", "default", "examples"})


def bound_arrays(schema: Mapping[str, Any], max_items: int) -> dict[str, Any]:
    """A copy of ``schema`` with ``max_items`` on every array that has no ``maxItems``.

    What a grammar-constrained request sends after an answer ran away in a list. A bound
    is at least the array's ``minItems``. Only the grammar is bounded: the answer is still
    checked against the job's own schema.
    """

    def walk(node: Any) -> Any:
        if isinstance(node, list):
            return [walk(item) for item in node]
        if not isinstance(node, Mapping):
            return node
        # Values (``const``, ``enum``, ...) are data, not schemas: left as they are.
        out = {key: v if key in _VALUE_KEYS else walk(v) for key, v in node.items()}
        kind = out.get("type")
        is_array = kind == "array" or (isinstance(kind, list) and "array" in kind)
        if is_array and "maxItems" not in out:
            floor = out.get("minItems")
            floor = floor if isinstance(floor, int) and not isinstance(floor, bool) else 0
            out["maxItems"] = max(max_items, floor)
        return out

    bounded: dict[str, Any] = walk(schema)
    return bounded
