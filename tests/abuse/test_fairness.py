"""One tenant flooding cannot lock the others out (#10, items 4, 6 and 8).

Real API processes on loopback with a real redis-server, an in-process worker and the
simulator (the fixtures of tests/service.py). Each test floods as ``alice`` and checks that
``bob`` is served as usual.
"""

from __future__ import annotations

import concurrent.futures
import contextlib
import uuid
from typing import Any

import httpx
import redis as sync_redis

from app.providers.config import ModelConfig, ProviderConfig, ProvidersConfig
from tests.providers.silent import Silent
from tests.service import KEYS, StartApi, api_keys, assert_problem, client, finished, scripted
from tests.waiting import sync_until as settled


def clients(url: str) -> tuple[httpx.Client, httpx.Client]:
    return client(url, KEYS["alice"]), client(url, KEYS["bob"])


def test_a_tenants_flood_of_long_polls_gets_429_and_others_are_served(
    start_api: StartApi, providers: ProvidersConfig
) -> None:
    with Silent() as silent:
        held = providers.model_copy(
            update={
                "providers": providers.providers
                | {"silent": ProviderConfig(kind="openai", base_url=f"{silent.url}/v1")},
                "models": providers.models | {"held": ModelConfig(provider="silent")},
            }
        )
        url = start_api(
            embedded_worker=True,
            providers_config=held,
            api_keys=api_keys(),
            max_waits_per_tenant=20,
            max_wait_ms=600_000,
        )
        alice, bob = clients(url)
        # Clients first (each builds a TLS context: slow), so the flood starts at once.
        own = [client(url, KEYS["alice"]) for _ in range(60)]
        with alice, bob, contextlib.ExitStack() as opened:
            for each in own:
                opened.enter_context(each)
            # A job whose call hangs until ``silent.release``: a wait on it ends only then.
            stuck = alice.post("/v1/jobs", json=scripted("flood wait", ["ok"], model="held"))
            path = f"/v1/jobs/{stuck.json()['id']}"
            settled(lambda: silent.calls, what="the stuck job's call")

            def poll(i: int) -> int:
                # No read timeout: a held poll answers at the release, however long the steps
                # before it take (a hang is pytest-timeout's).
                held = httpx.Timeout(30.0, read=None)
                return own[i].get(path, params={"waitMs": 600_000}, timeout=held).status_code

            with concurrent.futures.ThreadPoolExecutor(60) as pool:
                flood = [pool.submit(poll, i) for i in range(60)]
                # 40 refused means the other 20 are alice's open waits (her cap): they hold
                # until the release below, so all that bob does next happens beside them.
                settled(
                    lambda: sum(f.done() and f.result() == 429 for f in flood) >= 40,
                    what="alice's flood to be refused beyond her 20 waits",
                )
                job = bob.post("/v1/jobs", json=scripted("quiet wait", ["ok"]))
                assert job.status_code == 202
                assert finished(bob, job.json()["id"])["status"] == "succeeded"
                assert bob.get("/v1/jobs").status_code == 200
                assert httpx.get(f"{url}/readyz", timeout=5).status_code == 200
                # Bob did not wait behind alice's polls: all of them are still waiting.
                assert sum(not f.done() for f in flood) == 20
                silent.release.set()
                codes = [f.result() for f in flood]
    assert codes.count(429) == 40  # beyond her 20 open waits
    assert codes.count(200) == 20


def test_a_tenant_over_its_request_rate_gets_429_with_retry_after(start_api: StartApi) -> None:
    url = start_api(api_keys=api_keys(), rate_per_tenant=5, burst_per_tenant=10)
    alice, bob = clients(url)
    with alice, bob:
        answers = [alice.get("/v1/jobs") for _ in range(25)]
        assert bob.get("/v1/jobs").status_code == 200
    limited = [a for a in answers if a.status_code == 429]
    assert len(limited) >= 10
    body = assert_problem(limited[0], 429, "too-many-requests")
    assert int(limited[0].headers["retry-after"]) >= 1
    assert "requests per second" in body["detail"]


def test_a_tenant_cannot_fill_the_queue_for_everyone(start_api: StartApi) -> None:
    url = start_api(api_keys=api_keys(), max_queued=5)  # no worker: jobs stay queued
    alice, bob = clients(url)
    with alice, bob:
        codes = [
            alice.post("/v1/jobs", json=scripted(f"fill {i}", ["ok"])).status_code for i in range(8)
        ]
        quiet = bob.post("/v1/jobs", json=scripted("quiet", ["ok"]))
    assert codes == [202] * 5 + [429] * 3
    assert quiet.status_code == 202


def test_a_tenant_over_its_stored_bytes_gets_429(start_api: StartApi) -> None:
    url = start_api(api_keys=api_keys(), max_tenant_bytes=40_000, max_body_bytes=1_048_576)
    alice, bob = clients(url)
    big = "x" * 15_000
    with alice, bob:
        codes = [
            alice.post("/v1/jobs", json=scripted(f"big {i}", ["ok"], input=big)).status_code
            for i in range(4)
        ]
        refused = alice.post("/v1/jobs", json=scripted("big again", ["ok"], input=big))
        quiet = bob.post("/v1/jobs", json=scripted("quiet big", ["ok"], input=big))
    assert codes[:2] == [202, 202]
    assert 429 in codes
    assert_problem(refused, 429, "quota-exceeded")
    assert quiet.status_code == 202


def test_a_backlog_does_not_delay_another_tenants_job(start_api: StartApi) -> None:
    url = start_api(embedded_worker=True, api_keys=api_keys(), worker_concurrency=2)
    alice, bob = clients(url)
    with alice, bob:
        backlog = [
            alice.post("/v1/jobs", json=scripted(f"backlog {i}", ["slow", "ok"])).json()["id"]
            for i in range(12)
        ]

        def running() -> int:
            jobs = alice.get("/v1/jobs", params={"status": "in_progress"}).json()["jobs"]
            return len(jobs)

        settled(lambda: running() == 2, what="alice's backlog to fill both slots")
        quiet = bob.post("/v1/jobs", json=scripted("quiet after backlog", ["ok"])).json()
        done = finished(bob, quiet["id"])
        views = [alice.get(f"/v1/jobs/{job_id}").json() for job_id in backlog]
        for job_id in backlog:
            alice.post(f"/v1/jobs/{job_id}/cancel")
    assert done["status"] == "succeeded"
    # FIFO would have put bob behind all 12 of alice's jobs on 2 slots; taking tenants in
    # turn, bob's job is claimed at a slot freed by the two running then (or, with the turn
    # at alice, the one after): at most 4 of alice's started before it.
    ahead = [v for v in views if v["startedAt"] and v["startedAt"] < done["startedAt"]]
    assert len(ahead) <= 4, [v["startedAt"] for v in views]


def test_listing_with_a_status_filter_does_not_load_every_record(
    start_api: StartApi, redis_url: str
) -> None:
    url = start_api(
        api_keys=api_keys(), max_body_bytes=1_048_576, max_queued=500, rate_per_tenant=0
    )
    alice, _ = clients(url)
    big = "y" * 50_000
    with alice, sync_redis.Redis.from_url(redis_url) as redis:
        for i in range(150):
            body: dict[str, Any] = scripted(f"stored {uuid.uuid4().hex[:6]} {i}", ["ok"])
            body["input"] = big
            assert alice.post("/v1/jobs", json=body).status_code == 202
        sent_before = redis.info("stats")["total_net_output_bytes"]
        listed = alice.get("/v1/jobs", params={"status": "cancelled", "limit": 1})
        sent = redis.info("stats")["total_net_output_bytes"] - sent_before
    assert listed.status_code == 200
    assert listed.json()["jobs"] == []
    # Statuses only: not 150 × 50 KB of records out of Redis (the session's other clients
    # share the server, but send nothing like megabytes meanwhile).
    assert sent < 1_000_000, sent


def test_a_large_input_is_stored_once(start_api: StartApi, redis_url: str) -> None:
    from app.store.ids import shard_of
    from app.store.keys import Keys

    url = start_api(
        embedded_worker=True, api_keys=api_keys(), key_prefix="once", max_body_bytes=1_048_576
    )
    alice, _ = clients(url)
    big = "z" * 300_000
    with alice:
        body = scripted("stored once", ["ok"], input=big)
        job = alice.post("/v1/jobs", json=body).json()
        done = finished(alice, job["id"])
    assert done["status"] == "succeeded"
    task_message = done["transcript"][1]["content"]
    assert big not in task_message
    assert "the job's input, 300000 characters" in task_message
    key = Keys("once").shard(shard_of(job["id"])).job(job["id"])
    with sync_redis.Redis.from_url(redis_url) as client_:
        used = client_.memory_usage(key, samples=0)  # every field, not an estimate
    assert used is not None
    assert used < 1.3 * len(big), used  # the spec's copy, not a second one
