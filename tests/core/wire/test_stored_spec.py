"""``stored_spec``: the worker's reading of a spec the API stored, every check but the
per-field surrogate scan."""

from __future__ import annotations

from typing import Any

import pytest
from pydantic import ValidationError

from app.core.wire.spec import JobSpec, _without_unicode_scan, stored_spec

SPECS: list[dict[str, Any]] = [
    {"task": "Extract é", "input": {"ä": ["x", 1]}, "signature": "{name :str, age :int}"},
    {
        "task": "t",
        "schema": {"type": "object", "properties": {"a": {"type": "integer"}}},
        "budget": {"maxTurns": 3, "returnRetries": 1},
        "candidates": 2,
        "tools": [{"name": "lookup", "description": "d", "parameters": {"type": "object"}}],
        "toolChoice": {"name": "lookup"},
        "validators": [{"kind": "regex", "path": "$.a", "pattern": "^[0-9]+$"}],
        "metadata": {"i": "1"},
    },
]


def _stored(spec: dict[str, Any]) -> dict[str, Any]:
    return JobSpec.model_validate(spec).model_dump(mode="json", by_alias=True)


@pytest.mark.parametrize("spec", SPECS)
def test_a_stored_spec_reads_back_as_the_validated_spec(spec: dict[str, Any]) -> None:
    stored = _stored(spec)
    read = stored_spec(stored)
    assert type(read) is JobSpec
    assert read == JobSpec.model_validate(stored)
    assert read.model_dump(mode="json", by_alias=True) == stored


@pytest.mark.parametrize(
    ("change", "field"),
    [
        ({"schema": {"type": "object"}}, "signature"),  # both shapes
        ({"budget": {"maxTurns": "one"}}, "maxTurns"),
        ({"temperature": "hot"}, "temperature"),
        ({"tools": [], "toolChoice": "required"}, "toolChoice"),
        ({"unknown": 1}, "unknown"),
    ],
)
def test_a_stored_spec_that_is_not_valid_is_still_refused(
    change: dict[str, Any], field: str
) -> None:
    broken = {**_stored(SPECS[0]), **change}
    with pytest.raises(ValidationError, match=field):
        stored_spec(broken)
    with pytest.raises(ValidationError, match=field):
        JobSpec.model_validate(broken)


def test_only_the_surrogate_scan_is_left_out_and_clients_keep_it() -> None:
    schema = JobSpec.__pydantic_core_schema__
    assert "_valid_unicode" in repr(schema)
    assert "_valid_unicode" not in repr(_without_unicode_scan(schema))
    assert "_candidates_shorthand" in repr(_without_unicode_scan(schema))
    lone = {**_stored(SPECS[0]), "input": {"text": "a\ud800b"}}
    with pytest.raises(ValidationError, match="surrogate"):
        JobSpec.model_validate(lone)  # what a client sends
    assert stored_spec(lone).input == {"text": "a\ud800b"}  # trusted: the API checked it
