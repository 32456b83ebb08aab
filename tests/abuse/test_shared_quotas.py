"""A tenant's rate and open waits hold across API replicas (#29, item 9).

Two real ``reprompt api`` processes on one redis-server (the embedded one), behind no load
balancer: the test spreads a tenant's requests over both, as one would. Before the quotas
moved to Redis each process gave the tenant its whole share: N replicas, N× the rate.
"""

from __future__ import annotations

import concurrent.futures
import functools
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from app.child import free_loopback_port
from app.redis_server import EmbeddedRedis
from tests.service import KEYS, api_keys, assert_problem, client, scripted
from tests.waiting import sync_until

pytestmark = pytest.mark.slow

BURST = 10
MOST_WAITS = 4
# A provider nobody answers on: no worker runs, so a job stays queued and a wait on it holds.
PROVIDERS = """default = "m"
[providers.p]
kind = "openai"
base_url = "http://127.0.0.1:9/v1"
[models.m]
provider = "p"
"""


@pytest.fixture
def replicas(tmp_path: Path, request: pytest.FixtureRequest) -> Iterator[tuple[str, str]]:
    """Two API processes on one Redis. The rate (``request.param``, default so slow no token
    comes back in the test): ``BURST`` requests in all, then 429; "0": no rate limit."""
    rate = getattr(request, "param", "0.001")
    providers = tmp_path / "providers.toml"
    providers.write_text(PROVIDERS)
    with EmbeddedRedis(tmp_path / "redis") as redis:
        env = {k: v for k, v in os.environ.items() if not k.startswith("REPROMPT_")}
        env |= {
            "REPROMPT_REDIS_URL": redis.url,
            "REPROMPT_DATA_DIR": str(tmp_path / "data"),
            "REPROMPT_API_KEYS": ",".join(api_keys()),
            "REPROMPT_PROVIDERS": str(providers),
            "REPROMPT_RATE_PER_TENANT": rate,
            "REPROMPT_BURST_PER_TENANT": str(BURST),
            "REPROMPT_MAX_WAITS_PER_TENANT": str(MOST_WAITS),
            "REPROMPT_MAX_WAIT_MS": "600000",
            "REPROMPT_HOST": "127.0.0.1",
        }
        procs: list[subprocess.Popen[bytes]] = []
        urls: list[str] = []
        try:
            for index in range(2):
                port = free_loopback_port()
                with (tmp_path / f"api-{index}.log").open("wb") as log:
                    procs.append(
                        subprocess.Popen(
                            [sys.executable, "-m", "app.cli", "api"],
                            env=env | {"REPROMPT_PORT": str(port)},
                            stdout=log,
                            stderr=subprocess.STDOUT,
                        )
                    )
                urls.append(f"http://127.0.0.1:{port}")
            for proc, url in zip(procs, urls, strict=True):
                sync_until(functools.partial(_up, proc, url), what=f"the API at {url}")
            yield urls[0], urls[1]
        finally:
            for proc in procs:
                proc.terminate()
            for proc in procs:
                try:
                    proc.wait(timeout=30)
                except subprocess.TimeoutExpired:  # held long-polls keep uvicorn draining
                    proc.kill()
                    proc.wait()


def _up(proc: subprocess.Popen[bytes], url: str) -> bool:
    assert proc.poll() is None, f"the API at {url} exited {proc.returncode}"
    try:
        return httpx.get(f"{url}/healthz", timeout=5).status_code == 200
    except httpx.TransportError:
        return False


def test_a_tenants_rate_is_counted_once_across_two_replicas(
    replicas: tuple[str, str],
) -> None:
    one, two = replicas
    with client(one, KEYS["alice"]) as first, client(two, KEYS["alice"]) as second:
        codes = [(first if i % 2 else second).get("/v1/jobs").status_code for i in range(2 * BURST)]
        refused = first.get("/v1/jobs")
        # Bob's bucket is his own.
        with client(two, KEYS["bob"]) as bob:
            assert bob.get("/v1/jobs").status_code == 200
    assert codes.count(200) == BURST, codes  # was 2 × BURST: each process its own bucket
    assert codes.count(429) == BURST
    assert_problem(refused, 429, "too-many-requests")
    assert int(refused.headers["retry-after"]) >= 1


@pytest.mark.parametrize("replicas", ["0"], indirect=True)
def test_a_tenants_open_waits_are_counted_once_across_two_replicas(
    replicas: tuple[str, str],
) -> None:
    one, two = replicas
    with client(one, KEYS["bob"]) as first, client(two, KEYS["bob"]) as second:
        job = first.post("/v1/jobs", json=scripted("held across replicas", ["ok"]))
        assert job.status_code == 202, job.text
        path = f"/v1/jobs/{job.json()['id']}"
        # Each long-poll its own client: an open poll holds its connection.
        polls = [client(url, KEYS["bob"]) for url in (one, two) * (MOST_WAITS // 2)]
        with concurrent.futures.ThreadPoolExecutor(len(polls)) as pool:
            held = [pool.submit(p.get, path, params={"waitMs": 600_000}) for p in polls]

            def open_waits() -> bool:
                # A probe is a wait too, held while it runs: a poll that opened then was
                # refused, and is sent again, as a client would after its Retry-After.
                for i, poll in enumerate(held):
                    if poll.done():
                        assert_problem(poll.result(), 429, "too-many-requests")
                        held[i] = pool.submit(polls[i].get, path, params={"waitMs": 600_000})
                # Every poll open: the next one, on either replica, is refused (a short one
                # while they are still opening, so that it ends at once).
                return second.get(path, params={"waitMs": 1}).status_code == 429

            sync_until(open_waits, what="bob's waits to be counted on both replicas")
            assert not any(f.done() for f in held)
            assert_problem(first.get(path, params={"waitMs": 600_000}), 429, "too-many-requests")
            assert first.post(f"{path}/cancel").status_code == 200  # the waits end
            assert [f.result().status_code for f in held] == [200] * MOST_WAITS
        for poll in polls:
            poll.close()
