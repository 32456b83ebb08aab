"""Validators that call out: an LLM judge (through the job's model client, under its
budgets) and a webhook (through the runtime's hook). Their failures are theirs: the job
ends validator-unavailable, no re-ask is blamed on the model, the answer is recorded."""

from __future__ import annotations

from typing import Any

from app.core.answer.finding import Finding
from app.core.turn.loop import JobResult, Runtime, run_job
from app.core.wire import codes
from app.core.wire.errors import ProviderUnavailable, ValidatorUnavailable
from app.core.wire.spec import JobSpec, ValidatorSpec
from tests.core.fakes import FakeClock, ScriptedClient, answer, reply

RUBRIC = "The city must be the capital of the country."


def job(*validators: dict[str, Any], **extra: Any) -> JobSpec:
    return JobSpec.model_validate(
        {
            "task": "The capital of Chad?",
            "signature": "{city :string}",
            "validators": list(validators),
            "budget": {"maxTurns": 1, "returnRetries": 2},
            **extra,
        }
    )


JUDGE = {"kind": "judge", "model": "judge-model", "rubric": RUBRIC}


def grade(passed: bool, score: int = 5, reason: str = "fine") -> Any:
    return answer({"reason": reason, "score": score, "pass": passed}, usage=(50, 10), cost=0.0002)


async def run(spec: JobSpec, client: ScriptedClient, **runtime: Any) -> JobResult:
    return await run_job(spec, Runtime(client=client, clock=FakeClock(), **runtime))


async def test_a_judge_that_passes_the_answer_counts_apart_and_in_the_totals() -> None:
    client = ScriptedClient([answer({"city": "N'Djamena"}), grade(True)])
    result = await run(job(JUDGE), client)
    assert result.envelope.data == {"city": "N'Djamena"}
    judge_request = client.requests[1]
    assert judge_request.model == "judge-model"
    assert RUBRIC in judge_request.messages[1].content
    assert "N'Djamena" in judge_request.messages[1].content
    execution = result.envelope.execution
    assert execution is not None
    assert execution.llm_calls == 1
    assert (execution.validator_calls, execution.validator_tokens) == (1, 60)
    assert execution.tokens_used == 120 + 60
    assert execution.validator_cost == 0.0002
    assert execution.cost is not None
    assert abs(execution.cost - 0.0012) < 1e-9


async def test_a_judges_reason_steers_the_re_ask() -> None:
    client = ScriptedClient(
        [
            answer({"city": "Abéché"}),
            grade(False, 1, "Abéché is a city in Chad but not its capital"),
            answer({"city": "N'Djamena"}),
            grade(True),
        ]
    )
    result = await run(job(JUDGE), client)
    assert result.envelope.data == {"city": "N'Djamena"}
    assert "not its capital" in client.requests[2].messages[-1].content
    assert [t.outcome for t in result.turns] == ["rejected", "success"]
    assert result.envelope.execution is not None
    assert result.envelope.execution.validator_calls == 2


async def test_pass_if_min_score_decides_instead_of_the_judges_pass() -> None:
    spec = job({**JUDGE, "passIf": {"minScore": 4}})
    client = ScriptedClient([answer({"city": "x"}), grade(False, 4), answer({"city": "y"})])
    result = await run(spec, client)
    assert result.envelope.status == "success"
    assert len(client.requests) == 2


async def test_a_failing_judge_is_validator_unavailable_and_the_answer_is_kept() -> None:
    client = ScriptedClient(
        [answer({"city": "N'Djamena"}), ProviderUnavailable("down", provider="p")]
    )
    result = await run(job(JUDGE), client)
    assert result.envelope.error == codes.VALIDATOR_UNAVAILABLE
    assert "judge-model" in (result.envelope.detail or "")
    (turn,) = result.turns
    assert turn.outcome == "unchecked"
    assert turn.answer is not None
    assert "N'Djamena" in turn.answer
    assert result.history == ()  # nothing blamed on the model, nothing re-asked


async def test_a_judge_that_answers_nonsense_is_validator_unavailable() -> None:
    client = ScriptedClient([answer({"city": "x"}), reply("I think it is fine.")])
    result = await run(job(JUDGE), client)
    assert result.envelope.error == codes.VALIDATOR_UNAVAILABLE
    assert len(client.requests) == 2


async def test_the_judge_respects_the_jobs_token_budget() -> None:
    spec = job(JUDGE, budget={"maxTurns": 1, "maxTokens": 200})
    client = ScriptedClient([answer({"city": "x"}, usage=(150, 20))])
    result = await run(spec, client)
    assert result.envelope.error == codes.TOKEN_BUDGET
    assert "judge" in (result.envelope.detail or "")


async def test_a_webhook_diagnosis_steers_the_re_ask_with_the_attempt_number() -> None:
    seen: list[tuple[Any, int]] = []

    async def hook(spec: ValidatorSpec, value: Any, attempt: int) -> Finding:
        seen.append((value, attempt))
        assert spec.url == "https://checks.example.com/city"
        if value["city"] == "N'Djamena":
            return True, None
        return False, "the city is not in our registry of capitals"

    spec = job({"kind": "webhook", "url": "https://checks.example.com/city"})
    client = ScriptedClient([answer({"city": "Sarh"}), answer({"city": "N'Djamena"})])
    result = await run(spec, client, webhook=hook)
    assert result.envelope.status == "success"
    assert seen == [({"city": "Sarh"}, 1), ({"city": "N'Djamena"}, 2)]
    assert "registry of capitals" in client.requests[1].messages[-1].content


async def test_an_unavailable_webhook_ends_the_job_without_blaming_the_model() -> None:
    async def hook(spec: ValidatorSpec, value: Any, attempt: int) -> Finding:
        raise ValidatorUnavailable("the validator at checks.example.com did not answer")

    spec = job({"kind": "webhook", "url": "https://checks.example.com/city"})
    client = ScriptedClient([answer({"city": "Sarh"})])
    result = await run(spec, client, webhook=hook)
    assert result.envelope.error == codes.VALIDATOR_UNAVAILABLE
    assert result.turns[0].outcome == "unchecked"
    assert result.envelope.execution is not None
    assert result.envelope.execution.retry_count == 0


async def test_a_webhook_without_a_hook_is_unavailable() -> None:
    spec = job({"kind": "webhook", "url": "https://checks.example.com/city"})
    result = await run(spec, ScriptedClient([answer({"city": "x"})]))
    assert result.envelope.error == codes.VALIDATOR_UNAVAILABLE


async def test_an_in_process_validator_whose_model_call_fails_is_unavailable() -> None:
    def calls_a_model(value: Any) -> Finding:
        raise ProviderUnavailable("the grader's provider is down", provider="grader")

    client = ScriptedClient([answer({"city": "x"})])
    result = await run(job(), client, validators=[calls_a_model])
    assert result.envelope.error == codes.VALIDATOR_UNAVAILABLE
