"""Redis commands one single-turn job costs, submit to long-poll answer (redis-cli MONITOR).

A first job warms everything up (scripts loaded, subscriptions made); the second is
counted: the commands clients send (round trips) and those the Lua scripts run.

.venv/bin/python bench/redis_commands.py
"""

import asyncio
import collections
import os
import sys
import tempfile
import time
import urllib.parse
from pathlib import Path

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))
from app.providers.config import ModelConfig, ProviderConfig, ProvidersConfig
from app.providers.embedded import open_router
from app.providers.http import make_client
from app.redis_server import EmbeddedRedis, find_redis_server
from app.settings import Settings
from app.store import JobStore, Leases, connect
from app.worker import Worker
from reprompt_sim.server import SimConfig, serve_in_background


async def main(url: str, sim: str) -> None:
    r, rw = connect(url), connect(url)  # the API's pool and the worker's, as in a service
    store = JobStore(r)
    leases = Leases(rw)
    cfg = ProvidersConfig(
        providers={"sim": ProviderConfig(kind="openai", base_url=f"{sim}/v1")},
        models={"m": ModelConfig(provider="sim", structured="prompt")},
    )
    async with (
        make_client() as http,
        open_router(http, data_dir=Path(tempfile.mkdtemp()), config=cfg) as router,
    ):
        w = Worker(
            leases,
            router,
            Settings(worker_metrics_port=0, heartbeat_ms=10000, reap_interval_ms=60000),
        )
        stop = asyncio.Event()
        t = asyncio.create_task(w.run(stop))
        spec = {"task": "x", "signature": "{a :int}", "budget": {"maxTurns": 1}}
        warm, _ = await store.submit(tenant="t", spec=spec)
        await store.wait(warm.id, tenant="t", wait_ms=5000)
        await asyncio.sleep(0.5)
        cli = find_redis_server().with_name("redis-cli")  # the redis-cli next to the server
        u = urllib.parse.urlsplit(
            url
        )  # redis-cli 6.2 sends AUTH "" PASSWORD for -u redis://:PASSWORD@
        mon = await asyncio.create_subprocess_exec(
            cli,
            "-h",
            str(u.hostname),
            "-p",
            str(u.port),
            "monitor",
            stdout=asyncio.subprocess.PIPE,
            env={**os.environ, "REDISCLI_AUTH": u.password or ""},
        )
        await asyncio.sleep(0.5)
        # From the submit on: an idle worker's once-a-second look at the queue is not the
        # job's (MONITOR's timestamps are this machine's clock)
        start = time.time()
        job, _ = await store.submit(tenant="t", spec=spec)
        await store.wait(job.id, tenant="t", wait_ms=5000)
        await asyncio.sleep(0.3)
        mon.terminate()
        out, _ = await mon.communicate()
        lines = [
            line
            for line in out.decode().splitlines()
            if line.startswith("1") and float(line.split()[0]) >= start
        ]
        if os.environ.get("SHOW"):
            print("\n".join(line[:200] for line in lines))
        # EVALSHA runs are counted once; the commands a script runs inside are not round trips
        trips = [line for line in lines if "[0 lua]" not in line]
        print(f"{len(trips)} commands from clients ({len(lines)} including inside scripts)")
        counts = collections.Counter(line.split('"')[1] for line in trips)
        for name, n in counts.most_common():
            print(f"{n:4} {name}")
        inside = collections.Counter(line.split('"')[1] for line in lines if "[0 lua]" in line)
        print("inside scripts:", ", ".join(f"{n} {name}" for name, n in inside.most_common()))
        stop.set()
        await t
    await store.aclose()
    await leases.aclose()
    await r.aclose()
    await rw.aclose()


with (
    tempfile.TemporaryDirectory() as d,
    EmbeddedRedis(Path(d)) as srv,
    serve_in_background(SimConfig()) as sim,
):
    asyncio.run(main(srv.url, sim))
