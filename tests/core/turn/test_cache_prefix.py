"""The prefix a provider's prompt cache can keep: the system prompt, the task with its
input and the tool work open every call of a job unchanged, byte for byte, in the core's
requests and in both wire formats."""

from __future__ import annotations

import itertools
import json
from typing import Any

from app.core.turn.loop import Tool
from app.core.turn.model import LLMRequest, ToolSpec
from app.providers import anthropic, openai
from app.providers.config import ModelConfig
from tests.core.fakes import ScriptedClient, answer, call
from tests.core.turn.test_loop import job, run

BIG_INPUT = {"text": "Invoice line: 3 widgets at 4.50, shipped to Oslo. " * 160}
SONNET = ModelConfig(provider="p", name="claude-sonnet-4-5", structured="tool", prompt_cache=True)
GPT = ModelConfig(provider="p", name="gpt-4o-mini", structured="json_schema", prompt_cache=True)


def stable(request: LLMRequest) -> tuple[Any, ...]:
    return request.messages[: request.cache_prefix]


async def retried(feedback: str = "collapsed") -> list[LLMRequest]:
    client = ScriptedClient([answer({"x": "bad"}), answer({"x": "worse"}), answer({"x": 1})])
    spec = job(input=BIG_INPUT, feedback=feedback, budget={"maxTurns": 1, "returnRetries": 2})
    result = await run(spec, client)
    assert result.envelope.status == "success"
    return client.requests


async def test_every_retry_repeats_the_system_prompt_and_task_unchanged() -> None:
    requests = await retried()
    assert [r.cache_prefix for r in requests] == [2, 2, 2]
    assert len({stable(r) for r in requests}) == 1
    first, retry = requests[0], requests[1]
    assert [m.role for m in stable(first)] == ["system", "user"]
    assert len(first.messages) == 2  # a one-turn job's first call has no turn note
    # The turn note is a message of its own after the prefix, never glued to the task.
    assert retry.messages[-1].role == "user"
    assert "Correction attempt" in retry.messages[-1].content
    assert "Return data" not in retry.messages[-1].content
    assert len({r.cache_key for r in requests}) == 1
    assert (first.cache_key or "").startswith("reprompt-")


async def test_full_feedback_grows_the_prefix_by_the_earlier_attempts() -> None:
    requests = await retried("full")
    assert [r.cache_prefix for r in requests] == [2, 2, 4]
    for earlier, later in itertools.pairwise(requests):
        assert stable(later)[: earlier.cache_prefix] == stable(earlier)


async def test_tool_work_joins_the_prefix() -> None:
    lookup = Tool(ToolSpec("lookup", "finds a price", {"type": "object"}), lambda _a: "4.50")
    client = ScriptedClient([call("lookup"), answer({"x": "bad"}), answer({"x": 2})])
    spec = job(input=BIG_INPUT, budget={"maxTurns": 2, "returnRetries": 1})
    await run(spec, client, tools=[lookup])
    first, worked, retry = client.requests
    assert [r.cache_prefix for r in client.requests] == [2, 4, 4]
    assert stable(worked)[:2] == stable(first)
    assert stable(retry) == stable(worked)
    assert [m.role for m in stable(worked)[2:]] == ["assistant", "tool"]


async def test_a_job_with_a_single_call_marks_nothing_for_the_cache() -> None:
    client = ScriptedClient([answer({"x": 1})])
    await run(job(input=BIG_INPUT, budget={"maxTurns": 1, "returnRetries": 0}), client)
    (only,) = client.requests
    assert only.cache_prefix == 0
    body, _ = anthropic.request_body(only, spec=SONNET, mechanism="tool")
    assert "cache_control" not in json.dumps(body)


async def test_the_simplified_final_request_marks_nothing_for_the_cache() -> None:
    client = ScriptedClient([answer({"x": "bad"}), answer({"x": 1})])
    spec = job(
        input=BIG_INPUT,
        simplifyOnFinalAttempt=True,
        budget={"maxTurns": 1, "returnRetries": 1},
    )
    await run(spec, client)
    first, final = client.requests
    assert first.cache_prefix == 2
    assert final.cache_prefix == 0


async def test_a_job_with_a_different_input_has_another_key() -> None:
    one = (await retried())[0]
    client = ScriptedClient([answer({"x": 1})])
    await run(job(input={"text": "something else"}), client)
    assert client.requests[0].cache_key != one.cache_key


def anthropic_prefix(body: dict[str, Any]) -> str:
    """Everything Anthropic caches up to the marked block, serialised."""
    blocks: list[Any] = [*body.get("tools", []), body.get("system")]
    for turn in body["messages"]:
        for block in turn["content"]:
            blocks.append([turn["role"], block])
            if "cache_control" in block:
                return json.dumps(blocks, sort_keys=True)
    raise AssertionError("no block is marked for the cache")


async def test_the_anthropic_body_marks_the_same_prefix_on_every_retry() -> None:
    requests = await retried()
    bodies = [anthropic.request_body(r, spec=SONNET, mechanism="tool")[0] for r in requests]
    marked = [
        [b for turn in body["messages"] for b in turn["content"] if "cache_control" in b]
        for body in bodies
    ]
    assert all(len(m) == 1 for m in marked)
    assert marked[0][0]["cache_control"] == {"type": "ephemeral"}
    assert "Return data" in marked[0][0]["text"]  # the task's block, not the turn note
    assert len({anthropic_prefix(body) for body in bodies}) == 1


async def test_anthropic_leaves_a_prefix_under_the_model_minimum_unmarked() -> None:
    client = ScriptedClient([answer({"x": 1})])
    await run(job(input={"text": "short"}), client)
    body, _ = anthropic.request_body(client.requests[0], spec=SONNET, mechanism="tool")
    assert "cache_control" not in json.dumps(body)
    # A long prefix on a model with a higher minimum (Haiku 4.5: 4096 tokens) stays unmarked.
    requests = await retried()
    haiku = SONNET.model_copy(update={"name": "claude-haiku-4-5"})
    body, _ = anthropic.request_body(requests[1], spec=haiku, mechanism="tool")
    assert "cache_control" not in json.dumps(body)
    assert anthropic.cache_minimum("claude-3-5-haiku-latest") == 2048
    assert anthropic.cache_minimum("claude-sonnet-4-5") == 1024


async def test_a_model_without_prompt_cache_sends_no_marks_and_no_key() -> None:
    requests = await retried()
    off_a = SONNET.model_copy(update={"prompt_cache": False})
    off_o = GPT.model_copy(update={"prompt_cache": False})
    for request in requests:
        body, _ = anthropic.request_body(request, spec=off_a, mechanism="tool")
        assert "cache_control" not in json.dumps(body)
        body, _ = openai.request_body(request, spec=off_o, mechanism="json_schema")
        assert "prompt_cache_key" not in body


async def test_the_openai_body_keeps_the_job_key_and_the_prompt_prefix() -> None:
    requests = await retried()
    bodies = [openai.request_body(r, spec=GPT, mechanism="json_schema")[0] for r in requests]
    assert {body["prompt_cache_key"] for body in bodies} == {requests[0].cache_key}
    task = requests[0].messages[1].content
    for body in bodies:
        system, user = body["messages"][:2]
        assert system == bodies[0]["messages"][0]
        # The first call's note joins the task's message (turns alternate), after it.
        assert user["role"] == "user"
        assert user["content"].startswith(task)
    assert bodies[0]["messages"][1]["content"] == task  # no note on a one-turn job's first call
    assert [len(body["messages"]) for body in bodies] == [2, 4, 4]
