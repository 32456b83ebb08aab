"""Property test: the loop obeys spec 000's state machine for any script of model outcomes."""

from __future__ import annotations

import asyncio
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from app.core.turn.loop import Runtime, Tool, run_job
from app.core.turn.model import LLMResponse, ToolSpec
from app.core.wire import codes
from app.core.wire.spec import JobSpec
from tests.core.fakes import FakeClock, ScriptedClient, answer, call, reply

OUTCOMES = ["valid", "invalid", "broken", "tool", "fail", "truncated", "refusal"]
# Per-retry prompt growth allowed: "had" vs "still had" and the attempt digits.
SLACK = 24


def step(outcome: str, n: int = 0) -> LLMResponse:
    # Rejected answers differ from call to call (a model repeating itself is stopped early:
    # tests/core/turn/test_loop.py), so the state machine runs its whole course.
    return {
        "valid": lambda: answer({"x": 7}),
        "invalid": lambda: answer({"x": f"seven {n}"}),
        "broken": lambda: reply('{"x": 7,,, "y": [' + str(n) + "}"),
        "tool": lambda: call("probe", {"q": f"x {n}"}),
        "fail": lambda: reply('{"$fail": "cannot"}'),
        "truncated": lambda: reply('{"x": ', finish="length"),
        "refusal": lambda: reply(None, finish="refusal", refusal="no"),
    }[outcome]()


def expected_types(max_turns: int, retries: int, n: int) -> list[str]:
    work, left, out = max_turns, retries, []
    for _ in range(n):
        out.append("normal" if work > 1 else "must_return" if work == 1 else "retry")
        if work > 0:
            work -= 1
        else:
            left -= 1
    return out


@settings(max_examples=300, deadline=None)
@given(
    max_turns=st.integers(1, 5),
    retries=st.integers(0, 4),
    with_tools=st.booleans(),
    outcomes=st.lists(st.sampled_from(OUTCOMES), min_size=10, max_size=10),
    retry_mode=st.sampled_from(["auto", "patch", "whole"]),
)
def test_loop_follows_the_state_machine(
    max_turns: int, retries: int, with_tools: bool, outcomes: list[str], retry_mode: str
) -> None:
    probe = Tool(ToolSpec("probe", "probe", {"type": "object"}), lambda _a: "ok")
    client = ScriptedClient([step(o, n) for n, o in enumerate(outcomes)])
    spec = JobSpec.model_validate(
        {
            "task": "Return x",
            "signature": "{x :int}",
            "budget": {"maxTurns": max_turns, "returnRetries": retries},
            "maxOutputTokens": 64,
            "maxOutputTokensCap": 128,
            "retryMode": retry_mode,
        }
    )
    runtime = Runtime(client=client, clock=FakeClock(), tools=[probe] if with_tools else [])
    result = asyncio.run(run_job(spec, runtime))
    calls = len(client.requests)

    # never more than maxTurns + returnRetries calls, one record per call
    assert 1 <= calls <= max_turns + retries
    assert len(result.turns) == calls

    # the turn types follow the state machine, field-level re-asks (patch) included; tools
    # only on normal turns that ask for the whole answer
    types = [t.type for t in result.turns]
    assert types == expected_types(max_turns, retries, calls)
    for turn, request in zip(result.turns, client.requests, strict=True):
        whole = turn.patch is None
        assert (len(request.tools) > 0) == (with_tools and turn.type == "normal" and whole)
        assert whole or retry_mode == "patch"  # {x :int} has one field: auto never patches

    used = outcomes[:calls]
    last = used[-1]
    env = result.envelope
    # explicit fail and refusals end at once; a valid answer ends with success
    if "fail" in used:
        assert used.index("fail") == calls - 1
        assert env.error == codes.EXPLICIT_FAIL
    if "valid" in used:
        assert used.index("valid") == calls - 1
        assert env.status == "success"
        assert env.data == {"x": 7}
    if last == "refusal":
        assert env.error == codes.LLM_REFUSAL
    if env.status == "error" and last not in ("fail", "refusal"):
        assert env.error == codes.BUDGET_EXHAUSTED
        assert calls == max_turns + retries

    # collapsed context: a retry after an identical rejected answer is no bigger than the first
    sizes = _retry_sizes(result.turns, client.requests, used)
    if sizes:
        assert max(sizes) <= sizes[0] + SLACK
    for turn, request in zip(result.turns, client.requests, strict=True):
        if turn.type == "retry":
            work_messages = 2 * sum(1 for o in used if o == "tool")
            assert len(request.messages) <= 2 + work_messages + 2


def _retry_sizes(turns: Any, requests: Any, used: list[str]) -> list[int]:
    sizes = []
    for i, (turn, request) in enumerate(zip(turns, requests, strict=True)):
        if turn.type == "retry" and i > 0 and used[i - 1] == "invalid":
            sizes.append(sum(len(m.content) for m in request.messages))
    return sizes
