"""The one error the simulated APIs answer on purpose: a request they reject (HTTP 400).

Wire modules render it in their provider's error shape::

    raise InvalidRequest("messages: expected a list")
"""

from __future__ import annotations


class InvalidRequest(ValueError):
    """A malformed request body, schema or ``[[sim ...]]`` directive."""

    status = 400

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message
