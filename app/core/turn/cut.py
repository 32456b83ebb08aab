"""A run stopped from outside (its task cancelled: the job was, or its worker stops): the
call in flight is recorded with what it used, so a cancelled job bills what it spent.

    flight = Flight(call, stream)      # before the call
    flight.response = response         # once answered
    record_cut(flight, state, record, client)   # on the cancel, before it goes on

A streamed call closed mid-answer has no usage from the provider: its output tokens are
the chunks that arrived (``StreamTally``), its prompt's tokens those the wire reported at
the start (Anthropic) or else the estimate made for the call, said in a warning; the client
prices them for the model that streamed. A call that does not stream and is closed before
its answer came leaves no record: nothing is known of what it used. An answered call not
yet recorded (the cancel came while its answer was checked) is recorded with its usage.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Final

from app.core.turn.model import LLMResponse, ModelClient, Usage
from app.core.turn.recorder import Recorder
from app.core.turn.request import Call
from app.core.turn.state import RunState
from app.core.turn.streaming import CallStream
from app.core.wire import codes

CUT: Final = "the job was cancelled during this model call: its usage is what streamed before"
UNUSED: Final = "the job was cancelled before this answer was used"
ESTIMATED: Final = (
    "cancelled mid-stream: the prompt's tokens are the service's estimate "
    "(the provider reports them only at the end)"
)


@dataclass(slots=True)
class Flight:
    """The call a run is making; ``response`` once it is answered."""

    call: Call
    stream: CallStream | None
    response: LLMResponse | None = None


def record_cut(flight: Flight, state: RunState, record: Recorder, client: ModelClient) -> None:
    """Record ``flight``'s call as ``cancelled`` with what it used (once; nothing when it is
    recorded already or nothing is known of it)."""
    ledger = state.ledger
    call = flight.call
    if ledger.turns and ledger.turns[-1].index == call.index:
        return
    if flight.response is not None:  # answered and counted in the ledger already
        response = flight.response
        record.note(call, response, "cancelled", codes.CANCELLED, UNUSED, answer=response.content)
        return
    tally = None if flight.stream is None else flight.stream.tally
    if tally is None:
        return
    warnings: tuple[str, ...] = ()
    input_tokens = tally.input_tokens
    if input_tokens is None:
        input_tokens = call.prompt_tokens
        warnings = (ESTIMATED,)
    usage = Usage(
        input_tokens, tally.output_tokens, tally.cached_input_tokens, tally.cache_write_tokens
    )
    cost = client.estimate_cost(tally.model, usage.input_tokens, usage.output_tokens)
    response = LLMResponse(
        content=None,
        finish_reason="length",  # not recorded: the call has none
        model=tally.model,
        provider=tally.provider,
        usage=usage,
        cost_usd=cost,
        warnings=warnings,
    )
    ledger.account(response, call.request.messages)
    cut = record.note(call, response, "cancelled", codes.CANCELLED, CUT, warnings=warnings)
    ledger.turns[-1] = cut.model_copy(update={"finish_reason": None})
