"""docs/validators.md stays true: every job body in it is accepted, with the validators it
shows, and the grounded example's spans are what the service computes."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

from app.core.answer.contract import build_contract
from app.core.wire.spec import JobSpec

DOC = (Path(__file__).resolve().parents[3] / "docs" / "validators.md").read_text(encoding="utf-8")
BLOCKS = [json.loads(block) for block in re.findall(r"```json\n(.+?)\n```", DOC, re.DOTALL)]
JOBS = [block for block in BLOCKS if "task" in block]


def test_every_kind_has_an_example_job_and_every_example_job_is_accepted() -> None:
    kinds = {v["kind"] for job in JOBS for v in job.get("validators", [])}
    assert kinds == {
        "sum",
        "unique",
        "compare",
        "regex",
        "nonempty",
        "grounded",
        "webhook",
        "judge",
    }
    for job in JOBS:
        build_contract(JobSpec.model_validate(job))


def test_the_grounded_example_shows_the_spans_the_service_computes() -> None:
    job = next(j for j in JOBS if j["validators"][0]["kind"] == "grounded")
    envelope: dict[str, Any] = next(b for b in BLOCKS if "grounding" in b)
    contract = build_contract(JobSpec.model_validate(job))
    value = envelope["data"]
    for validator in contract.validators:
        assert validator(value) == (True, None)
    shown = [span.model_dump(mode="json", by_alias=True) for span in contract.grounding(value)]
    assert shown == envelope["grounding"]
    wrong = dict(value, sku="QX-71", total=1243.5)
    (validator,) = contract.validators
    _, diagnosis = validator(wrong)  # type: ignore[misc]
    assert diagnosis is not None
    assert diagnosis in DOC
