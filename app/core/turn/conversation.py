"""The messages a turn sends, and the transcript of everything that was said.

Collapsed (the default, spec 000): the task, the work done with tools, and only the
latest rejected answer with its feedback, so a prompt does not grow with retries.
Full: every exchange in order.

Either way the system prompt, the task and the tool work open every call unchanged, byte
for byte (``stable``): the prefix a provider's prompt cache can keep. The turn note is a
message of its own after it, never appended to it.
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from typing import Final, Literal

from app.core.turn.model import Message, Role
from app.core.wire.base import Wire

EntryKind = Literal["work", "failure"]
# How much of an answer the transcript keeps.
RECORDED_ANSWER_CHARS: Final = 20_000


class TranscriptEntry(Wire):
    """One message of a job's transcript, as stored and returned."""

    role: Role
    content: str

    @classmethod
    def of(cls, message: Message) -> TranscriptEntry:
        return cls(role=message.role, content=message.content)


@dataclass(slots=True)
class Conversation:
    system: Message
    task: Message
    full: bool = False
    log: list[tuple[EntryKind, tuple[Message, ...]]] = field(default_factory=list)
    transcript: list[Message] = field(default_factory=list)
    # The task message ``cache_key`` was made from, and the key (one digest per job).
    _keyed: tuple[Message, str] | None = field(default=None, init=False, repr=False)

    def __post_init__(self) -> None:
        self.transcript = self._head()

    def _head(self) -> list[Message]:
        # The compact prompt profile has no system prompt: nothing is sent for it.
        return [self.system, self.task] if self.system.content else [self.task]

    def add_work(self, *messages: Message) -> None:
        """Tool calls and their results: the investigation the model keeps seeing."""
        self.log.append(("work", messages))
        self.transcript.extend(messages)

    def add_failure(
        self, answer: Message | None, feedback: Message, *, recorded: str | None
    ) -> None:
        """A rejected answer and the correction. ``recorded`` is the answer as the transcript
        keeps it (the prompt gets ``answer``, which may be shortened)."""
        sent = (feedback,) if answer is None else (answer, feedback)
        self.log.append(("failure", sent))
        if recorded is not None:
            self.transcript.append(Message("assistant", recorded))
        self.transcript.append(feedback)

    def add_final(self, answer: str) -> None:
        self.transcript.append(Message("assistant", answer))

    def messages(self, note: str | None) -> tuple[Message, ...]:
        """What the next call sends; ``note`` (turn info, must-return warning) ends it."""
        out = self._head()
        if self.full:
            for _, entry in self.log:
                out.extend(entry)
        else:
            for kind, entry in self.log:
                if kind == "work":
                    out.extend(entry)
            if self.log and self.log[-1][0] == "failure":
                out.extend(self.log[-1][1])
        if note:
            last = out[-1]
            if last.role == "user" and len(out) > self.stable():
                out[-1] = replace(last, content=f"{last.content}\n\n{note}")
            else:
                out.append(Message("user", note))
        return tuple(out)

    def stable(self) -> int:
        """How many leading messages of ``messages()`` every later call repeats unchanged.

        The system prompt, the task and the log up to the latest failure (collapsed: the
        tool work only, as earlier failures are dropped).
        """
        count = 2
        for kind, entry in self.log:
            if kind == "work" or self.full:
                count += len(entry)
        if self.log and self.log[-1][0] == "failure" and self.full:
            count -= len(self.log[-1][1])
        return count

    @property
    def cache_key(self) -> str:
        """What groups a job's calls for a provider's prompt cache: a digest of the task
        (with its input), the same on every call, after an escalation or a pause too."""
        keyed = self._keyed
        if keyed is not None and keyed[0] is self.task:
            return keyed[1]
        digest = hashlib.sha256(self.task.content.encode("utf-8", "replace")).hexdigest()
        key = f"reprompt-{digest[:32]}"
        self._keyed = (self.task, key)
        return key

    def purified(self) -> list[Message]:
        """Spec 002 purify: the task, the tool work and the accepted answer; no failures."""
        work = [m for kind, entry in self.log if kind == "work" for m in entry]
        return [*self._head(), *work, self.transcript[-1]]


# An input this long is not stored a second time inside the transcript's task message.
STORED_INPUT_CHARS = 2048


def stored_transcript(
    messages: Sequence[Message], shown_input: str, *also: str
) -> tuple[TranscriptEntry, ...]:
    """The transcript as a job keeps it: a long input replaced by a note.

    The input is stored once, in the spec; ``shown_input`` is how the prompt showed it,
    ``also`` other ways a prompt profile may show it.
    """
    out = []
    for message in messages:
        content = message.content
        for shown in (shown_input, *also):
            if len(shown) > STORED_INPUT_CHARS and shown in content:
                marker = f"[the job's input, {len(shown)} characters: see the job's input]"
                content = content.replace(shown, marker)
        out.append(TranscriptEntry(role=message.role, content=content))
    return tuple(out)
