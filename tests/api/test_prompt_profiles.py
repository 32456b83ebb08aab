"""Prompt profiles through the service: a model configured ``prompt = "compact"`` gets the
short prompt (no JSON Schema dump, a one-text-field input as plain text, no delimiter tag,
no ``$fail`` instruction, one-line re-asks); a ``full`` model keeps the long one."""

from __future__ import annotations

import json
import uuid
from pathlib import Path
from typing import Any

from app.providers.config import load_providers
from tests.service import KEYS, StartApi, api_keys, client, finished

PROVIDERS_TOML = """
default = "small"
[providers.sim]
kind = "openai"
base_url = "{url}/v1"
[models.small]
provider = "sim"
structured = "json_object_schema"
prompt = "compact"
[models.big]
provider = "sim"
structured = "json_object_schema"
"""
SENTENCE = "Emma's favourite colour is red."


def job(script: list[str], **extra: Any) -> dict[str, Any]:
    directive = json.dumps(
        {"script": script, "expect": {"name": "Emma", "colour": "red"}, "counter": "requests"}
    )
    return {
        "task": f"Extract the person and their favourite colour ({uuid.uuid4().hex[:8]})"
        f"\n[[sim {directive}]]",
        "input": {"text": SENTENCE},
        "schema": {
            "type": "object",
            "properties": {"name": {"type": "string"}, "colour": {"type": "string"}},
            "required": ["name", "colour"],
            "additionalProperties": False,
        },
        "budget": {"maxTurns": 1, "returnRetries": 2},
        **extra,
    }


def sent(done: dict[str, Any]) -> list[dict[str, str]]:
    transcript: list[dict[str, str]] = done["transcript"]
    return transcript


def test_a_compact_model_gets_no_schema_dump_and_its_text_input_as_plain_text(
    start_api: StartApi, sim_url: str, tmp_path: Path
) -> None:
    path = tmp_path / "providers.toml"
    path.write_text(PROVIDERS_TOML.format(url=sim_url))
    config = load_providers({}, path=str(path))
    assert config.models["small"].prompt == "compact"
    url = start_api(embedded_worker=True, api_keys=api_keys(), providers_config=config)
    with client(url, KEYS["alice"]) as http:
        # The first answer has the wrong type: one re-ask, whose feedback is compact too.
        small = finished(http, http.post("/v1/jobs", json=job(["wrong_type", "ok"])).json()["id"])
        big = finished(http, http.post("/v1/jobs", json=job(["ok"], model="big")).json()["id"])
    assert small["status"] == "succeeded", small
    assert small["result"]["data"] == {"name": "Emma", "colour": "red"}
    # One user turn (no system prompt): the task, the text, the fields.
    task = sent(small)[0]
    assert task["role"] == "user"
    prompt = task["content"]
    assert f"{SENTENCE}\n\nAnswer with a JSON object: name (string), colour (string)." in (prompt)
    for scaffolding in ('"properties"', "JSON Schema", "<input", '"text"', "$fail", "{\n"):
        assert scaffolding not in prompt, scaffolding
    feedback = [m["content"] for m in sent(small)[1:] if m["role"] == "user"]
    assert len(feedback) == 1
    # A field-level re-ask of the one wrong part, asked afresh: the rejection first, then the
    # task and the text again, and the part by name (the grammar holds the answer to its
    # sub-schema): no quoted excerpt, no example, no schema. The rejected answer stays in
    # the transcript but is not sent again. (The simulator picks which field gets the wrong
    # type.)
    reask = feedback[0]
    assert reask.startswith("The last answer was rejected: The answer does not match")
    assert f"\n\n{SENTENCE}\n\n" in reask
    assert reask.splitlines()[-1] in (
        "Answer with a JSON object: /name (string).",
        "Answer with a JSON object: /colour (string).",
    )
    assert "```" not in reask

    assert big["status"] == "succeeded", big
    system, task = sent(big)[:2]
    assert '"properties"' in system["content"]  # the full profile shows the schema
    assert "$fail" in system["content"]
    assert "<input>" in task["content"]
    assert '"text": "Emma' in task["content"]
