"""A job's completion callbacks as its client sees them: one delivery per event sent.

    job.callback.deliveries[0].state        # pending | delivered | failed | superseded
    message_id(job_id, "succeeded")         # the webhook-id, the same for every retry

What the store keeps per delivery (``app/store/lua/outbox.lua``) is read into these models;
the sender (``app/worker/callbacks.py``) signs each attempt with ``message_id``.
"""

from __future__ import annotations

import hashlib
from typing import Literal

from pydantic import Field

from app.core.wire.base import Wire
from app.core.wire.spec import CallbackEvent

DeliveryState = Literal["pending", "delivered", "failed", "superseded"]


def message_id(job_id: str, event: CallbackEvent, pause: int = 0) -> str:
    """The ``webhook-id`` of one event of one job, the same on every retry and redelivery.

    So a receiver can tell a repeat. Each pause (``requires_action``) is an event of its own.
    """
    occurrence = f"\x00{pause}" if event == "requires_action" else ""
    digest = hashlib.sha256(f"{job_id}\x00{event}{occurrence}".encode()).hexdigest()
    return f"msg_{digest[:32]}"


class Delivery(Wire):
    """How the callback of one event went."""

    event: CallbackEvent
    state: DeliveryState = Field(
        description="pending: an attempt is due at nextAttemptAt (or under way); delivered: "
        "a 2xx answer; failed: a final error (a 4xx other than 408/429, a redirect) or no "
        "success within the retry window; superseded: a requires_action the job had left "
        "before it could be sent."
    )
    webhook_id: str = Field(description="The same for every attempt: de-duplicate on it.")
    attempts: int = Field(description="Requests that got an answer or an error.")
    created_at: str = Field(description="When the job reached the event.")
    last_attempt_at: str | None = None
    last_status: int | None = Field(
        default=None, description="The HTTP status of the last attempt, if it got one."
    )
    last_error: str | None = Field(default=None, description="Why the last attempt failed.")
    next_attempt_at: str | None = Field(default=None, description="While pending.")
    delivered_at: str | None = None
    redeliveries: int = Field(default=0, description="Times an operator asked to send it again.")


class CallbackStatus(Wire):
    """The job's callback and its deliveries so far, oldest first."""

    url: str
    events: tuple[CallbackEvent, ...]
    deliveries: tuple[Delivery, ...]
