"""Grounded validators through the API: checked at submit, run by the worker over the
simulator, spans on the stored envelope."""

from __future__ import annotations

import json
import uuid
from typing import Any

import httpx
import pytest

from tests.service import assert_problem, finished

INVOICE = "Invoice 2291 from Zyxel Ltd (Leeds).\nItem QX-17, qty 3, total 1,234.50 EUR."
EXPECTED = {"vendor": "Zyxel Ltd", "sku": "QX-17", "total": 1234.5}


def grounded_job(script: list[str], **extra: Any) -> dict[str, Any]:
    """A job whose model answers by ``script`` (the simulator), expecting ``EXPECTED``."""
    directive = json.dumps({"script": script, "counter": "requests", "expect": EXPECTED})
    return {
        "task": f"Extract the invoice ({uuid.uuid4().hex[:8]})\n[[sim {directive}]]",
        "input": INVOICE,
        "signature": "{vendor :string, sku :string, total :float}",
        "budget": {"maxTurns": 1, "returnRetries": 2},
        "validators": [
            {"kind": "grounded", "paths": ["$.vendor", "$.sku", "$.total"], "numbers": True}
        ],
        **extra,
    }


def test_a_fabricated_value_is_re_asked_and_the_answer_carries_its_evidence(
    alice: httpx.Client,
) -> None:
    created = alice.post("/v1/jobs", json=grounded_job(["semantic", "ok"]))
    assert created.status_code == 202, created.text
    job = finished(alice, created.json()["id"])
    assert job["status"] == "succeeded", job
    envelope = job["result"]
    assert envelope["data"] == EXPECTED
    first, second = job["turns"]
    assert (first["outcome"], second["outcome"]) == ("rejected", "success")
    assert "is not in the input" in first["diagnosis"]
    assert envelope["execution"]["retryCount"] == 1
    shown = {span["path"]: INVOICE[span["start"] : span["end"]] for span in envelope["grounding"]}
    assert shown == {"$.vendor": "Zyxel Ltd", "$.sku": "QX-17", "$.total": "1,234.50"}
    assert all("inputPath" not in span for span in envelope["grounding"])


def test_a_json_input_gives_spans_into_the_string_at_input_path(alice: httpx.Client) -> None:
    pages = ["Cover page", INVOICE]
    created = alice.post("/v1/jobs", json=grounded_job(["ok"], input={"pages": pages}))
    assert created.status_code == 202, created.text
    job = finished(alice, created.json()["id"])
    assert job["status"] == "succeeded", job
    spans = {span["path"]: span for span in job["result"]["grounding"]}
    assert {span["inputPath"] for span in spans.values()} == {"$.pages[1]"}
    sku = spans["$.sku"]
    assert pages[1][sku["start"] : sku["end"]] == "QX-17"


def test_a_job_without_input_and_a_grounded_validator_is_a_422(alice: httpx.Client) -> None:
    body = grounded_job(["ok"])
    del body["input"]
    response = alice.post("/v1/jobs", json=body)
    problem = assert_problem(response, 422, "invalid-input", field="validators[0]")
    assert "no input" in problem["detail"]


@pytest.mark.parametrize(
    ("validator", "field"),
    [
        ({"paths": ["$.vendor", "vendor"]}, "validators[0].paths[1]"),
        ({"paths": []}, "validators.0.paths"),
        ({}, "validators[0].paths"),
        ({"paths": ["$.vendor"], "mode": "loose"}, "validators.0.mode"),
        ({"paths": ["$.vendor"], "mode": "fuzzy", "threshold": 1.5}, "validators.0.threshold"),
        ({"paths": ["$.vendor"], "mode": "fuzzy", "threshold": 0}, "validators.0.threshold"),
        ({"paths": ["$.vendor"], "threshold": 0.9}, "validators[0].threshold"),
        ({"paths": ["$.vendor"], "numbers": "yes"}, "validators.0.numbers"),
    ],
)
def test_a_malformed_grounded_validator_is_a_422_naming_the_field(
    alice: httpx.Client, validator: dict[str, Any], field: str
) -> None:
    body = grounded_job(["ok"], validators=[{"kind": "grounded", **validator}])
    assert_problem(alice.post("/v1/jobs", json=body), 422, "invalid-input", field=field)
