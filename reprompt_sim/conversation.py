"""A conversation as the simulated model reads it, whichever wire format carried it.

::

    convo = Conversation((Turn("user", "Extract..."), Turn("assistant", "{"), Turn("user", "fix")))
    convo.attempt          # 2: one previous answer
    convo.previous_answer  # the assistant turn the feedback is about
    convo.feedback         # "fix"

An assistant turn that only called client tools (``work``) is not an answer: it counts as an
attempt, but self-correction looks past it to the last real answer.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property
from typing import Literal

from reprompt_sim import chance

Role = Literal["system", "user", "assistant", "tool"]


@dataclass(frozen=True, slots=True)
class Turn:
    """One message. ``tool_arguments`` is an assistant's call of the output tool as JSON text;
    ``work`` its calls of client tools as (name, arguments) pairs."""

    role: Role
    text: str
    tool_arguments: str | None = None
    refused: bool = False
    work: tuple[tuple[str, str], ...] = ()

    @property
    def answer(self) -> str:
        """What an assistant turn answered: its tool call when it made one, else its text."""
        return self.tool_arguments if self.tool_arguments is not None else self.text

    @property
    def is_work(self) -> bool:
        """An assistant turn that called client tools instead of answering."""
        return self.role == "assistant" and bool(self.work) and self.tool_arguments is None

    @property
    def is_answer(self) -> bool:
        return self.role == "assistant" and not self.is_work


@dataclass(frozen=True)
class Conversation:
    turns: tuple[Turn, ...]

    @cached_property
    def digest(self) -> str:
        """Identifies what the model reads; request options such as max_tokens are left out."""
        # Client tool calls join the key only when present, so older conversations keep theirs.
        return chance.digest(
            *(
                (t.role, t.text, t.tool_arguments, t.refused, *((t.work,) if t.work else ()))
                for t in self.turns
            )
        )

    @property
    def attempt(self) -> int:
        """1 + the number of assistant messages (answers and tool calls) in the conversation."""
        return 1 + sum(t.role == "assistant" for t in self.turns)

    @property
    def task(self) -> str:
        """The first user message before any answer (with a collapsed history, the first one)."""
        for turn in self.turns:
            if turn.role == "assistant":
                break
            if turn.role == "user":
                return turn.text
        return next((t.text for t in self.turns if t.role == "user"), "")

    @property
    def previous_answer(self) -> Turn | None:
        """The last assistant answer, looking past turns that only called client tools."""
        return next((t for t in reversed(self.turns) if t.is_answer), None)

    @property
    def feedback(self) -> str:
        """Everything said after the last answer (user and tool messages, tool results)."""
        tail: list[str] = []
        for turn in reversed(self.turns):
            if turn.is_answer:
                break
            if turn.role != "assistant":
                tail.append(turn.text)
        return "\n".join(reversed(tail))

    def prompt_texts(self) -> list[str]:
        """System and user texts, in order: where schemas and directives are looked for."""
        return [t.text for t in self.turns if t.role in ("system", "user")]

    def all_texts(self) -> list[str]:
        return (
            [t.text for t in self.turns]
            + [t.tool_arguments for t in self.turns if t.tool_arguments is not None]
            + [arguments for t in self.turns for _, arguments in t.work]
        )
