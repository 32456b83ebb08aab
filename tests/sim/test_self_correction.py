"""Re-asks: the model fixes a defect when the feedback names it (fix=1.0, blind=0.0 here)."""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from typing import Any

import httpx
import jsonschema
import pytest

from reprompt_sim.defect import leaves
from reprompt_sim.server import SimConfig, serve_in_background
from tests.sim.bodies import (
    ORDER_SCHEMA,
    anthropic,
    directive,
    msg,
    openai,
    openai_echo,
    openai_text,
)

EXPECTED: dict[str, Any] = {
    "customer": "Grace Hopper",
    "quantity": 7,
    "express": False,
    "items": [{"sku": "COB-1959", "price": 12.5}],
}


@pytest.fixture(scope="module")
def strict_url() -> Iterator[str]:
    config = SimConfig(
        seed=4, failure_rates={"wrong_type": 1.0}, fix_probability=1.0, blind_fix_probability=0.0
    )
    with serve_in_background(config) as url:
        yield url


@pytest.fixture
def strict(strict_url: str) -> Iterator[httpx.Client]:
    with httpx.Client(base_url=strict_url, timeout=10) as http:
        yield http


def _reask(http: httpx.Client, history: list[dict[str, Any]], feedback: str) -> httpx.Response:
    first = http.post("/v1/chat/completions", json=openai(*history))
    return http.post(
        "/v1/chat/completions",
        json=openai(*history, openai_echo(first.json()), msg("user", feedback)),
    )


def _wrong_field(http: httpx.Client, task: dict[str, Any]) -> str:
    first = http.post("/v1/chat/completions", json=openai(task))
    (error,) = jsonschema.Draft202012Validator(ORDER_SCHEMA).iter_errors(
        json.loads(openai_text(first.json()))
    )
    return str(error.path[-1])


def test_fixes_a_wrong_type_when_the_feedback_names_the_field(strict: httpx.Client) -> None:
    task = msg("user", "Order for Grace.")
    field = _wrong_field(strict, task)

    r = _reask(strict, [task], f"$.{field}: expected an integer, got a string")

    assert r.headers["x-sim-outcome"] == "ok"
    jsonschema.validate(json.loads(openai_text(r.json())), ORDER_SCHEMA)


def test_repeats_a_failure_when_the_feedback_is_blind(strict: httpx.Client) -> None:
    r = _reask(strict, [msg("user", "Order for Grace.")], "That is not right. Try again.")

    assert r.headers["x-sim-outcome"] == "wrong_type"


def test_fenced_examples_in_feedback_do_not_count_as_naming(strict: httpx.Client) -> None:
    example = json.dumps(EXPECTED, indent=2)
    feedback = f"Something is off.\n\nA correct answer looks like:\n```json\n{example}\n```"

    r = _reask(strict, [msg("user", "Order for Grace.")], feedback)

    assert r.headers["x-sim-outcome"] == "wrong_type"


def _schema_feedback(answer: str) -> str:
    """Feedback as a validator writes it: path and message of every schema error."""
    errors = jsonschema.Draft202012Validator(ORDER_SCHEMA).iter_errors(json.loads(answer))
    return "\n".join(f"{e.json_path}: {e.message}" for e in errors)


@pytest.mark.parametrize(
    ("mode", "named"),
    [
        ("broken_json", lambda _: "Not valid JSON: Expecting ',' delimiter: line 3 column 5"),
        ("refusal", lambda _: "You refused, but this is a routine task."),
        ("code_fence", lambda _: "Do not use a markdown fence."),
        ("python_literals", lambda _: "Python literals are not JSON."),
        ("wrong_type", _schema_feedback),
        ("missing_field", _schema_feedback),
        ("extra_field", _schema_feedback),
    ],
)
def test_named_defects_are_fixed_and_blind_ones_are_not(
    client: httpx.Client, mode: str, named: Callable[[str], str]
) -> None:
    knobs = directive(fail={mode: 1.0}, fix=1.0, blind=0.0, expect=EXPECTED)
    task = msg("user", f"Order, {mode}. {knobs}")
    first = client.post("/v1/chat/completions", json=openai(task)).json()

    def reask(feedback: str) -> httpx.Response:
        body = openai(task, openai_echo(first), msg("user", feedback))
        return client.post("/v1/chat/completions", json=body)

    fixed = reask(named(openai_text(first)))
    missed = reask("Try again.")

    assert fixed.headers["x-sim-attempt"] == "2"
    assert fixed.headers["x-sim-outcome"] == "ok"
    assert json.loads(openai_text(fixed.json())) == EXPECTED
    assert missed.headers["x-sim-outcome"] == mode


def test_a_truncated_answer_is_fixed_when_the_feedback_says_it_was_cut_off(
    client: httpx.Client,
) -> None:
    task = msg("user", "Order, verbose. " + directive(fail={"truncation": 1.0}, fix=1.0, blind=0.0))
    first = client.post("/v1/chat/completions", json=openai(task, max_tokens=100))
    assert first.json()["choices"][0]["finish_reason"] == "length"

    def reask(feedback: str) -> httpx.Response:
        body = openai(task, openai_echo(first.json()), msg("user", feedback), max_tokens=100)
        return client.post("/v1/chat/completions", json=body)

    fixed, missed = reask("Your answer was cut off after 100 tokens."), reask("Try again.")

    assert fixed.json()["choices"][0]["finish_reason"] == "stop"
    jsonschema.validate(json.loads(openai_text(fixed.json())), ORDER_SCHEMA)
    assert missed.json()["choices"][0]["finish_reason"] == "length"


def test_semantic_errors_are_fixed_when_the_wrong_field_is_named(client: httpx.Client) -> None:
    knobs = directive(expect=EXPECTED, fail={"semantic": 1.0}, fix=1, blind=0)
    task = msg("user", f"Order, semantic. {knobs}")
    first = client.post("/v1/chat/completions", json=openai(task))
    wrong = dict(leaves(json.loads(openai_text(first.json()))))
    path = next(p for p, v in leaves(EXPECTED) if wrong.get(p) != v)
    field = next(step for step in reversed(path) if isinstance(step, str))

    def reask(feedback: str) -> httpx.Response:
        body = openai(task, openai_echo(first.json()), msg("user", feedback))
        return client.post("/v1/chat/completions", json=body)

    assert json.loads(openai_text(reask(f"The {field} is wrong.").json())) == EXPECTED
    assert reask("Something is wrong.").headers["x-sim-outcome"] == "semantic"


def test_collapsed_and_full_histories_are_both_understood(strict: httpx.Client) -> None:
    task = msg("user", "Order for Grace, three tries.")
    first = strict.post("/v1/chat/completions", json=openai(task)).json()
    blind = [task, openai_echo(first), msg("user", "Try again.")]
    second = strict.post("/v1/chat/completions", json=openai(*blind)).json()
    field = _wrong_field(strict, task)
    named = f"$.{field}: wrong type"

    full = openai(*blind, openai_echo(second), msg("user", named))
    collapsed = openai(task, openai_echo(second), msg("user", named))

    for body in (full, collapsed):
        r = strict.post("/v1/chat/completions", json=body)
        assert r.headers["x-sim-outcome"] == "ok"


def test_feedback_in_an_openai_tool_message_counts(client: httpx.Client) -> None:
    tools = [{"type": "function", "function": {"name": "record", "parameters": ORDER_SCHEMA}}]
    forced = {"type": "function", "function": {"name": "record"}}
    task = msg("user", "Record, broken. " + directive(script=["broken_json"], fix=1.0))
    body = openai(task, schema=None, tools=tools, tool_choice=forced)
    first = client.post("/v1/chat/completions", json=body).json()
    call_id = first["choices"][0]["message"]["tool_calls"][0]["id"]
    feedback = {"role": "tool", "tool_call_id": call_id, "content": "arguments: invalid JSON"}

    body = openai(task, openai_echo(first), feedback, schema=None, tools=tools, tool_choice=forced)
    r = client.post("/v1/chat/completions", json=body)

    assert r.headers["x-sim-outcome"] == "ok"
    jsonschema.validate(json.loads(openai_text(r.json())), ORDER_SCHEMA)


def test_feedback_in_an_anthropic_tool_result_counts(client: httpx.Client) -> None:
    task = msg("user", "Record, wrong. " + directive(script=["missing_field"], fix=1.0, blind=0.0))
    first = client.post("/v1/messages", json=anthropic(task)).json()
    (block,) = first["content"]
    missing = next(iter(set(ORDER_SCHEMA["required"]) - set(block["input"])))
    result = {
        "type": "tool_result",
        "tool_use_id": block["id"],
        "is_error": True,
        "content": f"$: missing required field {missing!r}",
    }

    body = anthropic(task, msg("assistant", first["content"]), msg("user", [result]))
    r = client.post("/v1/messages", json=body).json()

    assert r["stop_reason"] == "tool_use"
    jsonschema.validate(r["content"][0]["input"], ORDER_SCHEMA)


def test_fix_probability_is_a_rate_across_conversations() -> None:
    config = SimConfig(
        seed=9, failure_rates={"broken_json": 1.0}, fix_probability=0.5, blind_fix_probability=0.0
    )
    fixed = 0
    with serve_in_background(config) as url, httpx.Client(base_url=url) as http:
        for i in range(40):
            r = _reask(http, [msg("user", f"Order {i}.")], "Invalid JSON at line 2.")
            fixed += r.headers["x-sim-outcome"] == "ok"

    assert 10 <= fixed <= 30
