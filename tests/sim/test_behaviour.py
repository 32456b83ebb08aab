"""What the simulated model writes: each failure mode, rates, scripts and determinism."""

from __future__ import annotations

import ast
import json
import re
from typing import Any

import httpx
import jsonschema
import pytest

from reprompt_sim.server import SimConfig, serve_in_background
from tests.sim.bodies import ORDER_SCHEMA, directive, msg, openai, openai_echo, openai_text

EXPECTED = {
    "customer": "Ada Lovelace",
    "quantity": 3,
    "express": True,
    "items": [{"sku": "ABC-1234", "price": 9.5}, {"sku": "XYZ-0001", "price": 2.25}],
}


def _ask(client: httpx.Client, mode: str) -> str:
    task = msg("user", f"Order ({mode}). " + directive(script=[mode], expect=EXPECTED))
    r = client.post("/v1/chat/completions", json=openai(task))
    assert r.headers["x-sim-outcome"] == mode
    return openai_text(r.json())


def _schema_errors(value: Any) -> list[jsonschema.ValidationError]:
    return list(jsonschema.Draft202012Validator(ORDER_SCHEMA).iter_errors(value))


def test_ok_answers_the_expected_value(client: httpx.Client) -> None:
    assert json.loads(_ask(client, "ok")) == EXPECTED


def test_broken_json_does_not_parse(client: httpx.Client) -> None:
    with pytest.raises(json.JSONDecodeError):
        json.loads(_ask(client, "broken_json"))


def test_wrong_type_writes_a_number_as_text(client: httpx.Client) -> None:
    (error,) = _schema_errors(json.loads(_ask(client, "wrong_type")))

    assert error.validator == "type"
    assert isinstance(error.instance, str)


def test_missing_field_drops_a_required_field(client: httpx.Client) -> None:
    (error,) = _schema_errors(json.loads(_ask(client, "missing_field")))

    assert error.validator == "required"


def test_extra_field_adds_a_field_the_schema_forbids(client: httpx.Client) -> None:
    (error,) = _schema_errors(json.loads(_ask(client, "extra_field")))

    assert error.validator == "additionalProperties"


def test_prose_wraps_the_json_in_chatter(client: httpx.Client) -> None:
    text = _ask(client, "prose")

    assert not text.lstrip().startswith("{")
    start, end = text.index("{"), text.rindex("}") + 1
    assert json.loads(text[start:end]) == EXPECTED


def test_code_fence_wraps_the_json_in_a_fence(client: httpx.Client) -> None:
    text = _ask(client, "code_fence")

    match = re.fullmatch(r"```json\n(.*)\n```", text, re.DOTALL)
    assert match is not None
    assert json.loads(match.group(1)) == EXPECTED


def test_python_literals_are_repairable(client: httpx.Client) -> None:
    text = _ask(client, "python_literals")

    assert "True" in text
    with pytest.raises(json.JSONDecodeError):
        json.loads(text)
    assert ast.literal_eval(text) == EXPECTED


def test_trailing_comma_is_repairable(client: httpx.Client) -> None:
    text = _ask(client, "trailing_comma")

    with pytest.raises(json.JSONDecodeError):
        json.loads(text)
    assert json.loads(re.sub(r",(\s*[}\]])", r"\1", text)) == EXPECTED


def test_missing_comma_is_repairable(client: httpx.Client) -> None:
    text = _ask(client, "missing_comma")

    with pytest.raises(json.JSONDecodeError):
        json.loads(text)
    assert text.count(",") == json.dumps(EXPECTED, indent=2).count(",") - 1
    assert json.loads(re.sub(r'(["\d\]}el])(\s*\n\s*)(["{\[])', r"\1,\2\3", text)) == EXPECTED


def test_broken_json_drops_a_quote_or_the_closing_bracket(client: httpx.Client) -> None:
    text = _ask(client, "broken_json")

    with pytest.raises(json.JSONDecodeError):
        json.loads(text)
    pretty = json.dumps(EXPECTED, indent=2)
    assert text.count(",") == pretty.count(",")
    assert (text.count('"'), text.count("}")) in (
        (pretty.count('"') - 1, pretty.count("}")),
        (pretty.count('"'), pretty.count("}") - 1),
    )


def test_semantic_is_schema_valid_but_wrong(client: httpx.Client) -> None:
    value = json.loads(_ask(client, "semantic"))

    assert _schema_errors(value) == []
    assert value != EXPECTED


def test_script_runs_attempt_by_attempt_then_answers_correctly(client: httpx.Client) -> None:
    script = ["broken_json", "wrong_type", "prose"]
    history = [msg("user", "Order, scripted. " + directive(script=script, expect=EXPECTED))]
    outcomes = []
    for _ in range(4):
        r = client.post("/v1/chat/completions", json=openai(*history))
        outcomes.append((r.headers["x-sim-attempt"], r.headers["x-sim-outcome"]))
        history += [openai_echo(r.json()), msg("user", "No.")]

    assert outcomes == [("1", "broken_json"), ("2", "wrong_type"), ("3", "prose"), ("4", "ok")]
    assert json.loads(openai_text(r.json())) == EXPECTED


def test_transport_script_entries_advance_on_retries_of_the_same_body(
    client: httpx.Client,
) -> None:
    script = ["rate_limit", "server_error", "broken_json", "overloaded", "ok"]
    task = msg("user", "Order, flaky transport. " + directive(script=script))
    first = [client.post("/v1/chat/completions", json=openai(task)) for _ in range(3)]
    reask = openai(task, openai_echo(first[-1].json()), msg("user", "Invalid JSON."))
    second = [client.post("/v1/chat/completions", json=reask) for _ in range(2)]

    assert [r.status_code for r in first] == [429, 500, 200]
    assert first[-1].headers["x-sim-outcome"] == "broken_json"
    assert [r.status_code for r in second] == [503, 200]
    assert second[-1].headers["x-sim-outcome"] == "ok"


def test_requests_counter_scripts_collapsed_conversations(client: httpx.Client) -> None:
    """With "counter": "requests" the script advances even when history is collapsed."""
    script = ["broken_json", "wrong_type", "ok"]
    task = msg("user", "Order, collapsed. " + directive(script=script, counter="requests"))
    first = client.post("/v1/chat/completions", json=openai(task))
    outcomes = [first.headers["x-sim-outcome"]]
    latest = first
    for _ in range(2):
        collapsed = openai(task, openai_echo(latest.json()), msg("user", "Wrong, try again."))
        latest = client.post("/v1/chat/completions", json=collapsed)
        outcomes.append(latest.headers["x-sim-outcome"])

    assert outcomes == script


def test_failure_rates_shape_first_answers() -> None:
    config = SimConfig(seed=3, failure_rates={"broken_json": 0.5, "code_fence": 0.5})
    with serve_in_background(config) as url, httpx.Client(base_url=url) as http:
        outcomes = {
            http.post("/v1/chat/completions", json=openai(msg("user", f"Order {i}."))).headers[
                "x-sim-outcome"
            ]
            for i in range(30)
        }

    assert outcomes == {"broken_json", "code_fence"}


def test_directive_fail_overrides_the_configured_rates(client: httpx.Client) -> None:
    task = msg("user", "Order. " + directive(fail={"missing_field": 1.0}))

    r = client.post("/v1/chat/completions", json=openai(task))

    assert r.headers["x-sim-outcome"] == "missing_field"


def test_same_seed_and_requests_give_the_same_responses() -> None:
    config = SimConfig(seed=11, failure_rates={"wrong_type": 0.3, "broken_json": 0.3})

    def run() -> list[Any]:
        with serve_in_background(config) as url, httpx.Client(base_url=url) as http:
            out = []
            for i in range(8):
                task = msg("user", f"Order number {i}.")
                first = http.post("/v1/chat/completions", json=openai(task)).json()
                body = openai(task, openai_echo(first), msg("user", "Fix the JSON: line 1"))
                second = http.post("/v1/chat/completions", json=body).json()
                out += [{k: v for k, v in r.items() if k != "created"} for r in (first, second)]
            return out

    first_run, second_run = run(), run()

    assert first_run == second_run


def test_different_seeds_give_different_answers() -> None:
    answers = []
    for seed in (1, 2):
        with serve_in_background(SimConfig(seed=seed)) as url:
            r = httpx.post(f"{url}/v1/chat/completions", json=openai(msg("user", "Order.")))
            answers.append(openai_text(r.json()))

    assert answers[0] != answers[1]


def test_random_transport_faults_follow_their_rates() -> None:
    config = SimConfig(seed=5, rate_limit_rate=0.5, server_error_rate=0.5, retry_after_s=0.5)
    with serve_in_background(config) as url, httpx.Client(base_url=url) as http:
        statuses = [
            http.post("/v1/chat/completions", json=openai(msg("user", f"Order {i}."))).status_code
            for i in range(24)
        ]

    assert set(statuses) == {429, 500, 503}


def test_latency_and_slow_requests_delay_the_answer() -> None:
    config = SimConfig(seed=1, latency_ms=30, jitter_ms=10, slow_ms=200)
    with serve_in_background(config) as url, httpx.Client(base_url=url) as http:
        plain = http.post("/v1/chat/completions", json=openai(msg("user", "Order.")))
        slow_task = msg("user", "Order. " + directive(script=["slow", "ok"]))
        slow = http.post("/v1/chat/completions", json=openai(slow_task))

    assert plain.elapsed.total_seconds() >= 0.03
    assert slow.headers["x-sim-outcome"] == "ok"
    assert slow.elapsed.total_seconds() >= 0.23


def test_plain_text_without_a_schema(client: httpx.Client) -> None:
    body = openai(msg("user", "Say hello to the team."), schema=None)

    choice = client.post("/v1/chat/completions", json=body).json()["choices"][0]

    assert choice["message"]["content"].startswith("Here is my answer to: Say hello")


def test_expect_string_is_the_plain_text_answer(client: httpx.Client) -> None:
    task = msg("user", "Greet. " + directive(expect="Hello, team!"))

    r = client.post("/v1/chat/completions", json=openai(task, schema=None))

    assert openai_text(r.json()) == "Hello, team!"
