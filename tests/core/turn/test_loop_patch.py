"""The loop's field-level re-asks and best-of-N (issue 14, parts 2 and 3), over a scripted
model client."""

from __future__ import annotations

import json
from typing import Any

from app.core.turn.loop import JobResult, Runtime, run_job
from app.core.turn.model import Choice, LLMResponse
from app.core.wire import codes
from app.core.wire.spec import JobSpec
from tests.core.fakes import FakeClock, ScriptedClient, Step, answer

PERSON = "{name :string, age :int, city :string}"


def job(**fields: Any) -> JobSpec:
    data: dict[str, Any] = {
        "task": "Extract the person",
        "signature": PERSON,
        "budget": {"maxTurns": 1, "returnRetries": 3},
        **fields,
    }
    return JobSpec.model_validate(data)


async def run(spec: JobSpec, client: ScriptedClient) -> JobResult:
    return await run_job(spec, Runtime(client=client, clock=FakeClock()))


def several(*contents: str, usage: tuple[int, int] = (100, 20)) -> LLMResponse:
    first, *rest = (answer(json.loads(c), usage=usage) for c in contents)
    return LLMResponse(
        content=first.content,
        finish_reason="stop",
        model=first.model,
        provider=first.provider,
        usage=first.usage,
        cost_usd=0.003,
        alternatives=tuple(Choice(r.content, "stop") for r in rest),
    )


WRONG_AGE = {"name": "Ada", "age": "thirty", "city": "Paris"}


async def test_a_patch_asks_for_the_failing_field_alone_and_merges_the_answer() -> None:
    client = ScriptedClient([answer(WRONG_AGE), answer({"/age": 30})], mode="json_schema")
    result = await run(job(), client)
    assert result.envelope.status == "success"
    assert result.envelope.data == {"name": "Ada", "age": 30, "city": "Paris"}
    second = client.requests[1]
    assert second.output_schema is not None
    assert list(second.output_schema["properties"]) == ["/age"]
    assert second.output_schema["required"] == ["/age"]
    assert [t.patch for t in result.turns] == [None, ("/age",)]
    assert result.turns[1].type == "retry"
    assert any(w.startswith("patch: re-asked for /age") for w in result.envelope.warnings)
    # the correction names the part and its current value, and shows the sub-schema
    feedback = second.messages[-1].content
    assert '/age (now: "thirty")' in feedback
    assert '"/age"' in feedback
    assert result.transcript[-1].content == json.dumps(result.envelope.data)


async def test_retry_mode_whole_asks_for_the_whole_answer_again() -> None:
    client = ScriptedClient([answer(WRONG_AGE), answer({**WRONG_AGE, "age": 30})])
    result = await run(job(retryMode="whole"), client)
    assert result.envelope.status == "success"
    assert client.requests[1].output_schema == client.requests[0].output_schema
    assert all(t.patch is None for t in result.turns)


async def test_a_merge_that_still_fails_is_patched_again_within_the_budget() -> None:
    client = ScriptedClient([answer(WRONG_AGE), answer({"/age": "still no"}), answer({"/age": 31})])
    result = await run(job(), client)
    assert result.envelope.status == "success"
    assert result.envelope.data["age"] == 31
    assert [t.patch for t in result.turns] == [None, ("/age",), ("/age",)]
    execution = result.envelope.execution
    assert execution is not None
    assert execution.retry_count == 2


async def test_an_unreadable_patch_answer_is_asked_for_again_as_a_patch() -> None:
    broken = answer({"/age": 1})
    broken = LLMResponse(
        content='{"/age": ', finish_reason="stop", model="m", provider="p", usage=broken.usage
    )
    client = ScriptedClient([answer(WRONG_AGE), broken, answer({"/age": 7})])
    result = await run(job(), client)
    assert result.envelope.status == "success"
    assert result.envelope.data["age"] == 7
    assert [t.patch for t in result.turns] == [None, ("/age",), ("/age",)]


async def test_when_every_field_fails_auto_asks_for_the_whole_answer() -> None:
    bad = {"name": 1, "age": "x", "city": 2}
    client = ScriptedClient([answer(bad), answer({"name": "A", "age": 1, "city": "B"})])
    result = await run(job(), client)
    assert result.envelope.status == "success"
    assert result.turns[1].patch is None


async def test_a_repeated_patch_answer_for_the_same_parts_is_a_repeat() -> None:
    steps: list[Step] = [answer(WRONG_AGE), *[answer({"/age": "x"})] * 3]
    client = ScriptedClient(steps)
    result = await run(job(), client)
    assert [t.repeat_of for t in result.turns] == [None, None, 2, 2]
    assert result.envelope.status == "error"


async def test_best_of_n_keeps_the_first_valid_answer_and_counts_them_all() -> None:
    wrong = json.dumps(WRONG_AGE)
    right = json.dumps({**WRONG_AGE, "age": 30})
    other = json.dumps({**WRONG_AGE, "age": 40})
    client = ScriptedClient([several(wrong, right, other)])
    result = await run(job(candidates=3), client)
    assert client.requests[0].n == 3
    assert result.envelope.status == "success"
    assert result.envelope.data["age"] == 30
    turn = result.turns[0]
    assert (turn.candidates, turn.chosen) == (3, 1)
    assert turn.usage.output_tokens == 20
    execution = result.envelope.execution
    assert execution is not None
    assert execution.cost == 0.003


async def test_best_of_n_samples_its_answers_apart() -> None:
    # Greedy decoding would give one answer N times: several answers are sampled at least
    # at CANDIDATE_TEMPERATURE with a seed (the router gives each its own, seed + k); a
    # single answer keeps the job's temperature.
    wrong = json.dumps(WRONG_AGE)
    client = ScriptedClient([several(wrong, wrong), answer({"/age": 3})])
    result = await run(job(candidates={"n": 2, "on": "all"}, temperature=0), client)
    first = client.requests[0]
    assert (first.n, first.temperature, first.seed) == (2, 0.7, 0)
    assert result.envelope.status == "success"
    client = ScriptedClient([answer({**WRONG_AGE, "age": 1})])
    await run(job(temperature=0.2, seed=9), client)
    assert (client.requests[0].temperature, client.requests[0].seed) == (0.2, 9)


async def test_best_of_n_with_none_valid_goes_on_with_the_first_answer() -> None:
    wrong = json.dumps(WRONG_AGE)
    worse = json.dumps({"name": 1, "age": "x", "city": 2})
    client = ScriptedClient([several(wrong, worse), several(json.dumps({"/age": 3}), worse)])
    result = await run(job(candidates=2), client)
    assert result.envelope.status == "success"
    assert result.envelope.data["age"] == 3
    assert [(t.candidates, t.chosen) for t in result.turns] == [(2, 0), (2, 0)]
    assert result.turns[1].patch == ("/age",)


async def test_candidates_on_final_ask_for_several_only_on_the_last_call() -> None:
    wrong = answer({"name": 1, "age": "x", "city": 2})
    client = ScriptedClient(
        [wrong, wrong, several(json.dumps(WRONG_AGE), json.dumps({**WRONG_AGE, "age": 5}))]
    )
    spec = job(candidates={"n": 2, "on": "final"}, budget={"maxTurns": 1, "returnRetries": 2})
    result = await run(spec, client)
    assert [r.n for r in client.requests] == [1, 1, 2]
    assert result.envelope.status == "success"
    assert result.envelope.data["age"] == 5


async def test_a_budget_that_cannot_afford_n_answers_is_clamped_with_a_warning() -> None:
    client = ScriptedClient([answer({**WRONG_AGE, "age": 1})])
    spec = job(candidates=8, maxOutputTokens=100, budget={"maxTurns": 1, "maxTokens": 600})
    result = await run(spec, client)
    assert result.envelope.status == "success"
    assert 1 <= client.requests[0].n < 8
    assert any(w.startswith("candidates: asked for 8") for w in result.envelope.warnings)


async def test_n_answers_count_against_max_tokens_as_n_calls() -> None:
    client = ScriptedClient([])
    spec = job(candidates=2, maxOutputTokens=1000, budget={"maxTurns": 1, "maxTokens": 40})
    result = await run(spec, client)
    assert result.envelope.error == codes.TOKEN_BUDGET


async def test_a_validator_rejection_patches_the_paths_it_read() -> None:
    spec = job(
        signature="{name :string, low :int, high :int}",
        validators=[{"kind": "compare", "left": "$.low", "op": "<", "right": "$.high"}],
    )
    client = ScriptedClient(
        [answer({"name": "A", "low": 5, "high": 1}), answer({"/low": 0, "/high": 9})]
    )
    result = await run(spec, client)
    assert result.envelope.status == "success"
    assert result.envelope.data == {"name": "A", "low": 0, "high": 9}
    assert result.turns[1].patch == ("/low", "/high")


async def test_best_of_n_patches_from_the_first_answers_own_diagnosis() -> None:
    spec = job(
        signature="{name :string, low :int, high :int}",
        validators=[
            {"kind": "compare", "left": "$.low", "op": "<", "right": "$.high"},
            {"kind": "regex", "path": "$.name", "pattern": "^[A-Z]"},
        ],
        candidates=2,
    )
    first = json.dumps({"name": "A", "low": 5, "high": 1})  # fails the compare
    second = json.dumps({"name": "b", "low": 0, "high": 1})  # fails the regex
    client = ScriptedClient([several(first, second), several('{"/low": 0, "/high": 2}', "{}")])
    result = await run(spec, client)
    assert result.turns[1].patch == ("/low", "/high")
    assert result.envelope.status == "success"
