"""The JSON Schema Test Suite's formats through the HTTP API, as a client meets them.

tests/core/schema/test_json_schema_suite.py runs all 2,064 tests through ``check_schema``
and ``check_answer``, the two functions a job goes through: ``POST /v1/jobs`` refuses a
schema ``check_schema`` refuses (a 422), and the worker's turn loop checks each answer with
``check_answer`` (app/core/answer/verdict.py; ``strict: true`` repairs nothing, as there).
Here, for each format, its first valid and first invalid string go through the API as a
job whose simulated model answers with the instance, under ``{"value": <the suite's
schema>}`` (the simulator writes a bare string answer as plain text): the job's verdict is
the checker's and the suite's.
"""

from __future__ import annotations

import json
import uuid
from pathlib import Path
from typing import Any

import httpx
import pytest

from app.core.answer.check import check_answer
from tests.service import finished

FORMATS = Path(__file__).resolve().parents[1] / "suite" / "jsts" / "draft2020-12" / "optional"


def _samples() -> list[Any]:
    found = []
    for path in sorted((FORMATS / "format").glob("*.json")):
        if path.name == "unknown.json":
            continue  # refused at submit (tests/abuse/test_checks_and_formats.py)
        taken: set[bool] = set()
        for case in json.loads(path.read_text()):
            for test in case["tests"]:
                if test["valid"] not in taken and isinstance(test["data"], str):
                    taken.add(test["valid"])
                    key = f"{path.stem}|{test['description']}"
                    found.append(pytest.param(case["schema"], test["data"], test["valid"], id=key))
    return found


@pytest.mark.slow
@pytest.mark.parametrize(("schema", "data", "valid"), _samples())
def test_a_format_instance_is_judged_through_the_api_as_the_suite_says(
    alice: httpx.Client, schema: dict[str, Any], data: str, valid: bool
) -> None:
    wrapped = {"type": "object", "properties": {"value": schema}, "required": ["value"]}
    answer = {"value": data}
    directive = json.dumps({"script": ["ok"], "expect": answer})
    body = {
        "task": f"Give the value ({uuid.uuid4().hex[:8]})\n[[sim {directive}]]",
        "schema": wrapped,
        "strict": True,
        "budget": {"maxTurns": 1, "returnRetries": 0},
    }
    created = alice.post("/v1/jobs", json=body)
    assert created.status_code == 202, created.text
    done = finished(alice, created.json()["id"])
    assert (done["status"] == "succeeded") == valid, done["turns"]
    assert check_answer(json.dumps(answer), wrapped, strict=True).ok == valid
    if valid:
        assert done["result"]["data"] == answer
