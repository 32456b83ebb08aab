"""Confidence from token log-probabilities (app.core.answer.confidence), and the provider's
reading of them (hostile or odd logprobs are dropped, never trusted)."""

from __future__ import annotations

import math
from typing import Any

import pytest

from app.core.answer.confidence import confidence, value_spans
from app.providers.openai import token_logprobs


def test_only_value_tokens_count_and_the_least_sure_value_decides() -> None:
    text = '{"city": "Lyon", "n": 2}'
    tokens = (('{"', -5.0), ("city", -5.0), ('": "', -5.0), ("Lyon", -0.1), ('", "n": ', -5.0),
              ("2", -0.5), ("}", -5.0))  # fmt: skip
    assert confidence(text, tokens) == round(math.exp(-0.5), 4)


def test_value_spans_skip_keys() -> None:
    text = '{"a": "x", "b": [1, true, null], "c": {"d": -2.5}}'
    assert [text[s:e] for s, e in value_spans(text)] == ["x", "1", "true", "null", "-2.5"]


def test_tokens_that_do_not_spell_the_answer_give_none() -> None:
    assert confidence('{"a": 1}', (("something else", -0.1),)) is None
    assert confidence('{"a": 1}', ()) is None
    assert confidence("{}", (("{}", -0.1),)) is None


@pytest.mark.parametrize(
    "raw",
    [
        None,
        {"content": None},
        {"content": []},
        {"content": [{"token": "a", "logprob": 0.5}]},
        {"content": [{"token": "a", "logprob": float("nan")}]},
        {"content": [{"token": "a", "logprob": True}]},
        {"content": [{"token": 3, "logprob": -1}]},
        {"content": ["a"]},
        {"content": [{"token": "a", "logprob": -1}] * 70_000},
    ],
)
def test_malformed_logprobs_are_dropped(raw: Any) -> None:
    assert token_logprobs(raw) is None


def test_well_formed_logprobs_are_read() -> None:
    raw = {"content": [{"token": "{", "logprob": -0.25, "top_logprobs": []}]}
    assert token_logprobs(raw) == (("{", -0.25),)
