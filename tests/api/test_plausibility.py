"""The plausibility checks through the API, over the simulator: a runaway number is
rejected and re-asked, or trimmed back to the input's number its decimals ran on from, a
number the input writes in words is accepted, a copied instruction is rejected; they are
on by default, and a job can turn them off."""

from __future__ import annotations

import json
import uuid
from typing import Any

import httpx

from tests.service import finished


def job(
    script: list[str], expect: dict[str, Any], job_input: str, signature: str, **extra: Any
) -> dict[str, Any]:
    directive = json.dumps({"script": script, "counter": "requests", "expect": expect})
    return {
        "task": f"Extract the facts ({uuid.uuid4().hex[:8]})\n[[sim {directive}]]",
        "input": job_input,
        "signature": signature,
        "budget": {"maxTurns": 1, "returnRetries": 2},
        "checks": {"plausibility": True},
        **extra,
    }


PARCEL = "The parcel weighs 45.5 kg and holds 2 books."


def run(http: httpx.Client, body: dict[str, Any]) -> dict[str, Any]:
    created = http.post("/v1/jobs", json=body)
    assert created.status_code == 202, created.text
    return finished(http, created.json()["id"])


def test_a_runaway_number_is_rejected_re_asked_and_the_fix_noted(alice: httpx.Client) -> None:
    # The simulated model's first answer is 2 with a dozen more digits run on.
    expect = {"books": 2}
    done = run(alice, job(["runaway_number", "ok"], expect, PARCEL, "{books :int}"))
    assert done["status"] == "succeeded", done
    assert done["result"]["data"] == expect
    first, second = done["turns"]
    assert (first["outcome"], second["outcome"]) == ("rejected", "success")
    assert str(json.loads(first["answer"])["books"]).startswith("2")
    # The re-ask shows the answer cut back to the input's number, not the runaway one.
    assert first["diagnosis"].endswith(
        '$.books: the digits ran on past the number the input states. Answer {"books": 2}'
    )
    assert any(w.startswith("plausibility: rejected 1") for w in done["result"]["warnings"])


def test_a_number_of_the_input_with_decimals_run_on_is_trimmed_without_a_re_ask(
    alice: httpx.Client,
) -> None:
    # The simulated model's first answer is 45.5 with a dozen more decimals run on.
    body = job(["runaway_number", "ok"], {"weight": 45.5}, PARCEL, "{weight :float}")
    done = run(alice, body)
    assert done["status"] == "succeeded", done
    assert done["result"]["data"] == {"weight": 45.5}
    assert len(done["turns"]) == 1
    ran_on = json.loads(done["turns"][0]["answer"])["weight"]
    assert str(ran_on).startswith("45.5")
    assert ran_on != 45.5
    assert (
        f"plausibility: /weight {ran_on!r} trimmed to 45.5, the number the input states"
        in done["result"]["warnings"]
    )


def test_a_number_the_input_writes_in_words_is_accepted(alice: httpx.Client) -> None:
    text = "Twelve thousand three hundred forty-five people came to the fair."
    done = run(alice, job(["ok"], {"visitors": 12345}, text, "{visitors :int}"))
    assert done["status"] == "succeeded", done
    assert done["result"]["data"] == {"visitors": 12345}
    assert len(done["turns"]) == 1
    assert not any(w.startswith("plausibility") for w in done["result"]["warnings"])


def test_a_copied_instruction_is_rejected(alice: httpx.Client) -> None:
    # The simulated model insists on a field name as the value: every answer is rejected.
    body = job(["ok"], {"city": "city"}, "Alice moved to Lyon in May.", "{city :string}")
    done = run(alice, body)
    assert done["status"] == "failed", done
    assert all(turn["outcome"] == "rejected" for turn in done["turns"])
    assert "the prompt's own wording" in done["turns"][0]["diagnosis"]


def test_a_job_can_turn_the_checks_off(alice: httpx.Client) -> None:
    body = job(["runaway_number", "ok"], {"books": 2}, PARCEL, "{books :int}")
    body["checks"] = {"plausibility": False}
    done = run(alice, body)
    assert done["status"] == "succeeded", done
    assert len(done["turns"]) == 1
    assert done["result"]["data"] != {"books": 2}  # the runaway number, unquestioned


def test_the_checks_are_on_by_default_for_a_job_with_an_input(alice: httpx.Client) -> None:
    body = job(["runaway_number", "ok"], {"weight": 45.5}, PARCEL, "{weight :float}")
    del body["checks"]
    done = run(alice, body)
    assert done["status"] == "succeeded", done
    assert done["result"]["data"] == {"weight": 45.5}
    assert any(" trimmed to 45.5" in w for w in done["result"]["warnings"])


def test_a_runaway_number_given_again_is_re_asked_with_the_input_s_numbers(
    alice: httpx.Client,
) -> None:
    # The simulated model gives the same runaway weight every time.
    runaway = {"weight": 45.88639742302659, "books": 2}
    body = job(["ok"], runaway, PARCEL, "{weight :float, books :int}")
    done = run(alice, body)
    assert done["status"] == "failed", done
    first, second = done["turns"][:2]
    assert "occurs nowhere in the input" in first["diagnosis"]
    assert "$.weight: 45.88639742302659 again" in second["diagnosis"]
    assert "The numbers the input states are 45.5, 2: give the one" in second["diagnosis"]
