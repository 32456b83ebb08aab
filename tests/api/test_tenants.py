"""A job belongs to the key that created it; to every other tenant it does not exist."""

from __future__ import annotations

import httpx

from tests.service import StartApi, assert_problem, finished, scripted


def test_another_tenant_gets_404_on_get_cancel_and_events(
    alice: httpx.Client, bob: httpx.Client
) -> None:
    job = alice.post("/v1/jobs", json=scripted("Capital of Laos", ["ok"])).json()
    path = f"/v1/jobs/{job['id']}"

    assert_problem(bob.get(path), 404, "not-found")
    assert_problem(bob.get(path, params={"waitMs": 100}), 404, "not-found")
    assert_problem(bob.post(f"{path}/cancel"), 404, "not-found")
    assert_problem(bob.get(f"{path}/events"), 404, "not-found")
    assert job["id"] not in {
        j["id"] for j in bob.get("/v1/jobs", params={"limit": 100}).json()["jobs"]
    }

    # Bob's cancel did nothing: the job runs to its end for Alice.
    assert finished(alice, job["id"])["status"] == "succeeded"
    assert job["id"] in {
        j["id"] for j in alice.get("/v1/jobs", params={"limit": 100}).json()["jobs"]
    }


def test_without_configured_keys_everyone_is_the_default_tenant(start_api: StartApi) -> None:
    url = start_api()  # no REPROMPT_API_KEYS
    with (
        httpx.Client(base_url=url) as anonymous,
        httpx.Client(base_url=url, headers={"authorization": "Bearer anything"}) as other,
    ):
        created = anonymous.post("/v1/jobs", json=scripted("Capital of Oman", ["ok"]))
        assert created.status_code == 202
        seen = other.get(f"/v1/jobs/{created.json()['id']}")
    assert seen.status_code == 200
