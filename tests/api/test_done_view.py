"""A long-poll is answered by the job's done message (issue 11): the commit script publishes
the finished job as a read would find it, so the waiting API process answers without
reading the job again, unless the job has a callback (its deliveries go on changing
what a read shows) or is too large to send to every API process. Whatever path a
long-poll takes, it answers exactly what a read after it answers.

MONITOR on the service's redis-server tells the paths apart: a client's ``HMGET`` of the
job hash is a read (a script's commands show as ``lua``).
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import httpx
import redis

from app.store.connection import DONE_VIEW_MAX_BYTES
from tests.api.test_callbacks import ALICE_SECRET, with_callback
from tests.outbound.receiver import Receiver
from tests.service import KEYS, StartApi, api_keys, client, scripted

_MARK = "done-view-monitor-end"


@contextmanager
def monitor(url: str) -> Iterator[list[str]]:
    """Every command the server runs inside the block, as ``redis-cli monitor`` prints it
    (read up to a marker sent at the end, so none is lost in a buffer)."""
    lines: list[str] = []
    marker = redis.Redis.from_url(url)
    watcher = redis.Redis.from_url(url)
    conn = watcher.connection_pool.get_connection()
    conn.send_command("MONITOR")  # type: ignore[no-untyped-call]
    conn.read_response()

    def read() -> None:
        while True:
            raw = conn.read_response()
            line = raw.decode(errors="replace") if isinstance(raw, bytes) else str(raw)
            if _MARK in line:
                return
            lines.append(line)

    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    try:
        yield lines
    finally:
        marker.echo(_MARK)
        reader.join(30)
        conn.disconnect()  # type: ignore[no-untyped-call]
        watcher.close()
        marker.close()


def reads_of(lines: list[str], job_id: str) -> int:
    """The client reads (not a script's) of the job's hash."""
    return sum(1 for line in lines if '"HMGET"' in line and job_id in line and " lua]" not in line)


def long_poll(http: httpx.Client, redis_url: str, job: dict[str, Any]) -> tuple[Any, int]:
    """Submit ``job``, long-poll it to its end under MONITOR: (the answer, reads of it)."""
    created = http.post("/v1/jobs", json=job)
    assert created.status_code == 202, created.text
    job_id = created.json()["id"]
    with monitor(redis_url) as lines:
        answer = http.get(f"/v1/jobs/{job_id}", params={"waitMs": 10_000})
    assert answer.status_code == 200, answer.text
    assert answer.json()["status"] in ("succeeded", "failed"), answer.text
    return answer.json(), reads_of(lines, job_id)


def test_a_long_poll_is_answered_by_the_done_message_as_a_read_would_answer(
    start_api: StartApi, redis_url: str
) -> None:
    url = start_api(embedded_worker=True, api_keys=api_keys())
    # Slow first calls: the long-poll is waiting when each job ends.
    shapes = {
        "plain": scripted("Capital of Norway", ["slow", "ok"]),
        "metadata and model": scripted("Capital of Ghana", ["slow", "ok"])
        | {"metadata": {"team": "geo", "run": "7"}, "model": "fast"},
        "re-asked": scripted("Capital of Laos", ["slow", "missing_field", "ok"])
        | {"retryMode": "whole"},
        "failed": scripted("Capital of Mali", ["slow", "missing_field", "missing_field"])
        | {"budget": {"maxTurns": 1, "returnRetries": 1}, "retryMode": "whole"},
    }
    with client(url, KEYS["alice"]) as alice:
        for shape, job in shapes.items():
            answer, reads = long_poll(alice, redis_url, job)
            again = alice.get(f"/v1/jobs/{answer['id']}").json()
            assert answer == again, shape
            assert reads == 1, (shape, reads)  # the first look; the end came in its message
        assert answer["status"] == "failed"
        assert answer["history"], answer
        idempotent = alice.post(
            "/v1/jobs",
            json=scripted("Capital of Peru", ["slow", "ok"]),
            headers={"Idempotency-Key": "done-view-1"},
        ).json()
        polled = alice.get(f"/v1/jobs/{idempotent['id']}", params={"waitMs": 10_000}).json()
        assert polled == alice.get(f"/v1/jobs/{idempotent['id']}").json()
        assert polled["idempotencyKey"] == "done-view-1"


def test_a_job_too_large_for_the_message_is_read_once_it_ends(
    start_api: StartApi, redis_url: str
) -> None:
    url = start_api(embedded_worker=True, api_keys=api_keys(), max_body_bytes=4 * 65_536)
    big = "lorem ipsum " * (DONE_VIEW_MAX_BYTES // 12 + 100)  # in the transcript
    job = scripted("Capital of Chad", ["slow", "ok"]) | {"input": big}
    with client(url, KEYS["alice"]) as alice:
        answer, reads = long_poll(alice, redis_url, job)
        assert answer == alice.get(f"/v1/jobs/{answer['id']}").json()
    assert reads == 2  # the first look, and the read after the id-only message


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
        job = with_callback(receiver.url, scripted("Capital of Fiji", ["slow", "ok"]))
        answer, reads = long_poll(alice, redis_url, job)
    # Its message carried only the id (the deliveries live on): the job is read again
    # (the worker reads it too, to build the callback's body).
    assert reads >= 2
    deliveries = answer["callback"]["deliveries"]
    assert [d["event"] for d in deliveries] == ["succeeded"], answer["callback"]
