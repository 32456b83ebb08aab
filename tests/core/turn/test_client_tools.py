"""Client tools in the pure loop: checked arguments, the pause, the checkpoint, the resume."""

from __future__ import annotations

import json
from typing import Any

import pytest
from pydantic import ValidationError

from app.core.turn.checkpoint import Checkpoint, Resume, ToolOutput
from app.core.turn.loop import JobResult, Runtime, run_job
from app.core.turn.model import ToolCall
from app.core.wire import codes
from app.core.wire.events import LoopEvent, ToolsAnswered
from app.core.wire.spec import JobSpec
from tests.core.fakes import FakeClock, ScriptedClient, answer, reply

LOOKUP = {
    "name": "lookup",
    "description": "Price of a SKU",
    "parameters": {
        "type": "object",
        "properties": {"sku": {"type": "string"}},
        "required": ["sku"],
        "additionalProperties": False,
    },
}
STOCK = {"name": "stock", "description": "Units in stock", "parameters": {"type": "object"}}


def job(**overrides: Any) -> JobSpec:
    data: dict[str, Any] = {
        "task": "Price of A1?",
        "signature": "{price :float}",
        "tools": [LOOKUP, STOCK],
        "budget": {"maxTurns": 3},
        **overrides,
    }
    return JobSpec.model_validate(data)


def calls(*pairs: tuple[str, Any], prefix: str = "c") -> Any:
    return reply(
        None,
        finish="tool_calls",
        tool_calls=[
            ToolCall(
                id=f"{prefix}{i}",
                name=name,
                arguments=args if isinstance(args, str) else json.dumps(args),
            )
            for i, (name, args) in enumerate(pairs, start=1)
        ],
    )


async def run(
    spec: JobSpec,
    client: ScriptedClient,
    *,
    resume: Resume | None = None,
    clock: FakeClock | None = None,
    events: list[LoopEvent] | None = None,
) -> JobResult:
    runtime = Runtime(
        client=client,
        clock=clock or FakeClock(),
        tracer=None if events is None else events.append,
    )
    return await run_job(spec, runtime, resume=resume)


def stored(checkpoint: Checkpoint | None) -> Checkpoint:
    """Through JSON, as the store keeps it."""
    assert checkpoint is not None
    return Checkpoint.model_validate_json(checkpoint.model_dump_json())


async def test_a_client_tool_call_pauses_the_job_with_its_calls() -> None:
    client = ScriptedClient([calls(("lookup", {"sku": "A1"}), ("stock", {}))])
    result = await run(job(), client)
    assert result.paused is not None
    assert result.envelope.progress is not None
    assert result.envelope.progress.phase == "requires_action"
    waiting = result.paused.waiting
    assert [(c.id, c.name, c.parsed) for c in waiting] == [
        ("c1", "lookup", {"sku": "A1"}),
        ("c2", "stock", {}),
    ]
    # the model was offered both tools on a normal turn, and the turn is recorded
    assert [t.name for t in client.requests[0].tools] == ["lookup", "stock"]
    (turn,) = result.turns
    assert (turn.type, turn.outcome, turn.tool_calls) == (
        "normal",
        "tool_calls",
        ("lookup", "stock"),
    )
    assert [d.outcome for d in turn.tool_call_details] == ["requires_action", "requires_action"]
    assert all(d.mode == "client" for d in turn.tool_call_details)
    # the work turn is spent at the pause
    assert result.paused.work_remaining == 2


async def test_resume_goes_on_with_the_outputs_in_the_collapsed_context() -> None:
    clock = FakeClock()
    first = await run(job(), ScriptedClient([calls(("lookup", {"sku": "A1"}))]), clock=clock)
    checkpoint = stored(first.paused)
    clock.advance(7.5)
    client = ScriptedClient([answer({"price": 9.5})])
    events: list[LoopEvent] = []
    outputs = {"c1": ToolOutput(tool_call_id="c1", output={"price": 9.5})}
    received = checkpoint.paused_ms + 2500
    result = await run(
        job(),
        client,
        clock=clock,
        resume=Resume(checkpoint, outputs, received_ms=received),
        events=events,
    )
    assert result.paused is None
    assert result.envelope.data == {"price": 9.5}
    sent = client.requests[0]
    # the tool exchange is in the prompt: the assistant's call, then the client's output
    assert [m.role for m in sent.messages[-3:-1]] == ["assistant", "tool"]
    assert sent.messages[-3].tool_calls[0].id == "c1"
    assert '{"price": 9.5}' in sent.messages[-2].content
    # both calls and the whole wait are counted: one execution over the two runs
    execution = result.envelope.execution
    assert execution is not None
    assert execution.llm_calls == 2
    assert execution.duration_ms == 7500
    assert [t.index for t in result.turns] == [1, 2]
    (answered,) = [e for e in events if isinstance(e, ToolsAnswered)]
    assert answered.calls[0].outcome == "ok"
    assert answered.calls[0].duration_ms == 2500


async def test_the_last_work_turn_after_a_pause_is_must_return_without_tools() -> None:
    spec = job(budget={"maxTurns": 2})
    first = await run(spec, ScriptedClient([calls(("stock", {}))]))
    checkpoint = stored(first.paused)
    client = ScriptedClient([answer({"price": 1.0})])
    outputs = {"c1": ToolOutput(tool_call_id="c1", output=3)}
    result = await run(spec, client, resume=Resume(checkpoint, outputs))
    assert [t.type for t in result.turns] == ["normal", "must_return"]
    assert client.requests[0].tools == ()


async def test_invalid_arguments_are_a_tool_error_and_spend_the_work_turn() -> None:
    client = ScriptedClient(
        [
            calls(("lookup", {"sku": 7}), ("lookup", "{not json"), ("nope", {})),
            answer({"price": 2.0}),
        ]
    )
    result = await run(job(), client)
    # nothing for the client: no pause; the model read three tool errors
    assert result.paused is None
    assert result.envelope.data == {"price": 2.0}
    details = result.turns[0].tool_call_details
    assert [d.outcome for d in details] == [
        "invalid_arguments",
        "invalid_arguments",
        "unknown_tool",
    ]
    tool_messages = [m.content for m in client.requests[1].messages if m.role == "tool"]
    assert "$.sku: expected string, got integer 7" in tool_messages[0]
    assert "not valid JSON" in tool_messages[1]
    assert 'no tool named "nope"' in tool_messages[2]
    assert [t.type for t in result.turns] == ["normal", "normal"]


async def test_a_mixed_turn_pauses_for_the_valid_call_and_keeps_the_error_for_the_model() -> None:
    first = await run(job(), ScriptedClient([calls(("lookup", {}), ("stock", {}))]))
    checkpoint = stored(first.paused)
    assert [c.name for c in checkpoint.waiting] == ["stock"]
    client = ScriptedClient([answer({"price": 3.0})])
    outputs = {"c2": ToolOutput(tool_call_id="c2", error="warehouse offline")}
    await run(job(), client, resume=Resume(checkpoint, outputs))
    tool_messages = [m.content for m in client.requests[0].messages if m.role == "tool"]
    assert '$: missing required field "sku"' in tool_messages[0]
    assert "Tool error: warehouse offline" in tool_messages[1]


async def test_without_outputs_the_job_fails_tool_timeout_with_its_spend() -> None:
    first = await run(job(), ScriptedClient([calls(("stock", {}))]))
    client = ScriptedClient([])
    result = await run(job(), client, resume=Resume(stored(first.paused), None))
    assert result.envelope.error == codes.TOOL_TIMEOUT
    assert "stock" in (result.envelope.detail or "")
    assert result.envelope.execution is not None
    assert result.envelope.execution.llm_calls == 1
    assert client.requests == []


async def test_without_outputs_the_job_can_go_on_in_must_return_mode() -> None:
    spec = job(budget={"maxTurns": 5}, onToolTimeout="must_return")
    first = await run(spec, ScriptedClient([calls(("stock", {}))]))
    client = ScriptedClient([answer({"price": 4.0})])
    result = await run(spec, client, resume=Resume(stored(first.paused), None))
    assert result.envelope.data == {"price": 4.0}
    assert [t.type for t in result.turns] == ["normal", "must_return"]
    assert client.requests[0].tools == ()
    assert any("toolTimeoutMs" in w for w in result.envelope.warnings)
    timed_out = [m.content for m in client.requests[0].messages if m.role == "tool"]
    assert "did not answer" in timed_out[0]


async def test_tool_choice_reaches_the_request_on_work_turns_only() -> None:
    client = ScriptedClient([calls(("stock", {}))])
    await run(job(toolChoice={"name": "stock"}), client)
    assert client.requests[0].forced_tool == "stock"
    client = ScriptedClient([answer({"price": 1.0})])
    await run(job(toolChoice="required", budget={"maxTurns": 1}), client)
    assert client.requests[0].tools == ()


async def test_purify_keeps_the_clean_tool_exchange() -> None:
    spec = job(purify=True)
    first = await run(spec, ScriptedClient([calls(("stock", {}))]))
    client = ScriptedClient([answer({"price": "x"}), answer({"price": 5.0})])
    outputs = {"c1": ToolOutput(tool_call_id="c1", output=12)}
    result = await run(spec, client, resume=Resume(stored(first.paused), outputs))
    roles = [m.role for m in result.transcript]
    assert roles == ["system", "user", "assistant", "tool", "assistant"]
    assert result.envelope.execution is not None
    assert result.envelope.execution.retry_count == 1


@pytest.mark.parametrize(
    ("tools", "choice", "needle"),
    [
        ([LOOKUP, LOOKUP], "auto", "used twice"),
        ([{**LOOKUP, "name": "final_answer"}], "auto", "reserved"),
        ([{**LOOKUP, "name": "bad name!"}], "auto", "pattern"),
        ([LOOKUP], {"name": "other"}, "not one of the job's tools"),
        ([], "required", "needs tools"),
        ([{**LOOKUP, "headers": {"x": "y"}}], "auto", "only to a tool with a url"),
    ],
)
def test_bad_tool_declarations_are_refused(tools: Any, choice: Any, needle: str) -> None:
    with pytest.raises(ValidationError, match=needle):
        job(tools=tools, toolChoice=choice)


async def test_a_url_tool_without_an_http_client_is_invalid_input() -> None:
    spec = job(tools=[{**LOOKUP, "url": "https://tools.example.com/lookup"}])
    result = await run(spec, ScriptedClient([]))
    assert result.envelope.error == codes.INVALID_INPUT
