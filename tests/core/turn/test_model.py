"""``LLMResponse.settled``: the router's copy of an answered call, field for field what
``dataclasses.replace`` makes."""

from __future__ import annotations

from dataclasses import fields, replace

from app.core.turn.model import Choice, LLMResponse, ToolCall, Usage


def test_settled_is_replace_of_its_five_fields_and_carries_every_other_one() -> None:
    # Every field away from its default, so a field left behind shows.
    response = LLMResponse(
        content="{}",
        finish_reason="tool_calls",
        model="m",
        provider="p",
        usage=Usage(input_tokens=3, output_tokens=4, cached_input_tokens=1),
        tool_calls=(ToolCall("c1", "look", "{}"),),
        refusal="no",
        cost_usd=0.5,
        structured_mode="tool",
        transport_retries=1,
        transport_wait_ms=20,
        latency_ms=30,
        warnings=("w",),
        response_model="m-2026",
        alternatives=(Choice("[]", "stop"),),
        logprobs=(("{}", -0.1),),
    )
    defaults = LLMResponse(content=None, finish_reason="stop", model="", provider="")
    assert all(getattr(response, f.name) != getattr(defaults, f.name) for f in fields(response))
    changes = {
        "cost_usd": 0.75,
        "warnings": ("fell back", "w"),
        "transport_retries": 2,
        "transport_wait_ms": 40,
        "latency_ms": 55,
    }
    settled = response.settled(**changes)  # type: ignore[arg-type]
    assert settled == replace(response, **changes)  # type: ignore[arg-type]
    assert [getattr(settled, f.name) for f in fields(settled)] == [
        changes.get(f.name, getattr(response, f.name)) for f in fields(response)
    ]
