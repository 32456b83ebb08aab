"""An item's turns replayed from its stored answers (app.core.batch.replay): the loop's
own re-ask, deferred where the answers run out."""

from __future__ import annotations

import pytest

from app.core.batch.replay import Deferred, LineFailure, ReplayClient, answer_of, stored
from app.core.turn.loop import Runtime, run_job
from app.core.turn.model import (
    LLMRequest,
    LLMResponse,
    StructuredMode,
    StructuredOutput,
    Usage,
)
from app.core.wire.batch import BatchItem, item_spec
from app.core.wire.errors import ProviderUnavailable
from app.core.wire.spec import JobSpec

TEMPLATE = {
    "task": "Name the city and its population.",
    "signature": "{city :string, population :int}",
    "budget": {"maxTurns": 1, "returnRetries": 2},
}


class Live:
    """A model client for the replay's live calls: it answers well, once counted."""

    def __init__(self) -> None:
        self.calls = 0

    async def complete(self, request: LLMRequest) -> LLMResponse:
        self.calls += 1
        return _answer('{"city": "Oslo", "population": 700000}')

    def structured_mode(self, model: str | None, requested: StructuredOutput) -> StructuredMode:
        return "prompt"

    def estimate_cost(self, model: str | None, input_tokens: int, output_tokens: int) -> float:
        return 0.0


def _answer(content: str) -> LLMResponse:
    return LLMResponse(
        content=content,
        finish_reason="stop",
        model="m",
        provider="p",
        usage=Usage(100, 20),
        cost_usd=0.001,
    )


def _spec() -> JobSpec:
    return item_spec(TEMPLATE, BatchItem.model_validate({"customId": "a", "input": {"n": 1}}))


async def test_an_item_without_answers_defers_its_first_call() -> None:
    with pytest.raises(Deferred) as deferred:
        await run_job(_spec(), Runtime(client=ReplayClient(Live(), [])))
    assert deferred.value.request.messages


async def test_a_rejected_answer_defers_the_reask_with_its_feedback() -> None:
    wrong = _answer('{"city": "Oslo", "population": "many"}')
    with pytest.raises(Deferred) as deferred:
        await run_job(_spec(), Runtime(client=ReplayClient(Live(), [wrong])))
    text = "\n".join(m.content for m in deferred.value.request.messages)
    assert "population" in text  # the feedback names the field


async def test_the_answers_of_two_rounds_end_the_item_as_a_job_would() -> None:
    wrong = _answer('{"city": "Oslo", "population": "many"}')
    right = _answer('{"city": "Oslo", "population": 700000}')
    client = ReplayClient(Live(), [answer_of(stored(wrong)), answer_of(stored(right))])
    result = await run_job(_spec(), Runtime(client=client))
    assert result.envelope.status == "success"
    assert [t.outcome for t in result.turns][-1] == "success"
    assert len(result.turns) == 2
    assert result.envelope.execution is not None
    assert result.envelope.execution.retry_count == 1


async def test_live_replay_calls_the_model_past_the_stored_answers() -> None:
    live = Live()
    wrong = _answer('{"city": "Oslo", "population": "many"}')
    client = ReplayClient(live, [wrong], live=True)
    result = await run_job(_spec(), Runtime(client=client))
    assert result.envelope.status == "success"
    assert live.calls == 1
    assert len(client.fresh) == 1


async def test_a_failed_line_replays_as_the_provider_error_it_was() -> None:
    failure = LineFailure("p", "m", "the batch line failed (status 500)")
    assert isinstance(answer_of(stored(failure)), LineFailure)
    client = ReplayClient(Live(), [failure])
    result = await run_job(_spec(), Runtime(client=client))
    assert result.envelope.status == "error"
    assert result.envelope.error == ProviderUnavailable.code


def test_a_stored_answer_that_is_not_ours_is_refused() -> None:
    with pytest.raises((ValueError, KeyError)):
        answer_of({"f": "nonsense", "m": "m", "p": "p"})
