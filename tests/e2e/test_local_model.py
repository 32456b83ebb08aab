"""End to end through the real local model (gemma 3 270M on llama.cpp), via the CLI."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from app.providers.local import local_available
from tests.e2e.conftest import output, reprompt_cli

JOBS = Path(__file__).parent / "jobs"

pytestmark = [
    pytest.mark.llama,
    pytest.mark.slow,
    pytest.mark.skipif(not local_available(), reason="needs pip install '.[local]'"),
]


def test_unconstrained_base_model_needs_the_repair_tier(tmp_path: Path) -> None:
    # A base model echoes the few-shot prompt and rambles to the token limit: the answer
    # sits in echoed prose after copies of the examples, and the output is cut off.
    proc = reprompt_cli(
        "run",
        str(JOBS / "few_shot_unconstrained.json"),
        "--full",
        env={"REPROMPT_DATA_DIR": str(tmp_path)},
    )
    out = output(proc)
    result = out["result"]
    assert result["status"] == "success", proc.stderr
    assert result["data"] == {"name": "Alice Smith", "age": 30}
    warnings = " ".join(result["warnings"])
    assert "copied from the prompt" in warnings  # the echoed examples were skipped
    assert "cut off" in warnings
    assert out["turns"][0]["finishReason"] == "length"
    assert result["execution"]["provider"] == "local"


def test_constrained_decoding_succeeds_in_one_call(tmp_path: Path) -> None:
    proc = reprompt_cli(
        "run", str(JOBS / "constrained.json"), "--full", env={"REPROMPT_DATA_DIR": str(tmp_path)}
    )
    out = output(proc)
    result = out["result"]
    assert result["status"] == "success", proc.stderr
    assert result["data"] == {"name": "Alice Smith", "age": 30}
    assert result["execution"]["llmCalls"] == 1
    assert result["execution"]["cost"] == 0.0
    assert result["execution"]["model"] == "gemma-3-270m-q4_k_m"


def test_the_compact_prompt_gets_a_one_sentence_extraction_in_a_short_call(
    tmp_path: Path,
) -> None:
    # The local model's default prompt profile is compact: one short user turn (no schema
    # dump, the one text field as plain text), answered right in one call.
    job = tmp_path / "job.json"
    job.write_text(
        json.dumps(
            {
                "task": "Extract the buyer, the item and the price.",
                "input": {"text": "Liam bought a bicycle for 120 dollars."},
                "signature": "{buyer :string, item :string, price :int}",
                "budget": {"maxTurns": 1, "returnRetries": 0},
                "temperature": 0,
            }
        )
    )
    proc = reprompt_cli("run", str(job), "--full", env={"REPROMPT_DATA_DIR": str(tmp_path)})
    result = output(proc)["result"]
    assert result["status"] == "success", (result, proc.stderr)
    assert result["data"]["buyer"] == "Liam"
    assert result["data"]["item"] == "bicycle"
    # The full profile adds the JSON Schema, the input as JSON in a tag and the $fail rule.
    assert result["execution"]["inputTokens"] < 80


def test_a_wrong_field_is_asked_again_afresh_and_the_small_model_fixes_it(
    tmp_path: Path,
) -> None:
    # gemma 3 270M's first answer cuts the name short ("Alice"). Shown that answer again,
    # or a diagnosis quoting it right before the format line, it writes "Alice" again; the
    # compact re-ask asks for just the name afresh, the rejection first, then the task and
    # the text: one more call, and it reads "Alice Moreau" from the text.
    expect = {"name": "Alice Moreau", "age": 87, "email": "alice49@example.com"}
    job = tmp_path / "job.json"
    job.write_text(
        json.dumps(
            {
                "task": "Extract the contact: name, age, email and whether they are subscribed.",
                "input": "Alice Moreau, 87 years old, email alice49@example.com, subscribed "
                "to the newsletter.",
                "signature": "{name :string, age :int, email :string, subscribed :bool}",
                "validators": [
                    {"kind": "compare", "left": f"$.{k}", "op": "==", "right": json.dumps(v)}
                    for k, v in expect.items()
                ],
                "budget": {"maxTurns": 1, "returnRetries": 2},
                "maxOutputTokens": 128,
                "temperature": 0,
            }
        )
    )
    proc = reprompt_cli("run", str(job), "--full", env={"REPROMPT_DATA_DIR": str(tmp_path)})
    out = output(proc)
    result = out["result"]
    assert result["status"] == "success", (result, proc.stderr)
    assert result["data"] == {**expect, "subscribed": True}
    first, second = out["turns"]
    assert first["outcome"] == "rejected"
    assert '"Alice"' in first["answer"]
    assert second["patch"] == ["/name"]
    # The re-ask is one fresh user turn: the rejected answer is not sent again.
    assert second["messageCount"] == 1


def test_a_looping_answer_is_not_asked_again_with_more_room(tmp_path: Path) -> None:
    # gemma 3 270M counts (1, 2, 3, ...) instead of copying the readings, to the token
    # limit. Twice the room would buy twice the count: the re-ask keeps the room, says the
    # answer looped, and bounds the list in the grammar by the input's length in words.
    job = tmp_path / "job.json"
    job.write_text(
        json.dumps(
            {
                "task": "List the readings as integers, their count and their total.",
                "input": "Readings: 2, 42, 5.",
                "schema": {
                    "type": "object",
                    "properties": {
                        "values": {"type": "array", "items": {"type": "integer"}},
                        "count": {"type": "integer"},
                        "total": {"type": "integer"},
                    },
                    "required": ["values", "count", "total"],
                    "additionalProperties": False,
                },
                "budget": {"maxTurns": 1, "returnRetries": 1},
                "maxOutputTokens": 64,
                "maxOutputTokensCap": 128,
                "temperature": 0,
            }
        )
    )
    proc = reprompt_cli("run", str(job), "--full", env={"REPROMPT_DATA_DIR": str(tmp_path)})
    out = output(proc)
    first, second = out["turns"]
    assert first["outcome"] == "truncated", first
    assert "repeated the same part" in first["diagnosis"]
    assert second["maxOutputTokens"] == 64
    # The bounded list closes: a whole JSON object this time (4 words: at most 4 values).
    assert second["finishReason"] == "stop", second
    assert out["result"]["status"] == "success", (out["result"], proc.stderr)
    assert 1 <= len(out["result"]["data"]["values"]) <= 4
