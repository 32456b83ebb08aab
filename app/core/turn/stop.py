"""How a run stops short of an accepted answer: raised inside the loop, caught by it."""

from __future__ import annotations

from app.core.turn.tools import Handled


class Ended(Exception):
    """The job ends with this envelope error (``cause``: the last problem's code)."""

    def __init__(self, code: str, detail: str, *, cause: str | None = None) -> None:
        super().__init__(detail)
        self.code, self.detail, self.cause = code, detail, cause


class Paused(Exception):
    """A work turn called client tools; the job waits for their outputs."""

    def __init__(self, handled: list[Handled]) -> None:
        super().__init__("requires_action")
        self.handled = handled
