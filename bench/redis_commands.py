"""Redis commands one single-turn job costs, submit to answer, through the real HTTP API.

The service as it ships (``reprompt serve``'s API and worker in one process, the settings'
defaults: the per-tenant byte cap on), the simulator as its model, its own redis-server;
``MONITOR`` records every command, those the Lua scripts run included. Four
flows, each after a warm-up job (scripts loaded, subscriptions made):

- **jobs, one job**: ``POST /v1/jobs`` then ``GET /v1/jobs/{id}?waitMs=``;
- **generate, one job**: ``POST /v1/generate?waitMs=`` (submit and wait in one request);
- **jobs / generate, N at once**: N clients each run the flow at the same moment; the
  figures are per job (claims take several jobs per script, so they cost less per job).

Client commands are round trips (a script is one: its ``EVALSHA``); "all" counts the
scripts' commands too, as ``INFO`` total_commands_processed does. A worker with nothing
to do looks at the queue once a second (an empty claim: ``EVALSHA`` + ``LPOP``, and every
10 s its idle-list entry renewed: ``TIME``, ``LREM``, ``RPUSH``), and a
pool that grows under load opens connections (``HELLO``): both are counted apart, not as
the jobs'. A job that stays in one phase (its model call, say) longer than the worker's
flush delay (1 s, ``app.worker.FLUSH_AFTER_S``) also costs a progress write (the ``write``
script: ``HMGET``, ``HSET``, ``PUBLISH``); a fast job's progress goes with its commit.

.venv/bin/python bench/redis_commands.py            # SHOW=1 prints every command
.venv/bin/python bench/redis_commands.py --jobs 100 --rounds 3   # the defaults
.venv/bin/python bench/redis_commands.py --tenants   # with API keys: the shared quotas' cost

``--tenants`` runs with an API key configured, so every request takes from the tenant's
rate in Redis and every wait is held there (``app.store.quotas``; the rate set high enough
that nothing is refused): the difference from a run without it is what the quotas cost.
"""

from __future__ import annotations

import argparse
import asyncio
import collections
import hashlib
import os
import sys
import tempfile
from collections.abc import Awaitable, Callable
from pathlib import Path

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))
import httpx
from pydantic import SecretStr
from redis.asyncio import Redis

from app.assembly import api_app
from app.loopback import serve_in_thread
from app.providers.config import ModelConfig, ProviderConfig, ProvidersConfig
from app.redis_server import EmbeddedRedis
from app.settings import Settings
from reprompt_sim.server import SimConfig, serve_in_background

WAIT_MS = 10_000
SPEC = {"task": "x", "signature": "{a :int}", "budget": {"maxTurns": 1}}
BENCH_KEY = "bench-key"


class Monitor:
    """``MONITOR`` for the length of a block; ``lines`` (as redis-cli prints them) after it.

    Read through a connection of its own up to a marker command sent at the end, so no
    line is lost in a buffer.
    """

    MARK = "bench-monitor-end"

    def __init__(self, url: str) -> None:
        self.url = url
        self.lines: list[str] = []

    async def __aenter__(self) -> Monitor:
        self._marker = Redis.from_url(self.url)
        await self._marker.ping()  # its connection opened before MONITOR: no HELLO seen
        self._client = Redis.from_url(self.url)
        pool = self._client.connection_pool
        self._conn = await pool.get_connection()  # type: ignore[no-untyped-call]
        await self._conn.send_command("MONITOR")
        await self._conn.read_response()
        self._reader = asyncio.create_task(self._read())
        return self

    async def _read(self) -> None:
        while True:
            raw = await self._conn.read_response()
            line = raw.decode(errors="replace") if isinstance(raw, bytes) else str(raw)
            if self.MARK in line:
                return
            self.lines.append(line)

    async def __aexit__(self, *exc: object) -> None:
        await self._marker.echo(self.MARK)
        await asyncio.wait_for(self._reader, 30)
        await self._conn.disconnect()
        await self._client.connection_pool.release(self._conn)
        await self._client.aclose()
        await self._marker.aclose()


def name(line: str) -> str:
    return line.split('"')[1].upper()


def groups(lines: list[str]) -> list[list[str]]:
    """Each client command with the commands its script ran (MONITOR lists a script's
    commands right after its EVALSHA; scripts run one at a time)."""
    out: list[list[str]] = []
    for line in lines:
        if "[0 lua]" in line and out:
            out[-1].append(line)
        else:
            out.append([line])
    return out


def idle_look(group: list[str]) -> bool:
    """An empty claim: a worker looking at an empty queue (``LPOP ring`` found nothing),
    maybe renewing its entry on the idle list (``TIME``, ``LREM``/``RPUSH`` of ``:idle``)."""
    if name(group[0]) == "PUBSUB":  # after an idle look: is it the only worker?
        return True
    inner = [name(line) for line in group[1:]]
    if name(group[0]) != "EVALSHA" or inner[:1] != ["LPOP"] or ":ring" not in group[1]:
        return False
    rest = group[2:]
    return all(name(line) == "TIME" or ':idle"' in line for line in rest)


def setup(group: list[str]) -> bool:
    """A new connection's handshake (a pool growing under load), not a job's command."""
    return name(group[0]) in ("HELLO", "CLIENT", "AUTH")


def report(title: str, lines: list[str], jobs: int) -> dict[str, float]:
    found = groups(lines)
    looks = [g for g in found if idle_look(g)]
    handshakes = [g for g in found if setup(g)]
    kept = [g for g in found if not idle_look(g) and not setup(g)]
    trips = len(kept)
    total = sum(len(g) for g in kept)
    print(f"\n## {title}: {jobs} job{'s' if jobs > 1 else ''}")
    if os.environ.get("SHOW") and jobs == 1:
        for g in kept:
            print("  " + g[0].split("] ", 1)[1][:150])
            for line in g[1:]:
                print("      " + line.split("] ", 1)[1][:140])
    print(
        f"per job: {trips / jobs:.2f} client round trips, {total / jobs:.2f} commands in all"
        f" (left out: {len(looks)} idle looks at the queue, {len(handshakes)} connection"
        " handshakes)"
    )
    outside = collections.Counter(name(g[0]) for g in kept)
    inside = collections.Counter(name(line) for g in kept for line in g[1:])
    print("  clients: " + ", ".join(f"{n / jobs:.2f} {c}" for c, n in outside.most_common()))
    print("  scripts: " + ", ".join(f"{n / jobs:.2f} {c}" for c, n in inside.most_common()))
    return {"trips": trips / jobs, "commands": total / jobs}


async def jobs_flow(http: httpx.AsyncClient) -> None:
    r = await http.post("/v1/jobs", json=SPEC)
    assert r.status_code == 202, r.text
    done = await http.get(f"/v1/jobs/{r.json()['id']}", params={"waitMs": WAIT_MS})
    assert done.json()["status"] == "succeeded", done.text


async def generate_flow(http: httpx.AsyncClient) -> None:
    r = await http.post("/v1/generate", params={"waitMs": WAIT_MS}, json=SPEC)
    assert r.status_code == 200, r.text
    assert r.json()["status"] == "succeeded", r.text


async def measure(
    redis_url: str,
    api: str,
    title: str,
    flow: Callable[[httpx.AsyncClient], Awaitable[None]],
    jobs: int,
    headers: dict[str, str],
) -> dict[str, float]:
    # Idle connections are dropped before the server's keep-alive timeout (5 s) can close
    # one under a request.
    limits = httpx.Limits(max_connections=jobs + 1, keepalive_expiry=1.0)
    async with httpx.AsyncClient(base_url=api, timeout=60, limits=limits, headers=headers) as http:
        await flow(http)  # warm: scripts loaded, subscriptions made
        await asyncio.gather(*(flow(http) for _ in range(jobs)))
    await asyncio.sleep(1.5)  # the worker goes idle
    async with (
        httpx.AsyncClient(base_url=api, timeout=60, limits=limits, headers=headers) as http,
        Monitor(redis_url) as monitor,
    ):
        await asyncio.gather(*(flow(http) for _ in range(jobs)))
    return report(title, monitor.lines, jobs)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--jobs", type=int, default=100, help="jobs at once in the load flows")
    parser.add_argument("--rounds", type=int, default=3, help="runs of each load flow")
    parser.add_argument(
        "--tenants", action="store_true", help="with an API key: the shared quotas counted"
    )
    args = parser.parse_args()
    keyed: dict[str, object] = {}
    headers: dict[str, str] = {}
    if args.tenants:
        digest = hashlib.sha256(BENCH_KEY.encode()).hexdigest()
        keyed = {
            "api_keys": [f"bench:{digest}"],
            "rate_per_tenant": 1e6,
            "burst_per_tenant": 1_000_000,
        }
        headers = {"authorization": f"Bearer {BENCH_KEY}"}
    with (
        tempfile.TemporaryDirectory() as d,
        EmbeddedRedis(Path(d) / "redis") as redis,
        serve_in_background(SimConfig()) as sim,
    ):
        providers = ProvidersConfig(
            default="m",
            providers={"sim": ProviderConfig(kind="openai", base_url=f"{sim}/v1")},
            models={"m": ModelConfig(provider="sim", structured="prompt")},
        )
        settings = Settings(
            redis_url=SecretStr(redis.url),
            data_dir=Path(d) / "data",
            worker_metrics_port=0,
            heartbeat_ms=10_000,  # few heartbeats or reaper passes inside a measured run
            reap_interval_ms=60_000,
            **keyed,  # type: ignore[arg-type]
        )
        app = api_app(settings, embedded_worker=True, providers=providers)
        with serve_in_thread(app, name="api", lifespan="on", startup_timeout_s=60) as api:
            results: dict[str, list[dict[str, float]]] = {}
            jobs = "jobs (POST /v1/jobs + GET ?waitMs)"
            generate = "generate (POST /v1/generate?waitMs)"
            runs = [(jobs, jobs_flow, 1), (generate, generate_flow, 1)]
            for _ in range(args.rounds):  # how claims batch moves with timing: several runs
                runs += [(jobs, jobs_flow, args.jobs), (generate, generate_flow, args.jobs)]
            for title, flow, n in runs:
                for attempt in range(3):
                    try:
                        result = asyncio.run(measure(redis.url, api, title, flow, n, headers))
                        break
                    except httpx.TransportError as exc:  # the run is not counted: again
                        print(f"({title} x{n}: {exc!r} from the loopback server, run again)")
                        if attempt == 2:
                            raise
                results.setdefault(f"{title} x{n}", []).append(result)
            print("\n## summary (per job; load: the range over the runs)")
            for key, got in results.items():
                trips = [r["trips"] for r in got]
                commands = [r["commands"] for r in got]
                print(
                    f"- {key}: {min(trips):.2f}–{max(trips):.2f} client round trips, "
                    f"{min(commands):.2f}–{max(commands):.2f} commands in all"
                )


if __name__ == "__main__":
    main()
