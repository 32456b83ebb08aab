"""The streamed part of an answer: the ``partial`` and ``partial_discarded`` events.

A job with ``"stream": true`` gets, beside its other events, ``partial`` events carrying
the answer so far (only complete values that passed their own checks) and, when the
answer they belong to is not the one that stands (rejected, refused, a retried call),
``partial_discarded``: the next partials start again from nothing.
"""

from __future__ import annotations

from typing import Any, ClassVar, Literal

from pydantic import Field

from app.core.wire.base import Wire


class PartialAnswer(Wire):
    """The data of a ``partial`` event: what may be shown of the answer being written."""

    name: ClassVar[Literal["partial"]] = "partial"

    turn: int = Field(description="The turn (model call) the answer belongs to, from 0.")
    attempt: int = Field(description="The answer's attempt number, from 1.")
    data: Any = Field(description="The answer so far: complete, checked values only.")
    complete: tuple[str, ...] = Field(
        description="JSON paths of the complete values shown, in the order they closed."
    )
    elapsed_ms: int = Field(description="Milliseconds since the model call began.")


class PartialDiscarded(Wire):
    """The data of ``partial_discarded``: the partials of this turn do not stand."""

    name: ClassVar[Literal["partial_discarded"]] = "partial_discarded"

    turn: int
    attempt: int
    reason: str = Field(description="Why: the rejection's diagnosis, a retry, a refusal.")


PartialEvent = PartialAnswer | PartialDiscarded
