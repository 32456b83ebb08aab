"""The contract cache: one compile per distinct signature or schema text, never shared state."""

from __future__ import annotations

import pytest

from app.core.answer.contract import build_contract
from app.core.wire.errors import InvalidInput
from app.core.wire.spec import JobSpec

SIGNATURE = "{name :string, age :int}"


def spec(**fields: object) -> JobSpec:
    return JobSpec.model_validate({"task": "t", "input": "x", **fields})


def test_one_signature_compiles_once_and_jobs_share_the_result() -> None:
    first = build_contract(spec(signature=SIGNATURE))
    second = build_contract(spec(signature=SIGNATURE, metadata={"other": "job"}))
    assert first.output_schema is second.output_schema
    assert first.example is not None
    assert first.example == second.example


def test_the_example_follows_include_example_not_the_cache() -> None:
    with_example = build_contract(spec(signature=SIGNATURE))
    without = build_contract(spec(signature=SIGNATURE, includeExample=False))
    assert with_example.example is not None
    assert without.example is None


def test_a_schema_job_keeps_no_reference_to_the_clients_dict() -> None:
    schema = {"type": "object", "properties": {"a": {"type": "string"}}, "required": ["a"]}
    job = spec(schema=schema)
    contract = build_contract(job)
    assert contract.output_schema == schema
    assert contract.output_schema is not job.schema_
    assert job.schema_ is not None
    job.schema_["required"] = []  # the client's copy changing does not change the cached one
    assert build_contract(spec(schema=schema)).output_schema["required"] == ["a"]


def test_key_order_is_part_of_the_key() -> None:
    ab = {"type": "object", "properties": {"a": {"type": "string"}, "b": {"type": "integer"}}}
    ba = {"type": "object", "properties": {"b": {"type": "integer"}, "a": {"type": "string"}}}
    assert list(build_contract(spec(schema=ab)).output_schema["properties"]) == ["a", "b"]
    assert list(build_contract(spec(schema=ba)).output_schema["properties"]) == ["b", "a"]


@pytest.mark.parametrize("_", range(2))
def test_a_bad_signature_is_refused_every_time(_: int) -> None:
    with pytest.raises(InvalidInput) as err:
        build_contract(spec(signature="{name :strin}"))
    assert err.value.field == "signature"


def test_per_job_checks_still_run_on_a_cached_shape() -> None:
    build_contract(spec(signature="(n :int) -> {x :string}", input={"n": 1}))
    with pytest.raises(InvalidInput) as err:
        build_contract(spec(signature="(n :int) -> {x :string}", input={"n": "one"}))
    assert err.value.field == "input"
