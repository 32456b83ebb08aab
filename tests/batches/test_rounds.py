"""A 200-item batch on each simulated provider batch API, through the HTTP API: every item
ends succeeded or failed with its reason, the fixed ones show their re-asks, each round is
one provider batch."""

from __future__ import annotations

import httpx
import pytest

from tests.batches.helpers import batch_body, ended, items, results, sim_batches


@pytest.mark.parametrize("model", ["oa", "an"])
def test_a_batch_of_200_flaky_items_ends_with_every_item_answered_or_failed(
    alice: httpx.Client, batch_sim: str, model: str
) -> None:
    created = alice.post("/v1/batches", json=batch_body(200, model=model, reask="batch"))
    assert created.status_code == 202, created.text
    batch_id = created.json()["id"]
    assert created.headers["location"] == f"/v1/batches/{batch_id}"

    batch = ended(alice, batch_id)
    assert batch["status"] == "completed"
    assert batch["counts"]["pending"] == 0
    assert batch["counts"]["succeeded"] + batch["counts"]["failed"] == 200
    assert batch["round"] >= 2  # the flaky first answers were asked again in a round
    assert batch["costUsd"] > 0
    assert batch["mode"] == "provider_batch"

    lines = results(alice, batch_id)
    assert [line["customId"] for line in lines] == [f"doc-{i}" for i in range(200)]
    for line in lines:
        assert line["status"] in ("succeeded", "failed")
        if line["status"] == "succeeded":
            assert set(line["result"]["data"]) == {"city", "population"}
        else:
            assert line["result"]["error"], line  # the reason
            assert line["result"]["detail"]

    # Items fixed by a re-ask: their turn records show the rejection, then the success.
    fixed = [i for i in items(alice, batch_id, status="succeeded") if len(i["turns"]) > 1]
    assert fixed, "a flaky model leaves some items to be fixed"
    for item in fixed:
        turns = item["turns"]
        assert turns[0]["outcome"] != "success"
        assert turns[0]["diagnosis"]
        assert turns[-1]["outcome"] == "success"
        assert item["result"]["execution"]["retryCount"] == len(turns) - 1

    # One provider batch per round, each created once.
    made = [
        b
        for b in sim_batches(batch_sim)["batches"]
        if (b["idempotencyKey"] or "").startswith(f"{batch_id}-r")
    ]
    assert len(made) == batch["round"]
    creates = sim_batches(batch_sim)["creates"]
    assert all(creates[b["idempotencyKey"]] == 1 for b in made)
    assert {b["api"] for b in made} == {"openai" if model == "oa" else "anthropic"}

    # Prometheus: rounds, items by outcome, batch cost (the in-process worker's registry).
    text = alice.get("/metrics").text
    assert 'reprompt_batch_rounds_total{via="provider_batch"}' in text
    assert 'reprompt_batch_items_total{outcome="succeeded"}' in text
    assert 'reprompt_batch_cost_usd_total{via="provider_batch"}' in text
