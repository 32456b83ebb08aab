"""The messages a job sends: system prompt, task, turn notes, the simplified final request.

    prompts = Prompting(spec, contract, client, has_tools=bool(tools))
    conversation = prompts.conversation(spec.model)
    messages = conversation.messages(prompts.note(budget, "retry"))

Every sentence comes from a template in ``prompts/`` (``app.core.turn.templates.render``).
Data is fenced so that it cannot end its own fence: the input sits in an ``<input>`` tag
whose name changes when the input holds ``</input`` (``data_tag``), and code fences are
longer than any run of backticks inside them (``fence``).

Two profiles, per model (the providers file's ``prompt``, ``ModelConfig.prompt``):

- ``full`` spells everything out: the JSON Schema (unless the provider enforces it
  natively), the input as JSON in its delimiter tag, the ``$fail`` way out;
- ``compact``, for small models that copy a long prompt's scaffolding into their answers:
  the fields as a short list (``name (string), age (integer)``) when the provider
  constrains decoding to the schema, an input that is a string or one text field as plain
  text, no ``$fail`` instruction; a re-ask is the question asked afresh (the rejection,
  then the task, the input and the fields asked for) without the rejected answer
  (``reask``). Measured on the embedded gemma-3 270M in docs/benchmarks/real-model.md.
"""

from __future__ import annotations

import functools
import json
from typing import Any, cast

from app.core.answer.contract import Contract
from app.core.answer.feedback import Failure
from app.core.answer.patch import Patch
from app.core.schema.validation import derived
from app.core.turn.budget import TurnBudget
from app.core.turn.conversation import Conversation
from app.core.turn.model import Image, Message, ModelClient, PromptStyle, StyledClient
from app.core.turn.templates import data_tag, fence, render
from app.core.wire.record import TurnType
from app.core.wire.spec import JobSpec

# Structured-output modes in which the provider enforces the schema itself.
_NATIVE = ("json_schema", "tool")


@functools.lru_cache(maxsize=64)
def _system_text(has_tools: bool, native: bool, schema: str) -> str:
    """The full profile's system prompt, rendered once per schema (``schema``: its text, at
    most ``max_schema_bytes``): every job of a kind sends the same one."""
    return render(
        "system",
        {
            "has_tools": has_tools,
            "show_schema": not native,
            "schema": schema,
            "schema_fence": fence(schema),
            "can_fail": not native,
        },
    )


class Prompting:
    def __init__(
        self, spec: JobSpec, contract: Contract, client: ModelClient, *, has_tools: bool
    ) -> None:
        self.spec = spec
        self.contract = contract
        self.client = client
        self.has_tools = has_tools
        self._styles: dict[str | None, PromptStyle] = {}

    def _native(self, model: str | None) -> bool:
        return self.client.structured_mode(model, self.spec.structured_output) in _NATIVE

    def style(self, model: str | None) -> PromptStyle:
        """The model's prompt style; clients that do not say get the full profile. Asked
        once per model: every message of every turn consults it."""
        style = self._styles.get(model)
        if style is None:
            # What ``isinstance(client, StyledClient)`` asks, without a protocol check's
            # cost on every job: whether the client has the method.
            if getattr(self.client, "prompt_style", None) is None:
                style = PromptStyle()
            else:
                styled = cast(StyledClient, self.client)
                style = styled.prompt_style(model, self.spec.structured_output)
            self._styles[model] = style
        return style

    def compact(self, model: str | None) -> bool:
        return self.style(model).profile == "compact"

    def shown_input(self, model: str | None) -> str:
        """The job's input as the prompt shows it (the compact profile unwraps one text field)."""
        if self.compact(model):
            return show_input_plain(self.spec.input)
        return show_input(self.spec.input)

    def system(self, model: str | None) -> Message:
        if self.compact(model):
            # Everything is in the user turn, the format last: a base model reads on from
            # there, and a chat template without a system role loses nothing.
            return Message("system", "")
        native = self._native(model)
        schema = schema_text(self.contract.output_schema) if not native else ""
        tools = self.has_tools and self.spec.budget.max_turns > 1
        return Message("system", _system_text(tools, native, schema))

    def conversation(self, model: str | None) -> Conversation:
        if self.compact(model):
            return Conversation(
                system=self.system(model),
                task=self._user(self._compact_task(model)),
                full=self.spec.feedback == "full",
            )
        shown = show_input(self.spec.input)
        task = render(
            "task",
            {
                "task": self.spec.task,
                "has_input": self.spec.input is not None,
                "input": shown,
                "input_tag": data_tag(shown),
                "has_plan": bool(self.spec.plan),
                "plan": self.spec.plan or [],
            },
        )
        return Conversation(
            system=self.system(model),
            task=self._user(task),
            full=self.spec.feedback == "full",
        )

    def patch_feedback(self, model: str | None, failure: Failure, patch: Patch) -> str | None:
        """The compact profile's field-level re-ask: the diagnosis and a line naming the parts.

        A part is ``"/age" (integer)`` where decoding holds the answer to the sub-schema,
        else the sub-schema. ``None`` for the full profile (``render_patch_feedback``).
        """
        if not self.compact(model):
            return None
        fields = field_list(patch.schema) if self.style(model).schema_enforced else None
        shown_schema = schema_text(patch.schema)
        return render(
            "compact_patch_feedback",
            {
                "diagnosis": failure.diagnosis,
                "fields": fields,
                "show_schema": fields is None,
                "schema": shown_schema,
                "schema_fence": fence(shown_schema),
            },
        )

    def reask(self, model: str | None, failure: Failure, patch: Patch | None) -> Message | None:
        """The compact profile's re-ask: one fresh user turn, without the rejected answer.

        The rejection comes first, then the task, the input and the fields asked for. A
        small model copies the nearest text: shown its wrong answer, it writes it again
        (docs/benchmarks/real-model.md). ``None`` where the re-ask keeps the conversation:
        the full profile, tools, a ``retryPrompt``, ``feedback: "full"``.
        """
        if (
            not self.compact(model)
            or self.has_tools
            or self.spec.retry_prompt is not None
            or self.spec.feedback == "full"
        ):
            return None
        return self._user(self._compact_task(model, rejected=failure.diagnosis, part=patch))

    def _user(self, text: str) -> Message:
        """The task's user message, with the job's images (every call sends them)."""
        return Message("user", text, images=self._images)

    @functools.cached_property
    def _images(self) -> tuple[Image, ...]:
        return tuple(Image(image.media_type, image.data) for image in self.spec.images)

    def _compact_task(
        self,
        model: str | None,
        last_error: str | None = None,
        *,
        rejected: str | None = None,
        part: Patch | None = None,
    ) -> str:
        # Constrained decoding already holds the answer to the schema; a short field list
        # says what goes where. Without it the model needs the schema itself.
        style = self.style(model)
        schema = self.contract.output_schema if part is None else part.schema
        fields = field_list(schema) if style.schema_enforced and not self.has_tools else None
        shown_schema = schema_text(schema)
        return render(
            "compact_task",
            {
                "has_tools": self.has_tools and self.spec.budget.max_turns > 1,
                "task": self.spec.task,
                "has_input": self.spec.input is not None,
                "plain": is_plain_input(self.spec.input),
                "input": self.shown_input(model),
                "has_plan": bool(self.spec.plan),
                "plan": self.spec.plan or [],
                "last_error": last_error,
                "rejected": rejected,
                "fields": fields,
                "show_schema": fields is None,
                "schema": shown_schema,
                "schema_fence": fence(shown_schema),
            },
        )

    def simplified(self, model: str | None, last: Failure | None) -> tuple[Message, ...]:
        """Spec 004's simplified final attempt: the bare schema, an example, the last error."""
        if self.compact(model):
            task = self._compact_task(model, None if last is None else last.diagnosis)
            return (self._user(task),)
        schema = schema_text(self.contract.output_schema)
        example = self.contract.example
        system = render(
            "simplified_final",
            {
                "schema": schema,
                "schema_fence": fence(schema),
                "example": example,
                "example_fence": fence(example or ""),
                "can_fail": not self._native(model),
            },
        )
        shown = show_input(self.spec.input)
        user = render(
            "simplified_task",
            {
                "task": self.spec.task,
                "has_input": self.spec.input is not None,
                "input": shown,
                "input_tag": data_tag(shown),
                "last_error": None if last is None else last.diagnosis,
            },
        )
        return (Message("system", system), self._user(user))

    def note(self, budget: TurnBudget, turn_type: TurnType) -> str | None:
        """Spec 003's budget information, and spec 000's must-return warning when the job
        has work turns (the compact profile keeps only the warning)."""
        if self.compact(self.spec.model):
            if turn_type != "must_return" or budget.max_turns <= 1:
                return None
            return render(
                "must_return_warning",
                {"has_retries": budget.retry_remaining > 0, "retry_count": budget.retry_remaining},
            )
        info = render(
            "turn_info",
            {
                "in_retry": turn_type == "retry",
                "current_retry": budget.retry_attempt,
                "total_retries": budget.return_retries,
                "multi_turn": budget.max_turns > 1,
                "turn": budget.max_turns - budget.work_remaining + 1,
                "max_turns": budget.max_turns,
                "work_left": max(budget.work_remaining - 1, 0),
                "has_retries": budget.return_retries > 0,
                "retries_left": budget.retry_remaining,
            },
        )
        parts = [info] if info else []
        # A one-turn job has nothing but its answer to give: the warning is for jobs that
        # could still call tools or work on.
        if turn_type == "must_return" and budget.max_turns > 1:
            parts.append(
                render(
                    "must_return_warning",
                    {
                        "has_retries": budget.retry_remaining > 0,
                        "retry_count": budget.retry_remaining,
                    },
                )
            )
        return "\n\n".join(parts) or None


def show_input(value: Any) -> str:
    if value is None:
        return ""
    if isinstance(value, str):
        return value
    return json.dumps(value, ensure_ascii=False, indent=1)


def is_plain_input(value: Any) -> bool:
    """A string, or an object with one string field: text the compact profile shows as is."""
    if isinstance(value, str):
        return True
    return (
        isinstance(value, dict) and len(value) == 1 and isinstance(next(iter(value.values())), str)
    )


def show_input_plain(value: Any) -> str:
    """``show_input``, except that one text field is shown as its text."""
    if isinstance(value, dict) and is_plain_input(value):
        return str(next(iter(value.values())))
    return show_input(value)


# Deeper schemas, or parts a short list cannot say (references, unions), are shown whole.
_FIELD_DEPTH = 3
_TYPE_WORDS = {
    "string": "string",
    "integer": "integer",
    "number": "number",
    "boolean": "boolean",
    "null": "null",
}


def field_list(schema: dict[str, Any]) -> str | None:
    """The compact profile's description of an object schema: ``name (string), age
    (integer)``; ``None`` when a short list cannot describe it."""
    if schema.get("type") != "object" or not schema.get("properties"):
        return None
    return _fields(schema, 0)


def _fields(schema: dict[str, Any], depth: int) -> str | None:
    props = schema.get("properties")
    if not isinstance(props, dict) or not props:
        return None
    parts = []
    for name, sub in props.items():
        words = _type_words(sub, depth + 1) if isinstance(sub, dict) else None
        if words is None:
            return None
        parts.append(f"{name} ({words})")
    return ", ".join(parts)


def _type_words(schema: dict[str, Any], depth: int) -> str | None:
    if depth > _FIELD_DEPTH:
        return None
    if "enum" in schema and isinstance(schema["enum"], list):
        return "one of " + " | ".join(json.dumps(v, ensure_ascii=False) for v in schema["enum"])
    if "const" in schema:
        return "exactly " + json.dumps(schema["const"], ensure_ascii=False)
    kind = schema.get("type")
    if kind == "array":
        items = schema.get("items")
        inner = _type_words(items, depth + 1) if isinstance(items, dict) else None
        return None if inner is None else f"list of {inner}"
    if kind == "object":
        inner = _fields(schema, depth)
        return None if inner is None else f"object: {inner}"
    if isinstance(kind, str) and kind in _TYPE_WORDS:
        return _TYPE_WORDS[kind]
    return None


def schema_text(schema: dict[str, Any]) -> str:
    """The schema as a prompt shows it (kept with a contract's schema: the same every job)."""
    return derived(schema, "prompt-text", _schema_text)


def _schema_text(schema: dict[str, Any]) -> str:
    # One line without spaces, no dialect marker: every prompt token is paid for on every
    # retry.
    shown = {k: v for k, v in schema.items() if k != "$schema"}
    return json.dumps(shown, ensure_ascii=False, separators=(",", ":"))
