"""The messages a job sends: system prompt, task, turn notes, the simplified final request.

    prompts = Prompting(spec, contract, client, has_tools=bool(tools))
    conversation = prompts.conversation(spec.model)
    messages = conversation.messages(prompts.note(budget, "retry"))

Every sentence comes from a template in ``prompts/`` (``app.core.prompts.render``).
Data is fenced so that it cannot end its own fence: the input sits in an ``<input>`` tag
whose name changes when the input holds ``</input`` (``data_tag``), and code fences are
longer than any run of backticks inside them (``fence``).
"""

from __future__ import annotations

import json
from typing import Any

from app.core.budget import TurnBudget
from app.core.contract import Contract
from app.core.conversation import Conversation
from app.core.feedback import Failure
from app.core.model import Message, ModelClient
from app.core.prompts import data_tag, fence, render
from app.core.spec import JobSpec
from app.core.turn import TurnType

# Structured-output modes in which the provider enforces the schema itself.
_NATIVE = ("json_schema", "tool")


class Prompting:
    def __init__(
        self, spec: JobSpec, contract: Contract, client: ModelClient, *, has_tools: bool
    ) -> None:
        self.spec = spec
        self.contract = contract
        self.client = client
        self.has_tools = has_tools

    def _native(self, model: str | None) -> bool:
        return self.client.structured_mode(model, self.spec.structured_output) in _NATIVE

    def system(self, model: str | None) -> Message:
        native = self._native(model)
        schema = schema_text(self.contract.output_schema)
        return Message(
            "system",
            render(
                "system",
                {
                    "has_tools": self.has_tools and self.spec.budget.max_turns > 1,
                    "show_schema": not native,
                    "schema": schema,
                    "schema_fence": fence(schema),
                    "can_fail": not native,
                },
            ),
        )

    def conversation(self, model: str | None) -> Conversation:
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
            task=Message("user", task),
            full=self.spec.feedback == "full",
        )

    def simplified(self, model: str | None, last: Failure | None) -> tuple[Message, ...]:
        """Spec 004's simplified final attempt: the bare schema, an example, the last error."""
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
        return (Message("system", system), Message("user", user))

    def note(self, budget: TurnBudget, turn_type: TurnType) -> str | None:
        """Spec 003's budget information, and spec 000's must-return warning."""
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
        if turn_type == "must_return":
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


def schema_text(schema: dict[str, Any]) -> str:
    # One line, no dialect marker: every prompt token is paid for on every retry.
    shown = {k: v for k, v in schema.items() if k != "$schema"}
    return json.dumps(shown, ensure_ascii=False)
