"""POST /v1/generate waits as part of the submit (issue 11: the new job is watched from
before it is queued, one read for the answer): a caller at its cap of open waits is
refused before a job is made."""

from __future__ import annotations

import concurrent.futures
import time

from tests.service import KEYS, StartApi, api_keys, assert_problem, client, scripted


def test_generate_at_the_cap_of_open_waits_gets_a_429_and_makes_no_job(
    start_api: StartApi,
) -> None:
    url = start_api(api_keys=api_keys(), max_waits_per_tenant=1)  # no worker: jobs stay queued
    with client(url, KEYS["alice"]) as alice, client(url, KEYS["alice"]) as waiting:
        held = alice.post("/v1/jobs", json=scripted("held", ["ok"])).json()
        with concurrent.futures.ThreadPoolExecutor(1) as pool:
            poll = pool.submit(waiting.get, f"/v1/jobs/{held['id']}", params={"waitMs": 3000})
            time.sleep(0.5)  # the long-poll holds the tenant's one open wait

            refused = alice.post(
                "/v1/generate", params={"waitMs": 1000}, json=scripted("refused", ["ok"])
            )
            listed = alice.get("/v1/jobs", params={"limit": 100}).json()["jobs"]
            assert poll.result().status_code == 200

    assert_problem(refused, 429, "too-many-requests")
    assert [job["id"] for job in listed] == [held["id"]]  # no job was made


def test_generate_without_a_worker_answers_202_after_its_wait(start_api: StartApi) -> None:
    url = start_api(api_keys=api_keys())  # no worker: the job stays queued
    with client(url, KEYS["alice"]) as alice:
        response = alice.post(
            "/v1/generate", params={"waitMs": 500}, json=scripted("queued", ["ok"])
        )

    assert response.status_code == 202
    assert response.json()["status"] == "queued"
    assert response.headers["location"].endswith(response.json()["id"])
