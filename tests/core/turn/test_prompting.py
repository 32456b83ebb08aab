"""The prompt profiles (app.core.turn.prompting): the full prompt for every model that does not
ask otherwise, and the compact one for small models that copy scaffolding."""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

import pytest

from app.core.answer.contract import build_contract
from app.core.answer.feedback import Failure, render_feedback
from app.core.turn.budget import TurnBudget
from app.core.turn.loop import Runtime, run_job
from app.core.turn.model import PromptStyle, StructuredOutput
from app.core.turn.prompting import Prompting, field_list, is_plain_input, show_input_plain
from app.core.wire.spec import JobSpec
from tests.core.fakes import ScriptedClient, answer, reply

PERSON = {
    "type": "object",
    "properties": {"name": {"type": "string"}, "age": {"type": "integer"}},
    "required": ["name", "age"],
    "additionalProperties": False,
}

COMPACT = PromptStyle("compact", schema_enforced=True)


@dataclass
class StyledClient(ScriptedClient):
    """A scripted client that says how its model likes its prompts, as the router does."""

    style: PromptStyle = COMPACT

    def prompt_style(self, model: str | None, requested: StructuredOutput) -> PromptStyle:
        return self.style


def spec(**fields: Any) -> JobSpec:
    body: dict[str, Any] = {"task": "Extract the person.", "input": "Tom is 34.", "schema": PERSON}
    return JobSpec.model_validate(body | fields)


def prompts(job: JobSpec, client: ScriptedClient, tools: bool = False) -> Prompting:
    return Prompting(job, build_contract(job), client, has_tools=tools)


def test_field_list_names_each_field_and_its_type() -> None:
    assert field_list(PERSON) == "name (string), age (integer)"
    nested = {
        "type": "object",
        "properties": {
            "lines": {
                "type": "array",
                "items": {"type": "object", "properties": {"sku": {"type": "string"}}},
            },
            "mood": {"enum": ["happy", "sad"]},
            "ok": {"type": "boolean"},
        },
    }
    assert field_list(nested) == (
        'lines (list of object: sku (string)), mood (one of "happy" | "sad"), ok (boolean)'
    )


@pytest.mark.parametrize(
    "schema",
    [
        {"type": "array", "items": {"type": "integer"}},
        {"type": "object", "properties": {"a": {"$ref": "#/$defs/A"}}},
        {"type": "object", "properties": {"a": {"anyOf": [{"type": "string"}]}}},
        {"type": "object", "properties": {"a": {"type": ["string", "null"]}}},
        {"type": "object"},
    ],
)
def test_field_list_gives_up_on_what_a_short_list_cannot_say(schema: dict[str, Any]) -> None:
    assert field_list(schema) is None


def test_one_text_field_is_plain_text_and_anything_else_is_json() -> None:
    assert is_plain_input("Tom is 34.")
    assert is_plain_input({"text": "Tom is 34."})
    assert show_input_plain({"text": "Tom is 34."}) == "Tom is 34."
    for value in ({"text": "a", "lang": "en"}, {"n": 3}, [1, 2], {"text": {"a": 1}}):
        assert not is_plain_input(value)
        assert show_input_plain(value) == json.dumps(value, indent=1)


FORMAT = "Answer with a JSON object: name (string), age (integer)."


def test_the_compact_prompt_is_one_user_turn_task_text_and_fields_last() -> None:
    job = spec(input={"text": "Tom is 34 years old."})
    conversation = prompts(job, StyledClient([])).conversation(None)
    (message,) = conversation.messages(None)
    assert message.role == "user"
    assert message.content == f"Extract the person.\n\nTom is 34 years old.\n\n{FORMAT}"
    assert [m.role for m in conversation.transcript] == ["user"]


def test_the_compact_prompt_shows_structured_input_as_json_without_a_tag() -> None:
    job = spec(input={"name": "Tom", "note": "34"})
    task = prompts(job, StyledClient([])).conversation(None).task.content
    assert (
        task == f'Extract the person.\n\nInput:\n{{\n "name": "Tom",\n "note": "34"\n}}\n\n{FORMAT}'
    )


@pytest.mark.parametrize("tools", [False, True])
def test_the_compact_prompt_keeps_the_schema_when_nothing_enforces_it(tools: bool) -> None:
    # Not enforced by the provider, or not on a turn that offers tools (no constraint then).
    enforced = PromptStyle("compact", schema_enforced=tools)
    job = spec(budget={"maxTurns": 2}) if tools else spec()
    client = StyledClient([], style=enforced)
    task = prompts(job, client, tools=tools).conversation(None).task.content
    assert '"properties":{"name":{"type":"string"}' in task
    assert "(string)" not in task
    assert "$fail" not in task


def test_a_client_that_does_not_say_gets_the_full_prompt() -> None:
    job = spec(input={"text": "Tom is 34 years old."})
    conversation = prompts(job, ScriptedClient([])).conversation(None)
    assert '"properties"' in conversation.system.content
    assert "$fail" in conversation.system.content
    assert '<input>\n{\n "text": "Tom is 34 years old."\n}\n</input>' in conversation.task.content
    full = StyledClient([], style=PromptStyle("full", schema_enforced=True))
    same = prompts(job, full).conversation(None)
    assert (same.system, same.task) == (conversation.system, conversation.task)


def test_the_compact_prompt_has_no_turn_notes_on_a_one_turn_job() -> None:
    job = spec(budget={"maxTurns": 1, "returnRetries": 2})
    budget = TurnBudget(1, 2)
    assert prompts(job, StyledClient([])).note(budget, "must_return") is None
    assert prompts(job, StyledClient([])).note(budget, "retry") is None
    assert prompts(job, ScriptedClient([])).note(budget, "retry") is not None


def test_compact_feedback_is_the_diagnosis_and_one_line() -> None:
    failure = Failure("invalid", "llm-invalid-output", "$.age: expected integer", "x", True)
    kwargs: dict[str, Any] = {
        "first": True,
        "example": '{"name": "", "age": 0}',
        "attempt": 1,
        "total_retries": 2,
        "previous_answer": "x",
    }
    compact = render_feedback(failure, retry_prompt=None, compact=True, **kwargs)
    assert compact == "$.age: expected integer\nAnswer again with the corrected JSON value only."
    full = render_feedback(failure, retry_prompt=None, **kwargs)
    assert "```" in full
    # A client's own retryPrompt wins over either profile.
    custom = render_feedback(failure, retry_prompt="Fix: {{diagnosis}}", compact=True, **kwargs)
    assert custom == "Fix: $.age: expected integer"


@pytest.mark.parametrize(
    ("retry_mode", "last_line"),
    [
        ("whole", FORMAT),
        # A field-level re-ask (the default where only some parts fail): the parts by name.
        ("auto", "Answer with a JSON object: /age (integer)."),
    ],
)
async def test_a_compact_job_re_asks_afresh_without_the_rejected_answer(
    retry_mode: str, last_line: str
) -> None:
    # A small model copies the nearest text: the re-ask is one fresh user turn, the
    # rejection first, then the task, the input and what is asked for, and not the
    # rejected answer (docs/benchmarks/real-model.md: contact-01).
    client = StyledClient([reply('{"name": "Tom"}'), answer({"name": "Tom", "age": 34})])
    job = spec(budget={"maxTurns": 1, "returnRetries": 1}, retryMode=retry_mode)
    result = await run_job(job, Runtime(client=client))
    assert result.envelope.status == "success"
    first, second = client.requests
    assert [m.role for m in first.messages] == ["user"]
    (reask,) = second.messages
    assert reask.role == "user"
    assert reask.content == (
        "The last answer was rejected: The answer does not match the schema:\n"
        '- $: missing required field "age"\n\nExtract the person.\n\nTom is 34.\n\n' + last_line
    )
    assert '{"name": "Tom"}' not in reask.content
    # The transcript keeps what was said: the rejected answer, then the fresh question.
    roles = [m.role for m in result.transcript]
    assert roles == ["user", "assistant", "user", "assistant"]
    assert result.transcript[2].content == reask.content


@pytest.mark.parametrize(
    "extra",
    [
        {"retryPrompt": "Fix it: {{diagnosis}}"},
        {"feedback": "full"},
    ],
)
async def test_a_compact_re_ask_keeps_the_conversation_when_the_job_says_how(
    extra: dict[str, Any],
) -> None:
    client = StyledClient([reply('{"name": "Tom"}'), answer({"name": "Tom", "age": 34})])
    job = spec(budget={"maxTurns": 1, "returnRetries": 1}, **extra)
    result = await run_job(job, Runtime(client=client))
    assert result.envelope.status == "success"
    assert [m.role for m in client.requests[1].messages] == ["user", "assistant", "user"]


async def test_the_compact_final_attempt_is_the_short_prompt_and_the_last_error() -> None:
    client = StyledClient([reply('{"name": "Tom"}'), answer({"name": "Tom", "age": 34})])
    job = spec(budget={"maxTurns": 1, "returnRetries": 1}, simplifyOnFinalAttempt=True)
    result = await run_job(job, Runtime(client=client))
    assert result.envelope.status == "success"
    (user,) = client.requests[1].messages
    assert user.content.startswith("Extract the person.\n\nTom is 34.\n\nThe last answer")
    assert user.content.endswith(FORMAT)
    assert "age" in user.content.split("rejected:")[1]
