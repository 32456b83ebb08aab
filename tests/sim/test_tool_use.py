"""Scripted client tool use: ``{"call": [...]}`` entries, tool rounds, and what was offered."""

from __future__ import annotations

import json
from typing import Any

import httpx
import jsonschema
import pytest

from app.providers.structured import OUTPUT_TOOL as SERVICE_OUTPUT_TOOL
from reprompt_sim.config import OUTPUT_TOOL
from reprompt_sim.journal import JOURNAL_SIZE, Entry, Journal
from reprompt_sim.server import SimConfig, serve_in_background
from tests.sim.bodies import anthropic, directive, msg, openai, openai_echo

LOOKUP = {
    "type": "object",
    "properties": {"sku": {"type": "string"}},
    "required": ["sku"],
    "additionalProperties": False,
}
STOCK = {"type": "object", "properties": {"sku": {"type": "string"}, "site": {"type": "string"}}}
ANSWER = {
    "type": "object",
    "properties": {"sku": {"type": "string"}, "available": {"type": "integer"}},
    "required": ["sku", "available"],
}
EXPECT = {"sku": "A1", "available": 7}
TWO_CALLS = {
    "call": [
        {"name": "lookup", "arguments": {"sku": "A1"}},
        {"name": "stock", "arguments": {"sku": "A1", "site": "north"}},
    ]
}


def openai_tools(*names: str, output: bool = True) -> list[dict[str, Any]]:
    schemas = {"lookup": LOOKUP, "stock": STOCK, OUTPUT_TOOL: ANSWER}
    chosen = [*names, OUTPUT_TOOL] if output else list(names)
    return [{"type": "function", "function": {"name": n, "parameters": schemas[n]}} for n in chosen]


def anthropic_tools(*names: str, output: bool = True) -> list[dict[str, Any]]:
    return [
        {"name": t["function"]["name"], "input_schema": t["function"]["parameters"]}
        for t in openai_tools(*names, output=output)
    ]


def work_turn(*messages: dict[str, Any], tools: tuple[str, ...] = ("lookup", "stock")) -> Any:
    """What reprompt sends on a normal work turn: client tools beside the output tool."""
    return openai(*messages, schema=None, tools=openai_tools(*tools), tool_choice="required")


def must_return_turn(*messages: dict[str, Any]) -> Any:
    """What reprompt sends on a must-return turn: the output tool alone, forced."""
    forced = {"type": "function", "function": {"name": OUTPUT_TOOL}}
    return openai(*messages, schema=None, tools=openai_tools(), tool_choice=forced)


def anthropic_work_turn(*messages: dict[str, Any]) -> Any:
    return anthropic(
        *messages,
        tool_schema=None,
        tools=anthropic_tools("lookup", "stock"),
        tool_choice={"type": "any"},
    )


def assistant_call(call_id: str, name: str, arguments: str) -> dict[str, Any]:
    """An assistant message, as sent back in the history, that made one tool call."""
    function = {"name": name, "arguments": arguments}
    return {"role": "assistant", "content": None,
            "tool_calls": [{"id": call_id, "type": "function", "function": function}]}  # fmt: skip


def tool_results(response: dict[str, Any], text: str = "found") -> list[dict[str, Any]]:
    calls = response["choices"][0]["message"]["tool_calls"]
    return [
        {"role": "tool", "tool_call_id": c["id"], "content": f"{text} {i}"}
        for i, c in enumerate(calls)
    ]


def anthropic_results(response: dict[str, Any], text: str = "found") -> dict[str, Any]:
    uses = [b for b in response["content"] if b["type"] == "tool_use"]
    blocks = [
        {
            "type": "tool_result",
            "tool_use_id": b["id"],
            "content": [{"type": "text", "text": f"{text} {i}"}],
        }
        for i, b in enumerate(uses)
    ]
    return msg("user", blocks)


def test_the_output_tool_name_is_the_services() -> None:
    assert OUTPUT_TOOL == SERVICE_OUTPUT_TOOL


def test_openai_call_entry_answers_with_those_tool_calls(client: httpx.Client) -> None:
    task = msg("user", "Stock of A1? " + directive(script=[TWO_CALLS]))

    r = client.post("/v1/chat/completions", json=work_turn(task))

    assert r.status_code == 200
    assert r.headers["x-sim-outcome"] == "call"
    assert r.headers["x-sim-tools-offered"] == "2"
    choice = r.json()["choices"][0]
    assert choice["finish_reason"] == "tool_calls"
    assert choice["message"]["content"] is None
    assert choice["message"]["tool_calls"] == [
        {
            "id": "call_1_1",
            "type": "function",
            "function": {"name": "lookup", "arguments": '{"sku":"A1"}'},
        },
        {
            "id": "call_1_2",
            "type": "function",
            "function": {"name": "stock", "arguments": '{"sku":"A1","site":"north"}'},
        },
    ]


def test_anthropic_call_entry_answers_with_tool_use_blocks(client: httpx.Client) -> None:
    task = msg("user", "Stock of A1, anthropic. " + directive(script=[TWO_CALLS]))

    r = client.post("/v1/messages", json=anthropic_work_turn(task))

    assert r.headers["x-sim-outcome"] == "call"
    assert r.headers["x-sim-tools-offered"] == "2"
    body = r.json()
    assert body["stop_reason"] == "tool_use"
    assert body["content"] == [
        {"type": "tool_use", "id": "toolu_1_1", "name": "lookup", "input": {"sku": "A1"}},
        {
            "type": "tool_use",
            "id": "toolu_1_2",
            "name": "stock",
            "input": {"sku": "A1", "site": "north"},
        },
    ]


def test_call_entry_may_say_something_before_calling(client: httpx.Client) -> None:
    entry = {"call": [{"name": "lookup", "arguments": {"sku": "A1"}}], "text": "Looking it up."}
    task = msg("user", "Chatty lookup. " + directive(script=[entry]))

    openai_r = client.post("/v1/chat/completions", json=work_turn(task)).json()
    anthropic_r = client.post("/v1/messages", json=anthropic_work_turn(task)).json()

    assert openai_r["choices"][0]["message"]["content"] == "Looking it up."
    assert [b["type"] for b in anthropic_r["content"]] == ["text", "tool_use"]
    assert anthropic_r["content"][0]["text"] == "Looking it up."


def test_arguments_are_sent_as_given_even_against_the_schema(client: httpx.Client) -> None:
    entry = {"call": [{"name": "lookup", "arguments": {"sku": 42, "extra": [1]}}]}
    task = msg("user", "Bad arguments. " + directive(script=[entry]))

    openai_r = client.post("/v1/chat/completions", json=work_turn(task)).json()
    anthropic_r = client.post("/v1/messages", json=anthropic_work_turn(task)).json()

    arguments = openai_r["choices"][0]["message"]["tool_calls"][0]["function"]["arguments"]
    assert json.loads(arguments) == {"sku": 42, "extra": [1]}
    assert anthropic_r["content"][0]["input"] == {"sku": 42, "extra": [1]}
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate(json.loads(arguments), LOOKUP)


def test_raw_arguments_carry_broken_json(client: httpx.Client) -> None:
    entry = {"call": [{"name": "lookup", "rawArguments": '{"sku": "A1"'}]}
    task = msg("user", "Broken arguments. " + directive(script=[entry]))

    openai_r = client.post("/v1/chat/completions", json=work_turn(task)).json()
    anthropic_r = client.post("/v1/messages", json=anthropic_work_turn(task)).json()

    assert (
        openai_r["choices"][0]["message"]["tool_calls"][0]["function"]["arguments"]
        == '{"sku": "A1"'
    )
    # Anthropic cannot carry unparsable input: the raw text arrives as a JSON string.
    assert anthropic_r["content"][0]["input"] == '{"sku": "A1"'


def test_a_tool_not_offered_gets_the_final_answer_instead(client: httpx.Client) -> None:
    task = msg("user", "Stripped tools. " + directive(script=[TWO_CALLS], expect=EXPECT))

    r = client.post("/v1/chat/completions", json=must_return_turn(task))

    assert r.headers["x-sim-outcome"] == "ok"
    assert r.headers["x-sim-tools-offered"] == "0"
    (call,) = r.json()["choices"][0]["message"]["tool_calls"]
    assert call["function"]["name"] == OUTPUT_TOOL
    assert json.loads(call["function"]["arguments"]) == EXPECT


def test_calls_are_all_or_nothing(client: httpx.Client) -> None:
    task = msg("user", "Half offered. " + directive(script=[TWO_CALLS], expect=EXPECT))

    r = client.post("/v1/chat/completions", json=work_turn(task, tools=("lookup",)))

    assert r.headers["x-sim-outcome"] == "ok"
    (call,) = r.json()["choices"][0]["message"]["tool_calls"]
    assert call["function"]["name"] == OUTPUT_TOOL


@pytest.mark.parametrize(
    "choice", ["none", {"type": "function", "function": {"name": "stock"}}], ids=["none", "other"]
)
def test_a_tool_choice_that_excludes_the_tool_gets_an_answer(
    client: httpx.Client, choice: Any
) -> None:
    entry = {"call": [{"name": "lookup", "arguments": {"sku": "A1"}}]}
    task = msg("user", f"Excluded by {choice}. " + directive(script=[entry]))
    body = openai(task, schema=ANSWER, tools=openai_tools("lookup", "stock"), tool_choice=choice)

    r = client.post("/v1/chat/completions", json=body)

    assert r.headers["x-sim-outcome"] == "ok"
    calls = r.json()["choices"][0]["message"].get("tool_calls") or []
    assert "lookup" not in [c["function"]["name"] for c in calls]


def test_force_calls_a_tool_that_was_not_offered(client: httpx.Client) -> None:
    entry = {"call": [{"name": "delete_everything", "arguments": {}}], "force": True}
    task = msg("user", "Forced call. " + directive(script=[entry]))

    r = client.post("/v1/chat/completions", json=must_return_turn(task))

    assert r.headers["x-sim-outcome"] == "call"
    (call,) = r.json()["choices"][0]["message"]["tool_calls"]
    assert call["function"] == {"name": "delete_everything", "arguments": "{}"}


def test_openai_tool_rounds_advance_the_attempt_to_a_final_answer(client: httpx.Client) -> None:
    lookup = {"call": [{"name": "lookup", "arguments": {"sku": "A1"}}]}
    stock = {"call": [{"name": "stock", "arguments": {"sku": "A1"}}]}
    task = msg("user", "Rounds. " + directive(script=[lookup, stock, "ok"], expect=EXPECT))

    first = client.post("/v1/chat/completions", json=work_turn(task))
    history = [task, openai_echo(first.json()), *tool_results(first.json())]
    second = client.post("/v1/chat/completions", json=work_turn(*history))
    history += [openai_echo(second.json()), *tool_results(second.json())]
    third = client.post("/v1/chat/completions", json=must_return_turn(*history))

    assert [r.headers["x-sim-attempt"] for r in (first, second, third)] == ["1", "2", "3"]
    assert [r.headers["x-sim-outcome"] for r in (first, second, third)] == ["call", "call", "ok"]
    ids = [r.json()["choices"][0]["message"]["tool_calls"][0]["id"] for r in (first, second)]
    assert ids == ["call_1_1", "call_2_1"]
    (answer,) = third.json()["choices"][0]["message"]["tool_calls"]
    assert json.loads(answer["function"]["arguments"]) == EXPECT


def test_anthropic_tool_rounds_advance_the_attempt_to_a_final_answer(client: httpx.Client) -> None:
    lookup = {"call": [{"name": "lookup", "arguments": {"sku": "A1"}}]}
    task = msg("user", "Anthropic rounds. " + directive(script=[lookup, TWO_CALLS], expect=EXPECT))

    first = client.post("/v1/messages", json=anthropic_work_turn(task)).json()
    history = [task, msg("assistant", first["content"]), anthropic_results(first)]
    second = client.post("/v1/messages", json=anthropic_work_turn(*history)).json()
    history += [msg("assistant", second["content"]), anthropic_results(second)]
    third = client.post("/v1/messages", json=anthropic_work_turn(*history))

    assert [b["id"] for b in second["content"]] == ["toolu_2_1", "toolu_2_2"]
    assert third.headers["x-sim-attempt"] == "3"
    body = third.json()
    assert body["stop_reason"] == "tool_use"
    assert body["content"][0]["name"] == OUTPUT_TOOL
    assert body["content"][0]["input"] == EXPECT


def test_request_counter_counts_tool_call_answers(client: httpx.Client) -> None:
    # A collapsed history: only the task and the latest tool exchange are sent each time.
    lookup = {"call": [{"name": "lookup", "arguments": {"sku": "A1"}}]}
    script = directive(script=[lookup, lookup, lookup, "ok"], expect=EXPECT, counter="requests")
    task = msg("user", "Collapsed rounds 6f1e. " + script)

    first = client.post("/v1/chat/completions", json=work_turn(task))
    attempts = [first.headers["x-sim-attempt"]]
    latest = first.json()
    for _ in range(3):
        body = work_turn(task, openai_echo(latest), *tool_results(latest))
        r = client.post("/v1/chat/completions", json=body)
        attempts.append(r.headers["x-sim-attempt"])
        latest = r.json()

    assert attempts == ["1", "2", "3", "4"]
    (answer,) = latest["choices"][0]["message"]["tool_calls"]
    assert answer["function"]["name"] == OUTPUT_TOOL


def test_transport_faults_come_before_the_calls(client: httpx.Client) -> None:
    task = msg("user", "Faulty call. " + directive(script=["rate_limit", TWO_CALLS], retry_after=0))
    body = work_turn(task)

    limited = client.post("/v1/chat/completions", json=body)
    called = client.post("/v1/chat/completions", json=body)

    assert limited.status_code == 429
    assert limited.headers["x-sim-tools-offered"] == "2"
    assert called.headers["x-sim-outcome"] == "call"


def test_a_directive_in_a_tool_result_is_read(client: httpx.Client) -> None:
    task = msg("user", "No directive here, 51c2.")
    call = assistant_call("call_x", "lookup", "{}")
    result = {"role": "tool", "tool_call_id": "call_x", "content": directive(expect=EXPECT)}
    anthropic_call = msg(
        "assistant", [{"type": "tool_use", "id": "toolu_x", "name": "lookup", "input": {}}]
    )
    anthropic_result = msg(
        "user",
        [{"type": "tool_result", "tool_use_id": "toolu_x", "content": directive(expect=EXPECT)}],
    )

    openai_r = client.post("/v1/chat/completions", json=must_return_turn(task, call, result)).json()
    anthropic_r = client.post(
        "/v1/messages", json=anthropic_work_turn(task, anthropic_call, anthropic_result)
    ).json()

    arguments = openai_r["choices"][0]["message"]["tool_calls"][0]["function"]["arguments"]
    assert json.loads(arguments) == EXPECT
    assert anthropic_r["content"][0]["input"] == EXPECT


def test_self_correction_looks_past_tool_rounds(client: httpx.Client) -> None:
    # A broken answer, feedback that names the problem, then a tool round: the next answer
    # is judged against that feedback, and fixed (fix 1.0).
    task = msg(
        "user", "Fix after tools. " + directive(fix=1.0, blind=0.0, fail={"broken_json": 1.0})
    )
    bad = assistant_call("call_a", OUTPUT_TOOL, '{"sku": "A1",')
    feedback = {"role": "tool", "tool_call_id": "call_a", "content": "invalid JSON: unexpected end"}
    work = assistant_call("call_b", "lookup", '{"sku":"A1"}')
    result = {"role": "tool", "tool_call_id": "call_b", "content": "A1: 7 available"}

    r = client.post("/v1/chat/completions", json=work_turn(task, bad, feedback, work, result))

    assert r.headers["x-sim-attempt"] == "3"
    assert r.headers["x-sim-outcome"] == "ok"
    (answer,) = r.json()["choices"][0]["message"]["tool_calls"]
    jsonschema.validate(json.loads(answer["function"]["arguments"]), ANSWER)


@pytest.mark.parametrize(
    ("script", "problem"),
    [
        ([{"call": {"name": "lookup"}}], '"call" must be a non-empty list'),
        ([{"call": []}], '"call" must be a non-empty list'),
        ([{"call": [{"arguments": {}}]}], '"name" must be a non-empty string'),
        ([{"call": [{"name": "x", "arguments": {}, "rawArguments": "{"}]}], "not both"),
        ([{"call": [{"name": "x", "rawArguments": {}}]}], '"rawArguments" must be a string'),
        ([{"call": [{"name": "x", "args": {}}]}], "unknown keys ['args']"),
        ([{"call": [{"name": "x"}], "force": "yes"}], '"force" must be true or false'),
        ([{"calls": [{"name": "x"}]}], "unknown keys ['calls']"),
        ([3], "list of outcome names"),
    ],
)
def test_malformed_call_entries_are_a_400(
    client: httpx.Client, script: list[Any], problem: str
) -> None:
    r = client.post("/v1/chat/completions", json=work_turn(msg("user", directive(script=script))))

    assert r.status_code == 400
    assert problem in r.json()["error"]["message"]


def test_requests_endpoint_lists_what_each_request_offered() -> None:
    lookup = {"call": [{"name": "lookup", "arguments": {"sku": "A1"}}]}
    task = msg("user", "Journal. " + directive(script=[lookup, "ok"]))
    with serve_in_background(SimConfig(seed=3)) as url, httpx.Client(base_url=url) as http:
        first = http.post("/v1/chat/completions", json=work_turn(task)).json()
        history = [task, openai_echo(first), *tool_results(first)]
        http.post("/v1/chat/completions", json=must_return_turn(*history))
        http.post("/v1/messages", json=anthropic(msg("user", "plain")))
        http.post("/v1/chat/completions", json={"messages": "not a list"})  # a 400: not kept

        entries = http.get("/sim/requests").json()
        cleared = http.delete("/sim/requests")
        after = http.get("/sim/requests").json()

    # What the model was given after its last turn: here the task, on the first request.
    assert entries[0]["recentMessages"][0].startswith("Journal. [[sim")
    assert [{k: v for k, v in e.items() if k != "recentMessages"} for e in entries] == [
        {
            "seq": 1,
            "api": "openai",
            "attempt": 1,
            "outcome": "call",
            "toolsOffered": ["lookup", "stock"],
            "outputTool": OUTPUT_TOOL,
            "toolChoice": "required",
            "messages": 1,
            "schemaKeys": ["sku", "available"],
            "n": 1,
            "images": [],
        },
        {
            "seq": 2,
            "api": "openai",
            "attempt": 2,
            "outcome": "ok",
            "toolsOffered": [],
            "outputTool": OUTPUT_TOOL,
            "toolChoice": {"type": "function", "function": {"name": OUTPUT_TOOL}},
            "messages": 3,
            "schemaKeys": ["sku", "available"],
            "n": 1,
            "images": [],
        },
        {
            "seq": 3,
            "api": "anthropic",
            "attempt": 1,
            "outcome": "ok",
            "toolsOffered": ["record"],
            "outputTool": "record",
            "toolChoice": {"type": "tool", "name": "record"},
            "messages": 1,
            "schemaKeys": ["customer", "quantity", "express", "items"],
            "n": 1,
            "images": [],
        },
    ]
    assert cleared.status_code == 204
    assert after == []


def test_the_journal_keeps_only_the_latest_entries() -> None:
    journal = Journal(size=3)
    for attempt in range(1, 6):
        journal.add(Entry("openai", attempt, "ok", (), None, None, 1))

    assert [e["seq"] for e in journal.entries()] == [3, 4, 5]
    assert JOURNAL_SIZE == 1000
