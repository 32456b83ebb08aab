"""A lone job over HTTP is handed to the idle worker by its submit (lua/submit.lua), leased
on the API's estimate of Redis's clock (app/store/clock.py): the submit script runs no
``TIME``, and the lease ends ``lease_ms`` after Redis's clock, never before and a few ms
after at most. The service as it ships (API with its worker, the simulator, a real
redis-server); ``MONITOR`` shows the script's commands.
"""

from __future__ import annotations

import time
import uuid

import redis

from tests.monitor import monitor
from tests.service import KEYS, StartApi, api_keys, client, scripted

LEASE_MS = 9000
AHEAD_MS = 27  # the TIME reading's round trip (at most MAX_RTT_MS, 25) and rounding


def server_ms(r: redis.Redis) -> int:
    seconds, micros = r.time()
    return int(seconds) * 1000 + int(micros) // 1000


def groups(lines: list[str]) -> list[list[str]]:
    """Each client command with the commands its script ran (listed right after it)."""
    out: list[list[str]] = []
    for line in lines:
        if " lua]" in line and out:
            out[-1].append(line)
        else:
            out.append([line])
    return out


def test_a_lone_job_is_handed_over_and_leased_on_redis_clock_without_a_time(
    start_api: StartApi, redis_url: str
) -> None:
    url = start_api(
        embedded_worker=True,
        api_keys=api_keys(),
        key_prefix=f"hl{uuid.uuid4().hex[:10]}",
        lease_ms=LEASE_MS,
        heartbeat_ms=LEASE_MS // 3,
    )
    r = redis.Redis.from_url(redis_url)
    try:
        with client(url, KEYS["alice"]) as alice:
            # A first job: the worker listed, the API's clock read (in the background).
            warm = alice.post("/v1/jobs", json=scripted("Capital of Chad", ["ok"])).json()
            alice.get(f"/v1/jobs/{warm['id']}", params={"waitMs": 10_000})
            time.sleep(1.2)  # a first submit that found nobody listed tries none for 1 s

            before = server_ms(r)
            with monitor(redis_url) as lines:
                created = alice.post("/v1/jobs", json=scripted("Capital of Fiji", ["ok"]))
            after = server_ms(r)
            assert created.status_code == 202, created.text
            job_id = created.json()["id"]
            done = alice.get(f"/v1/jobs/{job_id}", params={"waitMs": 10_000}).json()
            assert done["status"] == "succeeded", done
            assert done["attempts"] == 1
    finally:
        r.close()

    # The submit: the first script on the job (its commit may follow within the window).
    submit = next(g for g in groups(lines) if '"EVALSHA"' in g[0] and job_id in g[0])
    [lease] = [line for line in submit if '"ZADD"' in line and ':leases"' in line]
    lease_end = int(lease.split('"')[5])  # ... "ZADD" "<key>" "<score>" "<id>"
    assert not [line for line in submit if '"TIME"' in line]  # the hand-off read no TIME
    assert any('"PUBLISH"' in line and ":work:" in line for line in submit)  # handed
    assert before + LEASE_MS <= lease_end <= after + LEASE_MS + AHEAD_MS
