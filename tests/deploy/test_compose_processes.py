"""docker-compose.yml's services run as plain local processes, and one job goes through them.

No Docker engine here, so each service runs with its compose command and environment as a
process on loopback: service host names map to 127.0.0.1 and each container port to a free
port; bind-mounted paths and volumes map to files and folders of the test. Redis is the
embedded wheel's redis-server with the compose file's arguments, the simulator is the
compose file's ``reprompt sim ...``, the API ``reprompt api`` and the workers (as many as
``deploy.replicas``) ``reprompt worker``. The image's HEALTHCHECK command is run against
each. Grafana has no binary here: its files are checked statically
(tests/deploy/test_compose.py). Prometheus is Debian's package (scripts/apt-packages.txt):
a real one scrapes the API and both workers and evaluates deploy/base/alerts.yaml's rules
(its compose config is checked by promtool, tests/deploy/test_alerts.py).
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
import signal
import subprocess
import sys
from collections.abc import Iterator
from contextlib import ExitStack
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest
import redis
import yaml

from app.child import free_loopback_port
from app.redis_server import find_redis_server
from tests.deploy.drift import (
    DOCKERFILE,
    ROOT,
    command,
    dashboard_exprs,
    environment,
    live_metric_names,
    load_compose,
    promql_metric_names,
)
from tests.waiting import sync_until

pytestmark = pytest.mark.slow

DEV_KEY = "reprompt-dev-key"  # docker-compose.yml's development key (docs/deploy.md)
STOP_S = 40.0  # the worker's stop_grace_period


@dataclass
class Process:
    name: str
    proc: subprocess.Popen[bytes]
    log: Path

    def text(self) -> str:
        return self.log.read_text(encoding="utf-8", errors="replace")


class Loopback:
    """Compose's network on loopback: ``host:port`` of a service → ``127.0.0.1:free``."""

    def __init__(self) -> None:
        self.ports: dict[tuple[str, int], int] = {}

    def port(self, host: str, port: int) -> int:
        return self.ports.setdefault((host, port), free_loopback_port())

    def translate(self, value: str, services: set[str]) -> str:
        def sub(match: re.Match[str]) -> str:
            host, port = match.group(1), int(match.group(2))
            return f"127.0.0.1:{self.port(host, port)}"

        names = "|".join(re.escape(name) for name in sorted(services))
        return re.sub(rf"(?<=[/@])({names}):(\d+)", sub, value)


def _base_env() -> dict[str, str]:
    env = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith(("REPROMPT_", "OPENAI_", "ANTHROPIC_", "REDIS_"))
    }
    return env | {"PYTHONUNBUFFERED": "1"}


def _mounts(svc: dict[str, Any], volumes: dict[str, Path], tmp: Path) -> dict[str, Path]:
    """Container path → host path: bind mounts copied (their service names translated by
    the caller), named volumes as folders of the test."""
    out: dict[str, Path] = {}
    for volume in svc.get("volumes") or []:
        source, _, rest = str(volume).partition(":")
        target = rest.split(":")[0]
        out[target] = ROOT / source if source.startswith(".") else volumes[source]
    return out


def _map_path(value: str, mounts: dict[str, Path]) -> str:
    for target, host in mounts.items():
        if value == target or value.startswith(target + "/"):
            return str(host) + value.removeprefix(target)
    return value


def _healthcheck(env: dict[str, str]) -> int:
    """The image's HEALTHCHECK command, run with a service's environment."""
    match = re.search(r"^HEALTHCHECK [^\n]*\\\n\s+CMD (\[.*\])$", DOCKERFILE.read_text(), re.M)
    assert match is not None
    argv = json.loads(match.group(1))
    assert argv[0] == "python"
    done = subprocess.run(
        [sys.executable, *argv[1:]], env=env, capture_output=True, timeout=30, check=False
    )
    return done.returncode


def _wait(what: str, check: Any, procs: list[Process]) -> Any:
    def looked() -> Any:
        for p in procs:
            if p.proc.poll() is not None:
                pytest.fail(f"{p.name} exited {p.proc.returncode}:\n{p.text()[-3000:]}")
        try:
            return check()
        except (httpx.TransportError, redis.RedisError, OSError):
            return None

    return sync_until(looked, what=what, every=0.1)


@pytest.fixture
def stack(tmp_path: Path) -> Iterator[dict[str, Any]]:
    compose = load_compose()
    services: dict[str, Any] = compose["services"]
    names = set(services)
    net = Loopback()
    volumes = {name: tmp_path / "volumes" / name for name in compose.get("volumes") or {}}
    for folder in volumes.values():
        folder.mkdir(parents=True)
    # The bind-mounted providers files, their service URLs on loopback.
    providers = tmp_path / "providers"
    shutil.copytree(ROOT / "deploy" / "compose" / "providers", providers)
    for file in providers.iterdir():
        file.write_text(net.translate(file.read_text(), names))
    procs: list[Process] = []
    out: dict[str, Any] = {"net": net, "procs": procs, "compose": compose}

    def spawn(name: str, argv: list[str], env: dict[str, str]) -> Process:
        log = tmp_path / f"{name}.log"
        with log.open("wb") as handle:
            proc = subprocess.Popen(
                argv, env=env, stdout=handle, stderr=subprocess.STDOUT, start_new_session=True
            )
        process = Process(name, proc, log)
        procs.append(process)
        return process

    with ExitStack() as stop:

        def kill_all() -> None:
            for p in procs:
                if p.proc.poll() is None:
                    p.proc.kill()
                    p.proc.wait(timeout=10)

        stop.callback(kill_all)
        # Redis: the compose command, on a loopback port, its data in the volume.
        argv = command(services["redis"])
        assert argv[0] == "redis-server"
        redis_dir = volumes["redis-data"]
        redis_argv = [str(find_redis_server()), *argv[1:]]
        redis_argv += ["--port", str(net.port("redis", 6379)), "--bind", "127.0.0.1"]
        redis_argv += ["--dir", str(redis_dir), "--daemonize", "no"]
        out["redis"] = spawn("redis", redis_argv, _base_env())
        password = argv[argv.index("--requirepass") + 1]
        client = redis.Redis(port=net.port("redis", 6379), password=password)
        stop.callback(client.close)
        _wait("redis", client.ping, procs)
        out["redis_client"], out["redis_dir"] = client, redis_dir

        # The simulator: its compose command through `reprompt sim`.
        sim = command(services["sim"])
        sim[sim.index("--host") + 1] = "127.0.0.1"
        sim_port = int(sim[sim.index("--port") + 1])
        sim[sim.index("--port") + 1] = str(net.port("sim", sim_port))
        sim_env = _base_env() | {
            k: net.translate(v, names) for k, v in environment(services["sim"]).items()
        }
        sim_env["HEALTHCHECK_URL"] = sim_env["HEALTHCHECK_URL"].replace(
            f"127.0.0.1:{sim_port}", f"127.0.0.1:{net.port('sim', sim_port)}"
        )
        spawn("sim", [sys.executable, "-m", "app.cli", *sim], sim_env)
        url = f"http://127.0.0.1:{net.port('sim', sim_port)}"
        _wait("the simulator", lambda: httpx.get(f"{url}/healthz").is_success, procs)
        out["envs"] = {"sim": sim_env}

        def service_env(name: str) -> dict[str, str]:
            mounts = _mounts(services[name], volumes, tmp_path)
            mounts["/etc/reprompt/providers"] = providers
            env = _base_env()
            for key, value in environment(services[name]).items():
                value = _map_path(net.translate(value, names), mounts)
                env[key] = "127.0.0.1" if key == "REPROMPT_HOST" else value
            return env

        api_env = service_env("api")
        api_port = net.port("api", int(api_env["REPROMPT_PORT"]))
        api_env["REPROMPT_PORT"] = str(api_port)
        spawn("api", [sys.executable, "-m", "app.cli", *command(services["api"])], api_env)
        out["api_url"] = f"http://127.0.0.1:{api_port}"
        out["envs"]["api"] = api_env

        workers = []
        replicas = int(services["worker"]["deploy"]["replicas"])
        for index in range(replicas):
            env = service_env("worker")
            wanted = int(env["REPROMPT_WORKER_METRICS_PORT"])
            env["REPROMPT_WORKER_METRICS_PORT"] = str(net.port("worker", wanted))
            argv = [sys.executable, "-m", "app.cli", *command(services["worker"])]
            workers.append(spawn(f"worker-{index + 1}", argv, env))
        out["workers"] = workers
        out["worker_env"] = env
        yield out


def _metrics_port(worker: Process) -> int | None:
    found = re.search(r"metrics on http://127\.0\.0\.1:(\d+)/metrics", worker.text())
    return int(found.group(1)) if found else None


def test_one_job_runs_through_the_compose_services_as_processes(stack: dict[str, Any]) -> None:
    procs: list[Process] = stack["procs"]
    api_url: str = stack["api_url"]
    client: redis.Redis = stack["redis_client"]
    # Redis runs with the compose file's persistence and eviction settings.
    assert client.config_get("appendonly") == {"appendonly": "yes"}
    assert client.config_get("appendfsync") == {"appendfsync": "everysec"}
    assert client.config_get("maxmemory-policy") == {"maxmemory-policy": "noeviction"}

    _wait("the API to be ready", lambda: httpx.get(f"{api_url}/readyz").status_code == 200, procs)
    ports = [
        _wait(f"{w.name}'s metrics", lambda w=w: _metrics_port(w), procs) for w in stack["workers"]
    ]
    assert len(set(ports)) == len(ports) == 2
    for worker in stack["workers"]:
        _wait(f"{worker.name} to start", lambda w=worker: "started" in w.text(), procs)

    # The image's healthcheck passes for the API, the simulator and each worker.
    assert _healthcheck(stack["envs"]["api"]) == 0
    assert _healthcheck(stack["envs"]["sim"]) == 0
    for port in ports:
        env = stack["worker_env"] | {"HEALTHCHECK_URL": f"http://127.0.0.1:{port}/metrics"}
        assert _healthcheck(env) == 0

    # The development key is the one whose digest the compose file configures.
    digest = hashlib.sha256(DEV_KEY.encode()).hexdigest()
    assert stack["envs"]["api"]["REPROMPT_API_KEYS"] == f"dev:{digest}"
    assert httpx.post(f"{api_url}/v1/jobs", json={}).status_code == 401
    headers = {"authorization": f"Bearer {DEV_KEY}"}
    directive = json.dumps({"script": ["missing_field", "ok"]})
    body = {
        "task": f"Extract the person.\n[[sim {directive}]]",
        "input": "Alice Smith is 30 years old.",
        "signature": "{name :string, age :int}",
        "budget": {"maxTurns": 1, "returnRetries": 3},
    }
    with httpx.Client(base_url=api_url, headers=headers, timeout=30) as http:
        created = http.post("/v1/jobs", json=body)
        assert created.status_code == 202, created.text
        job_id = created.json()["id"]

        def ended() -> dict[str, Any] | None:
            job: dict[str, Any] = http.get(f"/v1/jobs/{job_id}", params={"waitMs": 5000}).json()
            return job if job["status"] in ("succeeded", "failed", "cancelled") else None

        job = _wait("the job to end", ended, [])
        assert job.get("status") == "succeeded", job
        result = job["result"]
        assert result["execution"]["provider"] == "sim"
        assert (
            result["execution"]["retryCount"] == 1
        )  # the scripted missing field, re-asked (a wrong type may be coerced)
        api_metrics = http.get("/metrics").text

    # What Prometheus would scrape: the API and every worker, together naming every metric
    # the dashboards read.
    worker_metrics = [httpx.get(f"http://127.0.0.1:{port}/metrics").text for port in ports]
    live = live_metric_names(api_metrics)
    for text in worker_metrics:
        live |= live_metric_names(text)
    named: set[str] = set()
    for path in (ROOT / "deploy" / "compose" / "grafana" / "dashboards").glob("*.json"):
        for expr in dashboard_exprs(json.loads(path.read_text())):
            named |= promql_metric_names(expr)
    assert sorted(named - {"up"} - live) == []
    finished = sum(
        float(m.group(1))
        for text in worker_metrics
        for m in re.finditer(
            r'^reprompt_jobs_finished_total\{error="",status="succeeded"\} (\S+)$', text, re.M
        )
    )
    assert finished == 1

    # `docker compose stop`: SIGTERM, the workers drain and exit 0 within the grace period.
    for worker in stack["workers"]:
        worker.proc.send_signal(signal.SIGTERM)
    for worker in stack["workers"]:
        assert worker.proc.wait(timeout=STOP_S) == 0, worker.text()[-2000:]
    # Redis keeps the job in its append-only file.
    client.shutdown(save=True)
    stack["redis"].proc.wait(timeout=30)
    aof = "".join(
        path.read_text(errors="replace")
        for path in Path(stack["redis_dir"]).rglob("*.aof*")
        if path.is_file()
    )
    assert job_id in aof


def test_a_real_prometheus_scrapes_the_api_and_two_workers_and_evaluates_the_alerts(
    stack: dict[str, Any], tmp_path: Path
) -> None:
    """Debian's prometheus on loopback, a temp config: the API's and both workers' /metrics
    as its targets (with the labels the Kubernetes scrape adds), deploy/base/alerts.yaml's
    groups as its rules. Every rule evaluates without error, and RepromptNoWorkers'
    expression finds no worker missing until both are stopped."""
    procs: list[Process] = stack["procs"]
    api_url: str = stack["api_url"]
    binary = shutil.which("prometheus")
    if binary is None:  # scripts/apt-packages.txt installs it: missing is a failure
        pytest.fail("prometheus is not on PATH: install Debian's prometheus package")
    _wait("the API to be ready", lambda: httpx.get(f"{api_url}/readyz").status_code == 200, procs)
    ports = [
        _wait(f"{w.name}'s metrics", lambda w=w: _metrics_port(w), procs) for w in stack["workers"]
    ]
    rule = yaml.safe_load((ROOT / "deploy" / "base" / "alerts.yaml").read_text())
    (tmp_path / "rules.yaml").write_text(yaml.safe_dump({"groups": rule["spec"]["groups"]}))
    labels = {"namespace": "reprompt"}
    targets = [
        {
            "targets": [api_url.removeprefix("http://")],
            "labels": labels | {"component": "api", "pod": "api-1"},
        },
        *(
            {
                "targets": [f"127.0.0.1:{port}"],
                "labels": labels | {"component": "worker", "pod": f"worker-{i + 1}"},
            }
            for i, port in enumerate(ports)
        ),
    ]
    config = {
        "global": {"scrape_interval": "1s", "scrape_timeout": "1s", "evaluation_interval": "1s"},
        "rule_files": ["rules.yaml"],
        "scrape_configs": [{"job_name": "reprompt", "static_configs": targets}],
    }
    (tmp_path / "prometheus.yml").write_text(yaml.safe_dump(config))
    port = free_loopback_port()
    with (tmp_path / "prometheus.log").open("wb") as log:
        server = subprocess.Popen(
            [
                binary,
                f"--config.file={tmp_path / 'prometheus.yml'}",
                f"--storage.tsdb.path={tmp_path / 'tsdb'}",
                f"--web.listen-address=127.0.0.1:{port}",
            ],
            cwd=tmp_path,
            stdout=log,
            stderr=subprocess.STDOUT,
        )
    procs.append(Process("prometheus", server, tmp_path / "prometheus.log"))
    prom = f"http://127.0.0.1:{port}/api/v1"

    def query(expr: str) -> list[dict[str, Any]]:
        body = httpx.get(f"{prom}/query", params={"query": expr}).json()
        assert body["status"] == "success", body
        result: list[dict[str, Any]] = body["data"]["result"]
        return result

    def scraped() -> bool:
        answer = httpx.get(f"{prom}/targets")
        if answer.status_code == 503:  # still starting: "Service Unavailable", not JSON
            return False
        active = answer.json()["data"]["activeTargets"]
        return len(active) == 3 and all(t["health"] == "up" for t in active)

    _wait("prometheus to scrape the API and both workers", scraped, procs)

    def evaluated() -> list[dict[str, Any]] | None:
        groups = httpx.get(f"{prom}/rules").json()["data"]["groups"]
        rules = [r for g in groups for r in g["rules"]]
        done = all(r["lastEvaluation"] > "0001-01-01T00:00:01Z" for r in rules)
        return rules if rules and done else None

    rules = _wait("prometheus to evaluate every rule", evaluated, procs)
    assert len(rules) == 10
    assert [(r["name"], r["health"], r.get("lastError", "")) for r in rules] == [
        (r["name"], "ok", "") for r in rules
    ]
    stalled = next(r for r in rules if r["name"] == "RepromptWorkerStalled")
    # The heartbeat stamp each worker exports, by pod, and no worker stalled.
    inner = stalled["query"].split(" - ", 1)[1].split(" > ", 1)[0]
    pods = sorted(s["metric"]["pod"] for s in query(inner))
    assert pods == ["worker-1", "worker-2"]
    assert query(stalled["query"]) == []
    no_workers = next(r for r in rules if r["name"] == "RepromptNoWorkers")
    assert query(no_workers["query"]) == []
    stuck = next(r for r in rules if r["name"] == "RepromptQueueStuck")
    assert query(stuck["query"]) == []  # nothing queued
    assert len(query(stuck["query"].removesuffix(" > 300"))) == 1  # the API's gauge is there

    # Both workers stopped: their series go stale at the next failed scrape, and the
    # alert's expression names the missing component.
    for worker in stack["workers"]:
        worker.proc.send_signal(signal.SIGTERM)
    for worker in stack["workers"]:
        assert worker.proc.wait(timeout=STOP_S) == 0, worker.text()[-2000:]
    missing = _wait(
        "RepromptNoWorkers' expression to find no worker",
        lambda: query(no_workers["query"]) or None,
        [p for p in procs if not p.name.startswith("worker")],
    )
    assert [s["metric"] for s in missing] == [{"namespace": "reprompt", "component": "worker"}]
