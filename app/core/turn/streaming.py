"""A turn's answer as it streams: checked partials out, and word when they do not stand.

    stream = CallStream.of(setup, runtime, call)      # None unless the job streams
    request = replace(call.request, stream=stream)    # the adapter feeds it text
    ...
    stream.finish(response)                            # the rest, or the whole (no stream)
    stream.discard("the answer was rejected: ...")     # partial_discarded, if any were sent

Partials go out at most every ``Runtime.partial_interval_s`` (the latest one wins, and
the last one of the answer is always sent), at most ``MAX_PARTIALS`` per call, and none
past ``MAX_PARTIAL_CHARS`` of JSON: a long or hostile answer costs a bounded number of
copies of itself, never one per token.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Final

from app.core.answer.contract import Contract
from app.core.answer.partial import PartialAnswer as Partial
from app.core.answer.verdict import answer_limit
from app.core.turn.clock import Clock
from app.core.turn.model import LLMResponse, StreamTally
from app.core.turn.request import Call
from app.core.turn.runtime import PartialSink, Runtime
from app.core.wire.base import compact_json
from app.core.wire.partial import PartialAnswer, PartialDiscarded

MAX_PARTIALS: Final = 500
MAX_PARTIAL_CHARS: Final = 256 * 1024
RETRIED: Final = "the model call was tried again; its answer starts over"


def whole_partial(runtime: Runtime, call: Call, value: Any) -> None:
    """A streaming job's accepted answer that did not stream (a field-level re-ask, several
    candidates): one partial with all of it, so the last partial is always the answer."""
    if runtime.partials is None:
        return
    elapsed = round((runtime.clock.monotonic() - call.began) * 1000)
    runtime.partials(
        PartialAnswer(
            turn=call.index, attempt=call.attempt, data=value, complete=("$",), elapsed_ms=elapsed
        )
    )


@dataclass(slots=True)
class CallStream:
    """One call's streaming answer: a ``TextSink`` for the adapter, partials for the job."""

    contract: Contract
    call: Call
    clock: Clock
    sink: PartialSink
    interval_s: float
    partial: Partial = field(init=False)
    received: bool = False  # some text came streaming
    sent: int = 0  # partials sent for this answer
    first_field_s: float | None = None  # when the first value passed, after the call began
    tally: StreamTally | None = None  # what the attempt streaming now has used
    _last_sent: float = float("-inf")
    _unsent: bool = False
    _quiet: str | None = None  # why no more partials are sent for this answer

    def __post_init__(self) -> None:
        self.partial = self._fresh()

    @classmethod
    def of(cls, contract: Contract, runtime: Runtime, call: Call) -> CallStream | None:
        """The stream of ``call``'s answer, or None: the job does not stream, or the call is
        a field-level re-ask or asks for several answers (those come whole)."""
        if runtime.partials is None or call.patch is not None or call.request.n > 1:
            return None
        return cls(contract, call, runtime.clock, runtime.partials, runtime.partial_interval_s)

    def _fresh(self) -> Partial:
        limit = answer_limit(self.call.request.max_output_tokens)
        return Partial(self.contract, max_chars=limit)

    # -- TextSink ---------------------------------------------------------------------------

    def restart(self, provider: str, model: str) -> StreamTally:
        if self.received or self.sent:
            self.discard(RETRIED)
        self.partial = self._fresh()
        self.received = False
        self._unsent = False
        self._quiet = None
        self.tally = StreamTally(provider, model)
        return self.tally

    def text(self, delta: str) -> None:
        self.received = True
        if self.partial.feed(delta):
            if self.first_field_s is None:
                self.first_field_s = self.clock.monotonic() - self.call.began
            self._unsent = True
            if self.clock.monotonic() - self._last_sent >= self.interval_s:
                self._send()

    # -- the call's end ---------------------------------------------------------------------

    def finish(self, response: LLMResponse) -> str | None:
        """The last partial of the answer; a warning when the provider did not stream."""
        if self.received:
            if self._unsent:
                self._send()
            return None
        content = response.content
        if not content or response.alternatives:
            return None
        self.text(content)
        if self._unsent:
            self._send()
        return (
            f"stream: {response.provider} did not stream model {response.model}'s answer; "
            "its partial came once the answer was whole"
        )

    def discard(self, reason: str) -> None:
        """Say that this answer's partials do not stand (nothing when none was sent)."""
        if self.sent:
            call = self.call
            self.sink(PartialDiscarded(turn=call.index, attempt=call.attempt, reason=reason))
        self.sent = 0
        self._unsent = False

    def _send(self) -> None:
        self._unsent = False
        if self._quiet is not None:
            return
        if self.sent >= MAX_PARTIALS:
            self._quiet = f"more than {MAX_PARTIALS} partials"
            return
        data = self.partial.data()
        if len(compact_json(data)) > MAX_PARTIAL_CHARS:
            self._quiet = f"the partial answer passed {MAX_PARTIAL_CHARS} characters"
            return
        now = self.clock.monotonic()
        self._last_sent = now
        self.sent += 1
        call = self.call
        self.sink(
            PartialAnswer(
                turn=call.index,
                attempt=call.attempt,
                data=data,
                complete=tuple(self.partial.complete),
                elapsed_ms=round((now - call.began) * 1000),
            )
        )
