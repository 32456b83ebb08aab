"""The turn loop: spec 000's testing strategy in Python, and the rest of the loop's contract."""

from __future__ import annotations

import json
from typing import Any

import pytest

from app.core.turn.loop import JobResult, Runtime, Tool, run_job
from app.core.turn.model import LLMRequest, LLMResponse, ToolSpec
from app.core.wire import codes
from app.core.wire.errors import ProviderRateLimited, ProviderTimeout
from app.core.wire.events import LoopEvent, TurnEnded, TurnStarted
from app.core.wire.spec import Budget, JobSpec
from tests.core.fakes import FakeClock, ScriptedClient, Step, answer, call, reply

X_INT = "() -> {x :int}"


def job(**overrides: Any) -> JobSpec:
    budget = overrides.pop("budget", {})
    data: dict[str, Any] = {"task": "Return data", "signature": X_INT, **overrides}
    data["budget"] = Budget.model_validate(budget)
    return JobSpec.model_validate(data)


async def run(spec: JobSpec, client: ScriptedClient, **runtime: Any) -> JobResult:
    return await run_job(
        spec, Runtime(client=client, clock=runtime.pop("clock", FakeClock()), **runtime)
    )


def types(result: JobResult) -> list[str]:
    return [t.type for t in result.turns]


# -- spec 000 "Testing Strategy" --------------------------------------------------------------


def test_return_retries_defaults_to_0() -> None:
    assert Budget().return_retries == 0
    assert JobSpec(task="t", signature=X_INT).budget.return_retries == 0


async def test_return_retries_1_allows_one_correction_attempt_in_must_return_mode() -> None:
    client = ScriptedClient([answer({"x": "not_int"}), answer({"x": 42})])
    result = await run(job(budget={"maxTurns": 1, "returnRetries": 1}), client)
    assert result.envelope.status == "success"
    assert result.envelope.data == {"x": 42}
    assert len(result.turns) == 2
    assert types(result) == ["must_return", "retry"]


async def test_early_return_failure_consumes_work_turn_not_retry() -> None:
    client = ScriptedClient([answer({"x": "bad"}), answer({"x": 42})])
    result = await run(job(budget={"maxTurns": 5, "returnRetries": 0}), client)
    assert result.envelope.data == {"x": 42}
    assert len(result.turns) == 2
    assert types(result) == ["normal", "normal"]


async def test_tools_are_stripped_in_must_return_mode() -> None:
    foo = Tool(ToolSpec("foo", "returns bar", {"type": "object"}), lambda _args: "bar")
    client = ScriptedClient([answer({"x": 42})])
    result = await run(job(budget={"maxTurns": 1}), client, tools=[foo])
    assert result.envelope.status == "success"
    request = client.requests[0]
    assert request.tools == ()
    assert "foo" not in request.messages[0].content


async def test_budget_exhausted_when_all_turns_consumed() -> None:
    client = ScriptedClient([answer({"x": "bad"}), answer({"x": "still_bad"})])
    result = await run(job(budget={"maxTurns": 1, "returnRetries": 1}), client)
    assert result.envelope.status == "error"
    assert result.envelope.error == codes.BUDGET_EXHAUSTED
    assert result.envelope.cause == codes.LLM_INVALID_OUTPUT
    assert "still_bad" in (result.envelope.detail or "")


async def test_explicit_fail_does_not_trigger_retry() -> None:
    client = ScriptedClient([reply('{"$fail": "intentional"}')] * 6)
    result = await run(job(budget={"maxTurns": 1, "returnRetries": 5}), client)
    assert result.envelope.error == codes.EXPLICIT_FAIL
    assert result.envelope.detail == "intentional"
    assert len(result.turns) == 1
    assert result.turns[0].outcome == "explicit_fail"


async def test_context_is_collapsed_across_retries() -> None:
    client = ScriptedClient([answer({"x": "bad"})] * 4)
    result = await run(job(budget={"maxTurns": 1, "returnRetries": 3}), client)
    assert result.envelope.error == codes.BUDGET_EXHAUSTED
    counts = [len(r.messages) for r in client.requests]
    # system + task (a one-turn job's first call has no turn note), then system + task +
    # latest answer + latest feedback on every retry
    assert counts == [2, 4, 4, 4]
    sizes = [sum(len(m.content) for m in r.messages) for r in client.requests[1:]]
    assert max(sizes) - min(sizes) <= 40  # only "had"/"still had" and attempt digits differ
    # the task is still there on the last retry
    assert "Return data" in client.requests[-1].messages[1].content


async def test_return_retries_works_with_json_output_mode() -> None:
    client = ScriptedClient([reply('{"x": "not_int"}'), reply('{"x": 42}')])
    result = await run(job(budget={"maxTurns": 1, "returnRetries": 1}), client)
    assert result.envelope.data == {"x": 42}


async def test_turn_types_are_correctly_traced() -> None:
    events: list[LoopEvent] = []
    foo = Tool(ToolSpec("foo", "returns bar", {"type": "object"}), lambda _args: "bar")
    client = ScriptedClient([call("foo"), call("foo"), answer({"x": "bad"}), answer({"x": 42})])
    result = await run(
        job(budget={"maxTurns": 3, "returnRetries": 1}), client, tools=[foo], tracer=events.append
    )
    assert result.envelope.status == "success"
    starts = [e for e in events if isinstance(e, TurnStarted)]
    ends = [e.summary() for e in events if isinstance(e, TurnEnded)]
    assert [(s.turn, s.type, s.tools_count) for s in starts] == [
        (1, "normal", 1),
        (2, "normal", 1),
        (3, "must_return", 0),
        (4, "retry", 0),
    ]
    assert starts[3].attempt == 2
    assert starts[3].remaining == 1
    assert [e.result for e in ends] == ["tool_calls", "tool_calls", "invalid", "success"]
    # error evolution: the diagnosis of the rejected answer travels with its turn_end
    assert "$.x" in (ends[2].diagnosis or "")


# -- spec 000 turn counting examples -----------------------------------------------------------


async def test_single_shot_without_retries_makes_one_call() -> None:
    client = ScriptedClient([reply("{x: oops")])
    result = await run(
        job(budget={"maxTurns": 1}),
        client,
    )
    assert result.envelope.error == codes.BUDGET_EXHAUSTED
    assert len(client.requests) == 1
    assert types(result) == ["must_return"]


async def test_multi_turn_with_retry_makes_four_calls() -> None:
    looked: list[dict[str, Any]] = []

    def look_up(args: dict[str, Any]) -> dict[str, Any]:
        looked.append(args)
        return {"x": 42}

    lookup = Tool(
        ToolSpec("lookup", "find x", {"type": "object", "properties": {"q": {"type": "string"}}}),
        look_up,
    )
    client = ScriptedClient(
        [
            call("lookup", {"q": "a"}),
            call("lookup", {"q": "b"}),
            answer({"x": "?"}),
            answer({"x": 42}),
        ]
    )
    result = await run(job(budget={"maxTurns": 3, "returnRetries": 1}), client, tools=[lookup])
    assert types(result) == ["normal", "normal", "must_return", "retry"]
    assert looked == [{"q": "a"}, {"q": "b"}]
    # tool results reach the model, and tools are offered only on work turns
    assert [len(r.tools) for r in client.requests] == [1, 1, 0, 0]
    assert client.requests[2].messages[-2].role == "tool"
    assert '{"x": 42}' in client.requests[2].messages[-2].content
    assert result.envelope.execution is not None
    assert result.envelope.execution.retry_count == 1
    assert result.envelope.execution.llm_calls == 4


async def test_tool_errors_and_unknown_tools_are_reported_to_the_model() -> None:
    def boom(_args: dict[str, Any]) -> str:
        raise RuntimeError("disk on fire")

    tool = Tool(ToolSpec("boom", "fails", {"type": "object"}), boom)
    client = ScriptedClient([call("boom"), call("nope", id="c2"), answer({"x": 1})])
    result = await run(job(budget={"maxTurns": 3}), client, tools=[tool])
    assert result.envelope.status == "success"
    tool_msgs = [m for m in client.requests[2].messages if m.role == "tool"]
    assert "Tool error: RuntimeError: disk on fire" in tool_msgs[0].content
    assert 'no tool named "nope"' in tool_msgs[1].content


async def test_tool_call_on_a_must_return_turn_is_rejected_with_feedback() -> None:
    client = ScriptedClient([call("foo"), answer({"x": 3})])
    result = await run(job(budget={"maxTurns": 1, "returnRetries": 1}), client)
    assert result.turns[0].outcome == "invalid"
    assert "tools are not available" in client.requests[1].messages[-1].content
    assert result.envelope.data == {"x": 3}


# -- budget validation --------------------------------------------------------------------------


@pytest.mark.parametrize(
    "budget",
    [{"returnRetries": -1}, {"returnRetries": "1"}, {"maxTurns": 0}, {"maxTurns": 1.5}],
)
def test_invalid_budgets_are_rejected(budget: dict[str, Any]) -> None:
    with pytest.raises(ValueError, match=r"budget|Input should|greater"):
        JobSpec.model_validate({"task": "t", "signature": X_INT, "budget": budget})


@pytest.mark.parametrize(
    "budget",
    [
        {"maxTurns": 1, "returnRetries": 0},
        {"maxTurns": 1, "returnRetries": 3},
        {"maxTurns": 5, "returnRetries": 1},
        {"maxTurns": 5, "returnRetries": 0},
    ],
)
def test_valid_budgets_are_accepted(budget: dict[str, Any]) -> None:
    spec = JobSpec.model_validate({"task": "t", "signature": X_INT, "budget": budget})
    assert spec.budget.max_calls == budget["maxTurns"] + budget["returnRetries"]


# -- feedback --------------------------------------------------------------------------------


async def test_feedback_names_the_path_and_quotes_the_answer_back() -> None:
    client = ScriptedClient([answer({"x": "3 units"}), answer({"x": 3})])
    await run(job(budget={"maxTurns": 1, "returnRetries": 1}), client)
    retry = client.requests[1].messages
    assert retry[2].role == "assistant"
    assert retry[2].content == '{"x": "3 units"}'
    feedback = retry[3].content
    assert '$.x: expected integer, got string "3 units"' in feedback
    assert "Correction attempt 1 of 1." in feedback


async def test_syntax_errors_carry_line_column_and_caret() -> None:
    client = ScriptedClient([reply('{\n  "x": 1\n  "y": 2\n}'), answer({"x": 3})])
    await run(
        job(signature="{x :int, y :int?}", strict=True, budget={"maxTurns": 1, "returnRetries": 1}),
        client,
    )
    feedback = client.requests[1].messages[3].content
    assert "line 3, column 3" in feedback
    assert "^" in feedback


async def test_first_and_subsequent_feedback_differ() -> None:
    client = ScriptedClient([answer({"x": "a"}), answer({"x": "b"}), answer({"x": 1})])
    await run(job(budget={"maxTurns": 1, "returnRetries": 2}), client)
    assert "Your previous answer had an error" in client.requests[1].messages[-1].content
    assert "still had an error" in client.requests[2].messages[-1].content


async def test_custom_retry_prompt_replaces_the_template() -> None:
    client = ScriptedClient([answer({"x": "a"}), answer({"x": 1})])
    spec = job(
        budget={"maxTurns": 1, "returnRetries": 1},
        retryPrompt="FIX THIS ({{attempt}}/{{total_retries}}): {{{diagnosis}}}",
    )
    await run(spec, client)
    feedback = client.requests[1].messages[-1].content
    assert feedback.startswith("FIX THIS (1/1): The answer does not match the schema")


async def test_quoted_answer_is_truncated() -> None:
    huge = '{"x": "' + "y" * 50_000 + '"}'
    client = ScriptedClient([reply(huge), answer({"x": 1})])
    await run(job(budget={"maxTurns": 1, "returnRetries": 1}), client)
    quoted = client.requests[1].messages[2].content
    assert len(quoted) < 2500
    assert "characters of your answer omitted" in quoted


async def test_full_feedback_mode_keeps_every_attempt() -> None:
    client = ScriptedClient([answer({"x": "a"}), answer({"x": "b"}), answer({"x": 1})])
    await run(job(feedback="full", budget={"maxTurns": 1, "returnRetries": 2}), client)
    assert [len(r.messages) for r in client.requests] == [2, 4, 6]


async def test_repairs_are_warnings_and_strict_turns_them_off() -> None:
    sloppy = "{'x': 42,}"
    result = await run(job(budget={"maxTurns": 1}), ScriptedClient([reply(sloppy)]))
    assert result.envelope.data == {"x": 42}
    assert any(w.startswith("repair:") for w in result.envelope.warnings)

    strict = await run(job(strict=True, budget={"maxTurns": 1}), ScriptedClient([reply(sloppy)]))
    assert strict.envelope.error == codes.BUDGET_EXHAUSTED


# -- budgets beyond turns -----------------------------------------------------------------------


async def test_cost_limit_stops_before_overspending() -> None:
    price = 0.000004

    def verbose(request: LLMRequest) -> LLMResponse:
        # a model that always writes 900 tokens, or as many as it is allowed
        out = min(900, request.max_output_tokens)
        return answer({"x": "a"}, usage=(100, out), cost=(100 + out) * price)

    client = ScriptedClient([verbose] * 8, price_per_token=price)
    spec = job(budget={"maxTurns": 1, "returnRetries": 7, "maxCostUsd": 0.01}, maxOutputTokens=1000)
    result = await run(spec, client)
    assert result.envelope.error == codes.COST_LIMIT
    assert result.envelope.execution is not None
    assert result.envelope.execution.cost is not None
    assert result.envelope.execution.cost <= 0.01
    # the third call still fit, with a smaller output limit; the fourth did not
    assert [r.max_output_tokens for r in client.requests][:2] == [1000, 1000]
    assert client.requests[2].max_output_tokens < 900
    assert len(client.requests) == 3


async def test_cost_limit_with_unknown_price_refuses_to_call() -> None:
    client = ScriptedClient([answer({"x": 1})], price_per_token=None)
    result = await run(job(budget={"maxCostUsd": 1.0}), client)
    assert result.envelope.error == codes.COST_LIMIT
    assert client.requests == []


async def test_token_budget_shrinks_output_then_stops() -> None:
    client = ScriptedClient([answer({"x": "a"}, usage=(300, 200))] * 5)
    spec = job(budget={"maxTurns": 1, "returnRetries": 4, "maxTokens": 1500}, maxOutputTokens=1000)
    result = await run(spec, client)
    assert result.envelope.error == codes.TOKEN_BUDGET
    assert client.requests[0].max_output_tokens == 1000
    assert client.requests[1].max_output_tokens < 1000  # shrunk to fit what is left
    assert result.envelope.execution is not None
    assert result.envelope.execution.tokens_used <= 1500


async def test_deadline_ends_the_job_between_turns() -> None:
    clock = FakeClock()
    client = ScriptedClient([answer({"x": "a"})] * 5, clock=clock, seconds_per_call=2.0)
    result = await run(
        job(budget={"maxTurns": 1, "returnRetries": 4, "deadlineMs": 5000}), client, clock=clock
    )
    assert result.envelope.error == codes.DEADLINE_EXCEEDED
    assert len(client.requests) == 3
    assert client.requests[1].timeout_s == pytest.approx(3.0)


async def test_truncated_answer_is_retried_with_a_larger_limit_without_the_fragment() -> None:
    client = ScriptedClient([reply('{"x": 4', finish="length"), answer({"x": 4})])
    result = await run(job(maxOutputTokens=100, budget={"maxTurns": 1, "returnRetries": 1}), client)
    assert result.envelope.data == {"x": 4}
    assert result.turns[0].outcome == "truncated"
    assert result.turns[0].error_code == codes.LLM_TOKEN_LIMIT
    assert [r.max_output_tokens for r in client.requests] == [100, 200]
    # the same prompt again: the fragment is not fed back
    assert all('{"x": 4' not in m.content for m in client.requests[1].messages)
    assert len(client.requests[1].messages) == 3  # system, task, turn note


async def test_truncation_growth_is_bounded_by_the_cap() -> None:
    client = ScriptedClient([reply("{", finish="length")] * 4)
    spec = job(
        maxOutputTokens=100, maxOutputTokensCap=250, budget={"maxTurns": 1, "returnRetries": 3}
    )
    result = await run(spec, client)
    assert [r.max_output_tokens for r in client.requests] == [100, 200, 250, 250]
    assert result.envelope.cause == codes.LLM_TOKEN_LIMIT
    # at the cap, the model is told to be concise instead
    assert "cut off after 250 tokens" in client.requests[3].messages[-1].content


# -- envelope -------------------------------------------------------------------------------------


async def test_envelope_execution_counts_calls_tokens_and_waste() -> None:
    client = ScriptedClient(
        [
            answer({"x": "a"}, usage=(100, 10), cost=0.002),
            answer({"x": 1}, usage=(150, 5), cost=0.003),
        ]
    )
    result = await run(job(budget={"maxTurns": 1, "returnRetries": 1}), client)
    env = result.envelope.model_dump()
    ex = env["execution"]
    assert ex["llmCalls"] == 2
    assert ex["retryCount"] == 1
    assert ex["tokensUsed"] == 265
    assert ex["inputTokens"] == 250
    assert ex["wastedTokens"] == 110
    assert ex["cost"] == pytest.approx(0.005)
    assert ex["wastedCost"] == pytest.approx(0.002)
    assert ex["model"] == "fake-model"
    assert ex["provider"] == "fake"
    assert ex["timestamp"] == "2026-01-02T03:04:05.000Z"
    assert set(env) >= {"status", "data", "warnings", "execution", "provenance"}
    assert "error" not in env


async def test_unknown_price_gives_null_cost_not_zero() -> None:
    client = ScriptedClient([answer({"x": 1}, cost=None)])
    result = await run(job(), client)
    assert result.envelope.execution is not None
    assert result.envelope.execution.cost is None


async def test_provider_error_ends_the_job_with_its_code() -> None:
    client = ScriptedClient(
        [ProviderRateLimited("429 from upstream", provider="p", transport_retries=2)]
    )
    result = await run(job(budget={"maxTurns": 1, "returnRetries": 3}), client)
    assert result.envelope.error == codes.LLM_RATE_LIMIT
    assert len(result.turns) == 1
    assert result.turns[0].outcome == "error"
    assert result.envelope.execution is not None
    assert result.envelope.execution.transport_retries == 2
    assert result.envelope.execution.retry_count == 0


async def test_refusal_ends_the_job() -> None:
    client = ScriptedClient([reply(None, finish="refusal", refusal="I can't help with that")])
    result = await run(job(budget={"maxTurns": 1, "returnRetries": 2}), client)
    assert result.envelope.error == codes.LLM_REFUSAL
    assert result.envelope.detail == "I can't help with that"


async def test_invalid_signature_is_invalid_input_in_the_envelope() -> None:
    result = await run(job(signature="{x :strng}"), ScriptedClient([]))
    assert result.envelope.error == codes.INVALID_INPUT
    assert "position" in (result.envelope.detail or "")


async def test_cancellation_is_checked_between_turns() -> None:
    flag = {"cancel": False}

    def first(request: Any) -> Any:
        flag["cancel"] = True
        return answer({"x": "a"})

    client = ScriptedClient([first, answer({"x": 1})])
    result = await run(
        job(budget={"maxTurns": 1, "returnRetries": 1}), client, cancelled=lambda: flag["cancel"]
    )
    assert result.envelope.error == codes.CANCELLED
    assert len(client.requests) == 1


# -- retry with steering (spec 002) ---------------------------------------------------------


async def test_validator_diagnosis_becomes_the_correction_message() -> None:
    spec = job(
        signature="{lines [{amount :float}], total :float}",
        validators=[{"kind": "sum", "items": "$.lines[*].amount", "equals": "$.total"}],
        budget={"maxTurns": 1, "returnRetries": 1},
    )
    client = ScriptedClient(
        [
            answer({"lines": [{"amount": 1.5}, {"amount": 2}], "total": 4}),
            answer({"lines": [{"amount": 1.5}, {"amount": 2}], "total": 3.5}),
        ]
    )
    result = await run(spec, client)
    assert result.envelope.data["total"] == 3.5
    assert result.turns[0].outcome == "rejected"
    assert (
        "$.total is 4 but the sum of $.lines[*].amount is 3.5"
        in client.requests[1].messages[-1].content
    )


async def test_programmatic_validator_black_box() -> None:
    async def even(value: Any) -> tuple[bool, str | None]:
        return (value["x"] % 2 == 0, "x must be even")

    client = ScriptedClient([answer({"x": 3}), answer({"x": 4})])
    result = await run(job(budget={"maxTurns": 1, "returnRetries": 1}), client, validators=[even])
    assert result.envelope.data == {"x": 4}
    assert "x must be even" in client.requests[1].messages[-1].content


async def test_purify_and_provenance() -> None:
    def script() -> ScriptedClient:
        return ScriptedClient([answer({"x": "a"}), answer({"x": "b"}), answer({"x": 1})])

    budget = {"maxTurns": 1, "returnRetries": 2}
    plain = await run(job(budget=budget), script())
    pure = await run(job(budget=budget, purify=True), script())
    assert [m.role for m in plain.transcript] == [
        "system",
        "user",
        "assistant",
        "user",
        "assistant",
        "user",
        "assistant",
    ]
    assert [m.role for m in pure.transcript] == ["system", "user", "assistant"]
    assert json.loads(pure.transcript[-1].content) == {"x": 1}
    # the failures stay in the turn records and the history
    assert len(pure.turns) == 3
    assert [h.turn for h in pure.history] == [1, 2]
    provenance = pure.envelope.provenance or ""
    assert provenance.startswith("resolved after 2 retries: ")
    assert "$.x: expected integer" in provenance


async def test_no_provenance_when_first_answer_is_valid() -> None:
    result = await run(job(), ScriptedClient([answer({"x": 1})]))
    assert result.envelope.provenance is None
    assert result.history == ()


# -- self-healing extras (spec 004) -----------------------------------------------------------


async def test_fallback_is_returned_with_a_warning_when_every_attempt_fails() -> None:
    client = ScriptedClient([answer({"x": "a"}), answer({"x": "b"})])
    spec = job(budget={"maxTurns": 1, "returnRetries": 1}, fallback={"data": {"x": 0}})
    result = await run(spec, client)
    assert result.envelope.status == "success"
    assert result.envelope.data == {"x": 0}
    assert any("fallback" in w for w in result.envelope.warnings)


async def test_fallback_is_off_by_default() -> None:
    result = await run(job(budget={"maxTurns": 1}), ScriptedClient([answer({"x": "a"})]))
    assert result.envelope.status == "error"


async def test_fallback_must_match_the_schema() -> None:
    result = await run(job(fallback={"data": {"x": "zero"}}), ScriptedClient([]))
    assert result.envelope.error == codes.INVALID_INPUT
    assert "fallback.data" in (result.envelope.detail or "")


async def test_simplified_request_on_the_final_attempt() -> None:
    client = ScriptedClient([answer({"x": "a"}), answer({"x": "b"}), answer({"x": 1})])
    spec = job(simplifyOnFinalAttempt=True, budget={"maxTurns": 1, "returnRetries": 2})
    result = await run(spec, client)
    assert [t.simplified for t in result.turns] == [False, False, True]
    final = client.requests[2].messages
    assert len(final) == 2
    assert final[0].content.startswith("Final attempt.")
    assert "$.x: expected integer" in final[1].content


async def test_escalation_to_another_model_on_must_return_and_retry_turns() -> None:
    client = ScriptedClient([answer({"x": "a"}), answer({"x": "b"}), answer({"x": 1})])
    spec = job(model="small", escalateModel="big", budget={"maxTurns": 2, "returnRetries": 1})
    result = await run(spec, client)
    assert [r.model for r in client.requests] == ["small", "big", "big"]
    assert [t.escalated for t in result.turns] == [False, True, True]


async def test_escalation_waits_for_a_rejected_answer() -> None:
    client = ScriptedClient([answer({"x": "a"}), answer({"x": 1})])
    spec = job(model="small", escalateModel="big", budget={"maxTurns": 1, "returnRetries": 1})
    await run(spec, client)
    assert [r.model for r in client.requests] == ["small", "big"]


# -- prompts ------------------------------------------------------------------------------------


async def test_system_prompt_shows_schema_and_how_to_fail_but_no_example() -> None:
    client = ScriptedClient([answer({"x": "a"}), answer({"x": 1})])
    await run(job(budget={"maxTurns": 1, "returnRetries": 1}), client)
    system = client.requests[0].messages[0].content
    assert '"x"' in system
    assert "integer" in system
    assert '{"$fail"' in system
    # small models copy an example's placeholders; it comes with the first correction instead
    assert "placeholder" not in system
    assert '{"x": 0}' in client.requests[1].messages[-1].content


async def test_native_structured_output_leaves_the_schema_out_of_the_prompt() -> None:
    client = ScriptedClient([answer({"x": 1})], mode="json_schema")
    await run(job(), client)
    assert "JSON Schema" not in client.requests[0].messages[0].content
    assert client.requests[0].output_schema is not None


async def test_input_and_plan_are_in_the_task_message() -> None:
    client = ScriptedClient([answer({"x": 1})])
    await run(job(input={"doc": "hello"}, plan=["read", "answer"]), client)
    task = client.requests[0].messages[1].content
    assert "<input>" in task
    assert '"doc": "hello"' in task
    assert "- [ ] read" in task


async def test_must_return_warning_mentions_remaining_corrections() -> None:
    lookup = Tool(ToolSpec("lookup", "finds a price", {"type": "object"}), lambda _a: "4.50")
    client = ScriptedClient([call("lookup"), answer({"x": 1})])
    await run(job(budget={"maxTurns": 2, "returnRetries": 2}), client, tools=[lookup])
    assert "final turn" not in client.requests[0].messages[-1].content
    assert "you will have 2 correction attempt(s)" in client.requests[1].messages[-1].content


async def test_a_one_turn_job_gets_no_must_return_warning() -> None:
    # It has nothing to give but its answer: the warning would only cost tokens.
    client = ScriptedClient([answer({"x": "bad"}), answer({"x": 1})])
    await run(job(budget={"maxTurns": 1, "returnRetries": 2}), client)
    first, retry = client.requests
    assert [m.role for m in first.messages] == ["system", "user"]
    assert "final turn" not in retry.messages[-1].content
    assert "Correction attempt 1 of 2." in retry.messages[-1].content


async def test_a_model_without_native_structured_output_is_invalid_input_not_a_crash() -> None:
    client = ScriptedClient([answer({"x": 1})], mode="prompt")
    result = await run(job(structuredOutput="native"), client)
    assert result.envelope.error == codes.INVALID_INPUT
    assert client.requests == []


async def test_an_escalation_model_without_native_mode_ends_with_invalid_input() -> None:
    client = ScriptedClient([answer({"x": "a"}), answer({"x": 1})], mode="json_schema")
    spec = job(
        structuredOutput="native",
        escalateModel="prompt-only",
        budget={"maxTurns": 1, "returnRetries": 1},
    )
    result = await run(spec, client)
    assert result.envelope.error == codes.INVALID_INPUT
    assert len(client.requests) == 1


async def test_a_provider_timeout_at_the_deadline_is_the_deadline() -> None:
    clock = FakeClock()

    def late(_request: LLMRequest) -> LLMResponse:
        clock.advance(2.0)  # the call used up the job's deadline
        raise ProviderTimeout("timed out", provider="p")

    client = ScriptedClient([late])
    result = await run(job(budget={"maxTurns": 1, "deadlineMs": 1500}), client, clock=clock)
    assert result.envelope.error == codes.DEADLINE_EXCEEDED


async def test_a_provider_timeout_well_before_the_deadline_stays_llm_timeout() -> None:
    client = ScriptedClient([ProviderTimeout("timed out", provider="p")])
    result = await run(job(budget={"maxTurns": 1, "deadlineMs": 60_000}), client)
    assert result.envelope.error == codes.LLM_TIMEOUT


# -- repeated answers (issue 14) ------------------------------------------------------------------


async def test_a_repeated_rejected_answer_is_marked_and_sampled_more_freely() -> None:
    client = ScriptedClient([answer({"x": "a"}), reply('{ "x" : "a" }'), answer({"x": 3})])
    result = await run(job(budget={"maxTurns": 1, "returnRetries": 3}, seed=5), client)
    assert result.envelope.data == {"x": 3}
    assert [t.repeat_of for t in result.turns] == [None, 1, None]
    # the first re-ask as asked; after the repeat, a higher temperature and a new seed
    assert [(r.temperature, r.seed) for r in client.requests] == [(None, 5), (None, 5), (0.7, 6)]


async def test_a_model_that_keeps_repeating_itself_is_stopped_early() -> None:
    client = ScriptedClient([answer({"x": "a"})] * 6)
    result = await run(job(budget={"maxTurns": 1, "returnRetries": 5}), client)
    assert len(client.requests) == 4  # the answer, then three repeats: not six calls
    assert result.envelope.error == codes.BUDGET_EXHAUSTED
    assert result.envelope.cause == "repeated-answer"
    assert "turn 1 again, 3 times" in (result.envelope.detail or "")
    assert [r.temperature for r in client.requests] == [None, None, 0.7, 1.0]


async def test_truncated_fragments_are_not_repeats() -> None:
    steps: list[Step] = [reply("{", finish="length")] * 3
    client = ScriptedClient([*steps, answer({"x": 1})])
    result = await run(job(budget={"maxTurns": 1, "returnRetries": 3}), client)
    assert result.envelope.data == {"x": 1}
    assert all(t.repeat_of is None for t in result.turns)


async def test_tool_calls_where_none_are_offered_repeat_only_when_the_calls_are_the_same() -> None:
    client = ScriptedClient(
        [call("foo", {"q": 1}), call("foo", {"q": 2}), call("foo", {"q": 2}), answer({"x": 1})]
    )
    result = await run(job(budget={"maxTurns": 1, "returnRetries": 3}), client)
    assert result.envelope.data == {"x": 1}
    assert [t.repeat_of for t in result.turns] == [None, None, 2, None]
