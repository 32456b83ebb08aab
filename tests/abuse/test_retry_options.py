"""Hostile best-of-N and re-ask options: a 422 naming the field; a budget too small
for the answers asked for is clamped, never overspent."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from app.core.answer.patch import merge, plan
from app.core.schema.validation import Schema
from tests.service import KEYS, StartApi, api_keys, assert_problem, client, finished


def job(**extra: Any) -> dict[str, Any]:
    return {"task": f"Name a city ({uuid.uuid4().hex[:8]})", "signature": "{city :string}", **extra}


@pytest.fixture
def alice(start_api: StartApi) -> Iterator[httpx.Client]:
    """An API with a worker over the simulator, best-of-N capped at 4 answers per call."""
    url = start_api(embedded_worker=True, api_keys=api_keys(), max_candidates=4)
    with client(url, KEYS["alice"]) as http:
        yield http


def post(http: httpx.Client, body: dict[str, Any]) -> httpx.Response:
    return http.post("/v1/jobs", json=body)


@pytest.mark.parametrize("n", [10**9, 2**63, 17, 0, -1])
def test_a_huge_or_empty_n_is_refused(alice: httpx.Client, n: int) -> None:
    assert_problem(post(alice, job(candidates={"n": n})), 422, "invalid-input", "candidates.n")


def test_n_over_the_service_cap_is_refused_naming_the_cap(alice: httpx.Client) -> None:
    body = assert_problem(post(alice, job(candidates=5)), 422, "invalid-input", "candidates.n")
    assert "at most 4" in body["detail"]
    assert post(alice, job(candidates=4)).status_code == 202


@pytest.mark.parametrize(
    ("candidates", "field"),
    [
        ("3", "candidates"),
        (True, "candidates"),
        (2.5, "candidates"),
        ([3], "candidates"),
        ({"n": 2, "on": "sometimes"}, "candidates.on"),
        ({"n": 2, "extra": 1}, "candidates.extra"),
        ({"on": "final"}, "candidates.n"),
    ],
)
def test_malformed_candidates_are_refused(alice: httpx.Client, candidates: Any, field: str) -> None:
    response = post(alice, job(candidates=candidates))
    assert_problem(response, 422, "invalid-input")
    fields = [e["field"] for e in response.json()["errors"]]
    assert any(f.startswith(field) for f in fields), fields


@pytest.mark.parametrize("mode", ["partial", "", 3, None, ["patch"], "PATCH"])
def test_a_bad_retry_mode_is_refused(alice: httpx.Client, mode: Any) -> None:
    assert_problem(post(alice, job(retryMode=mode)), 422, "invalid-input", "retryMode")


def test_n_answers_a_tiny_budget_cannot_afford_are_clamped_not_overspent(
    alice: httpx.Client,
) -> None:
    body = job(candidates=4, maxOutputTokens=64, budget={"maxTurns": 1, "maxTokens": 400})
    created = post(alice, body)
    assert created.status_code == 202, created.text
    done = finished(alice, created.json()["id"])

    assert done["status"] == "succeeded", done
    (turn,) = done["turns"]
    assert (turn["candidates"] or 1) < 4
    assert any(w.startswith("candidates: asked for 4") for w in done["result"]["warnings"])
    assert done["result"]["execution"]["tokensUsed"] <= 400


def test_a_budget_too_small_for_even_one_answer_ends_before_any_call(
    alice: httpx.Client,
) -> None:
    body = job(candidates=4, budget={"maxTurns": 1, "maxTokens": 20})
    done = finished(alice, post(alice, body).json()["id"])

    assert done["status"] == "failed"
    assert done["result"]["error"] == "token-budget"
    assert done["turns"] == []


ITEMS = {
    "type": "object",
    "properties": {
        "name": {"type": "string"},
        "items": {"type": "array", "items": {"type": "integer"}},
    },
    "required": ["name", "items"],
}


def test_an_answer_wrong_in_thousands_of_places_is_asked_for_whole_quickly() -> None:
    value = {"name": "ok", "items": ["x"] * 20_000}
    paths = Schema(ITEMS).failing_paths(value)
    patch = plan(value, paths, ITEMS, mode="patch")
    assert patch is None


def test_a_patch_answer_stuffed_with_parts_not_asked_for_is_merged_quickly() -> None:
    value = {"name": "ok", "items": [1, "x"]}
    patch = plan(value, [("items", 1)], ITEMS, mode="auto")
    assert patch is not None
    stuffed: dict[str, Any] = {f"/items/{i}": i for i in range(50_000)} | {"/items/1": 2}
    merged = merge(patch, stuffed)
    assert merged.value == {"name": "ok", "items": [1, 2]}
    assert len(merged.ignored) == 49_999
