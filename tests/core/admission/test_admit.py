"""Admission: one call checks a whole job and names every bad field at once."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import pytest

from app.core.admission.admit import admit
from app.core.answer.contract import Contract
from app.core.turn.model import StructuredMode, StructuredOutput
from app.core.wire.errors import InvalidFields, InvalidInput, SignatureError
from app.core.wire.spec import JobSpec


@dataclass(frozen=True)
class SmallCaps:
    max_task_chars: int = 100
    max_turns: int = 5
    max_return_retries: int = 3
    max_candidates: int = 3
    max_deadline_ms: int = 60_000
    max_output_tokens: int = 2048
    max_input_bytes: int = 256
    max_input_depth: int = 4
    max_tool_output_bytes: int = 256
    max_schema_bytes: int = 512
    max_schema_depth: int = 6
    max_images: int = 2
    max_image_bytes: int = 64
    max_images_bytes: int = 96


class TwoModels:
    """``small`` (no tools, prompted JSON only) and ``big``; ``big`` is the default."""

    def resolve(self, model: str | None, /) -> tuple[str, ...]:
        name = model or "big"
        if name not in ("small", "big"):
            raise InvalidInput(f"unknown model or route {name!r}", field="model")
        return (name,)

    def structured_mode(self, model: str | None, requested: StructuredOutput, /) -> StructuredMode:
        (name,) = self.resolve(model)
        if name == "small" and requested == "native":
            raise InvalidInput("small can only be prompted for it", field="structuredOutput")
        return "prompt" if name == "small" else "json_schema"

    def without_tools(self, model: str | None, /) -> list[str]:
        return [n for n in self.resolve(model) if n == "small"]


def no_private_hosts(url: str) -> str | None:
    return "the host is a private address" if "10.0.0.1" in url else None


def own_secrets(headers: Mapping[str, str] | None, url: str) -> str | None:
    text = " ".join((headers or {}).values())
    return "names a secret this tenant does not have" if "{{secret:OTHER}}" in text else None


def admitted(**fields: Any) -> Contract:
    body = {"task": "Name a city.", "signature": "{city :string}", **fields}
    return admit(
        JobSpec.model_validate(body),
        caps=SmallCaps(),
        models=TwoModels(),
        check_url=no_private_hosts,
        check_headers=own_secrets,
    )


def errors_of(**fields: Any) -> dict[str, str]:
    with pytest.raises(InvalidInput) as caught:
        admitted(**fields)
    return {error.field or "body": error.detail for error in caught.value.errors}


def test_a_good_job_is_admitted_with_its_compiled_contract() -> None:
    contract = admitted(model="big", input={"country": "France"})
    assert contract.output_schema["required"] == ["city"]


def test_three_bad_fields_are_named_together_not_the_first_alone() -> None:
    with pytest.raises(InvalidFields) as caught:
        admitted(
            task="x" * 101,
            model="nope",
            callback={"url": "https://10.0.0.1/done"},
        )
    found = {error.field: error.detail for error in caught.value.errors}
    assert set(found) == {"task", "model", "callback.url"}
    assert found["task"] == "task is 101 characters; this service allows at most 100"
    assert "unknown model or route 'nope'" in found["model"]
    assert found["callback.url"] == "the host is a private address"
    assert caught.value.detail == "3 fields are invalid: task, callback.url, model"


def test_one_bad_field_is_its_own_error_with_its_details() -> None:
    with pytest.raises(SignatureError) as caught:
        admitted(signature="{city :strin}")
    assert caught.value.errors == (caught.value,)
    assert caught.value.position > 0


def test_every_kind_of_check_reports_its_field() -> None:
    found = errors_of(
        budget={"maxTurns": 6},
        input={"a": {"b": {"c": {"d": {"e": 1}}}}},
        tools=[
            {
                "name": "lookup",
                "parameters": {"type": "array"},
                "url": "https://10.0.0.1/tool",
                "headers": {"Authorization": "Bearer {{secret:OTHER}}"},
            }
        ],
        validators=[
            {"kind": "webhook", "url": "https://10.0.0.1/check"},
            {"kind": "judge", "model": "nope", "rubric": "Is it a city?"},
            {"kind": "compare", "left": "$.city", "right": "1"},
        ],
        escalateModel="small",
        structuredOutput="native",
        retryPrompt="{{#unclosed}}",
    )
    assert set(found) == {
        "budget.maxTurns",
        "input",
        "tools[0].parameters",
        "tools[0].url",
        "tools[0].headers",
        "validators[0].url",
        "validators[1].model",
        "validators[2]",
        "structuredOutput",
        "retryPrompt",
    }
    assert found["input"] == "input depth is 5 levels; this service allows at most 4"
    assert found["structuredOutput"] == "small can only be prompted for it"  # escalateModel


def test_a_schema_over_its_cap_is_not_compiled() -> None:
    # Its size is the only problem named: compiling it could take any amount of work.
    huge = {"type": "object", "properties": {f"f{i}": {"type": "string"} for i in range(40)}}
    found = errors_of(signature=None, schema={**huge, "pattern": "("})
    assert list(found) == ["schema"]
    assert found["schema"].startswith("schema size is ")


def test_a_fallback_is_checked_against_the_schema_with_the_other_fields() -> None:
    found = errors_of(fallback={"data": {"city": 7}}, model="nope")
    assert set(found) == {"fallback.data", "model"}
    assert "fallback.data does not match the output schema" in found["fallback.data"]


def test_tools_need_a_model_that_can_call_them() -> None:
    tool = {"name": "lookup", "parameters": {"type": "object"}}
    found = errors_of(model="small", tools=[tool], budget={"maxTurns": 2})
    assert list(found) == ["tools"]
    assert found["tools"].startswith("small cannot call tools")
    admitted(model="small", tools=[tool], budget={"maxTurns": 1})  # no work turn: no call
