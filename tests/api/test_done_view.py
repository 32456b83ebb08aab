"""A long-poll is answered by the job's done message (issue 11): the commit script publishes
the finished job as a read would find it, so the waiting API process answers without
reading the job again, unless the job has a callback (its deliveries go on changing
what a read shows) or is too large to send to every API process. And the API process
that made a job, having heard nothing of it since, knows it is still queued or running:
its long-poll needs no first look either. Whatever path a long-poll takes, it answers
exactly what a read after it answers.

MONITOR on the service's redis-server tells the paths apart: a client's ``HMGET`` of the
job hash is a read (a script's commands show as ``lua``). Two API processes share one
Redis and key prefix: ``made`` (with the worker) takes the jobs, ``other`` long-polls
some of them as a second replica behind a load balancer would.
"""

from __future__ import annotations

import uuid
from typing import Any

import httpx
import pytest
import redis

from app.store.connection import DONE_VIEW_MAX_BYTES
from tests.api.test_callbacks import ALICE_SECRET, with_callback
from tests.monitor import monitor, reads
from tests.outbound.receiver import Receiver
from tests.service import KEYS, StartApi, api_keys, client, scripted


def long_poll(
    made: httpx.Client, redis_url: str, job: dict[str, Any], polled: httpx.Client | None = None
) -> tuple[Any, int]:
    """Submit ``job`` through ``made``, long-poll it to its end through ``polled`` (default:
    the same process) under MONITOR: (the answer, reads of it)."""
    created = made.post("/v1/jobs", json=job)
    assert created.status_code == 202, created.text
    job_id = created.json()["id"]
    with monitor(redis_url) as lines:
        answer = (polled or made).get(f"/v1/jobs/{job_id}", params={"waitMs": 10_000})
    assert answer.status_code == 200, answer.text
    assert answer.json()["status"] in ("succeeded", "failed"), answer.text
    return answer.json(), reads(lines, job_id)


@pytest.fixture
def two(start_api: StartApi) -> tuple[str, str]:
    """Two API processes on one key prefix; the first has the worker."""
    prefix = f"dv{uuid.uuid4().hex[:10]}"
    made = start_api(embedded_worker=True, api_keys=api_keys(), key_prefix=prefix)
    other = start_api(api_keys=api_keys(), key_prefix=prefix)
    with client(made, KEYS["alice"]) as alice:  # its subscription is live from here on
        alice.get(
            f"/v1/jobs/{alice.post('/v1/jobs', json=scripted('warm', ['ok'])).json()['id']}",
            params={"waitMs": 10_000},
        )
    return made, other


SHAPES = {
    "plain": scripted("Capital of Norway", ["slow", "ok"]),
    "metadata and model": scripted("Capital of Ghana", ["slow", "ok"])
    | {"metadata": {"team": "geo", "run": "7"}, "model": "fast"},
    "re-asked": scripted("Capital of Laos", ["slow", "missing_field", "ok"])
    | {"retryMode": "whole"},
    "failed": scripted("Capital of Mali", ["slow", "missing_field", "missing_field"])
    | {"budget": {"maxTurns": 1, "returnRetries": 1}, "retryMode": "whole"},
}


def test_a_long_poll_is_answered_by_the_done_message_as_a_read_would_answer(
    two: tuple[str, str], redis_url: str
) -> None:
    made_url, other_url = two
    # Slow first calls: the long-poll is waiting when each job ends.
    with client(made_url, KEYS["alice"]) as made, client(other_url, KEYS["alice"]) as other:
        for shape, job in SHAPES.items():
            here, reads_here = long_poll(made, redis_url, job)
            there, reads_there = long_poll(made, redis_url, _again(job), polled=other)
            assert here == made.get(f"/v1/jobs/{here['id']}").json(), shape
            assert there == other.get(f"/v1/jobs/{there['id']}").json(), shape
            assert reads_here == 0, (shape, reads_here)  # made there: no look, no read
            assert reads_there == 1, (shape, reads_there)  # the first look only
        assert here["status"] == "failed"
        assert here["history"], here
        idempotent = made.post(
            "/v1/jobs",
            json=scripted("Capital of Peru", ["slow", "ok"]),
            headers={"Idempotency-Key": "done-view-1"},
        ).json()
        polled = made.get(f"/v1/jobs/{idempotent['id']}", params={"waitMs": 10_000}).json()
        assert polled == made.get(f"/v1/jobs/{idempotent['id']}").json()
        assert polled["idempotencyKey"] == "done-view-1"


def test_another_tenant_long_polling_a_job_made_on_the_same_process_finds_nothing(
    two: tuple[str, str],
) -> None:
    made_url, _ = two
    with client(made_url, KEYS["alice"]) as alice, client(made_url, KEYS["bob"]) as bob:
        job = alice.post("/v1/jobs", json=scripted("Capital of Oman", ["slow", "ok"])).json()
        assert bob.get(f"/v1/jobs/{job['id']}", params={"waitMs": 3000}).status_code == 404
        done = alice.get(f"/v1/jobs/{job['id']}", params={"waitMs": 10_000}).json()
        assert done["status"] == "succeeded"
        # Its end was heard (the view kept): still nothing for bob.
        assert bob.get(f"/v1/jobs/{job['id']}", params={"waitMs": 3000}).status_code == 404


def test_a_lost_subscription_makes_the_long_poll_read_the_job_first(
    two: tuple[str, str], redis_url: str
) -> None:
    made_url, _ = two
    with client(made_url, KEYS["alice"]) as alice:
        created = alice.post("/v1/jobs", json=scripted("Capital of Cuba", ["slow", "ok"])).json()
        # Every subscriber is cut off: a done message could have been missed meanwhile.
        with redis.Redis.from_url(redis_url) as admin:
            admin.client_kill_filter(_type="pubsub")
        with monitor(redis_url) as lines:
            answer = alice.get(f"/v1/jobs/{created['id']}", params={"waitMs": 10_000})
    assert answer.json()["status"] == "succeeded", answer.text
    assert reads(lines, created["id"]) >= 1


def test_a_job_too_large_for_the_message_is_read_once_it_ends(
    start_api: StartApi, redis_url: str
) -> None:
    url = start_api(embedded_worker=True, api_keys=api_keys(), max_body_bytes=4 * 65_536)
    big = "lorem ipsum " * (DONE_VIEW_MAX_BYTES // 12 + 100)  # in the transcript
    with client(url, KEYS["alice"]) as alice:
        long_poll(alice, redis_url, scripted("warm", ["ok"]))  # the subscription goes live
        job = scripted("Capital of Chad", ["slow", "ok"]) | {"input": big}
        answer, reads = long_poll(alice, redis_url, job)
        assert answer == alice.get(f"/v1/jobs/{answer['id']}").json()
    assert reads == 1  # after the id-only message


def test_a_job_with_a_callback_is_read_once_it_ends_and_shows_its_delivery(
    start_api: StartApi, redis_url: str
) -> None:
    url = start_api(
        embedded_worker=True,
        api_keys=api_keys(),
        outbound_allow=["127.0.0.1"],
        webhook_secrets=f"alice={ALICE_SECRET}",
    )
    with Receiver() as receiver, client(url, KEYS["alice"]) as alice:
        long_poll(alice, redis_url, scripted("warm", ["ok"]))
        job = with_callback(receiver.url, scripted("Capital of Fiji", ["slow", "ok"]))
        answer, reads = long_poll(alice, redis_url, job)
    # Its message carried only the id (the deliveries live on): the job is read (the
    # worker reads it too, to build the callback's body).
    assert reads >= 1
    deliveries = answer["callback"]["deliveries"]
    assert [d["event"] for d in deliveries] == ["succeeded"], answer["callback"]


def _again(job: dict[str, Any]) -> dict[str, Any]:
    """The same job with a task of its own (the simulator's script counts per task)."""
    return job | {"task": job["task"].replace(" (", f" again {uuid.uuid4().hex[:6]} (", 1)}
