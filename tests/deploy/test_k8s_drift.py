"""The Kubernetes manifests against the code they deploy: commands, settings, ports, probe
paths, the drain, the providers file, the metrics the alerts and KEDA read.

Most checks read the code (app/cli.py's parser, app/settings.py, the API's routes,
app/metrics.py's registry). The last one runs the service as the manifests say, as real
processes on loopback: the containers' own args, the rendered ConfigMap as the
environment (addresses, ports and the data directory moved to this machine, the
simulator as the provider), a real redis-server. It probes the API, runs a job, scrapes
the API's and the worker's /metrics and checks every metric an alert or the KEDA query
names is there, on the component the query says.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import secrets
import signal
import subprocess
import sys
import time
import tomllib
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families

from app import metrics
from app.api.system import router as system_router
from app.child import free_loopback_port
from app.cli import SERVICE, _parser
from app.providers.config import load_providers
from app.redis_server import EmbeddedRedis
from app.settings import Settings
from app.worker.callbacks import GRACE_S
from reprompt_sim.server import SimConfig, serve_in_background
from tests.deploy.drift import live_metric_names, setting_env_names
from tests.deploy.kube import (
    EXAMPLE,
    Doc,
    config_data,
    containers,
    of_kind,
    one,
    pod_specs,
    queries,
    render,
    selectors,
)
from tests.waiting import sync_until

OVERLAYS = [EXAMPLE]
DRAIN_SLACK_S = 5  # beyond the drain and the callback sender's grace, before SIGKILL


@pytest.fixture(scope="module", params=OVERLAYS, ids=lambda p: p.name)
def docs(request: pytest.FixtureRequest) -> tuple[Doc, ...]:
    path: Path = request.param
    return render(path)


def reprompt_containers(docs: tuple[Doc, ...]) -> list[tuple[Doc, Doc]]:
    found = [
        (w, c) for w, c in containers(docs) if c["image"].split("/")[-1].startswith("reprompt")
    ]
    assert {w["metadata"]["name"] for w, _ in found} == {"reprompt-api", "reprompt-worker"}
    return found


def settings_of(docs: tuple[Doc, ...]) -> Settings:
    """Settings as the pods get them: the ConfigMap (secrets are references)."""
    data = config_data(docs)
    saved = {k: v for k, v in os.environ.items() if k.startswith("REPROMPT_")}
    try:
        for key in saved:
            del os.environ[key]
        os.environ.update(data)
        return Settings()
    finally:
        for key in data:
            os.environ.pop(key, None)
        os.environ.update(saved)


def container(docs: tuple[Doc, ...], component: str) -> Doc:
    workload = one(docs, "Deployment", f"reprompt-{component}")
    found: Doc = workload["spec"]["template"]["spec"]["containers"][0]
    return found


def named_port(spec: Doc, port: int | str) -> int:
    if isinstance(port, int):
        return port
    for item in spec.get("ports", []):
        if item.get("name") == port:
            number: int = item["containerPort"]
            return number
    raise AssertionError(f"no port named {port!r} in {spec['name']}")


# -- commands and settings ---------------------------------------------------------------


def test_every_container_runs_a_real_reprompt_service_command(docs: tuple[Doc, ...]) -> None:
    parser = _parser()
    commands = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    for workload, spec in reprompt_containers(docs):
        assert spec["command"] == ["reprompt"], workload["metadata"]["name"]
        args = spec["args"]
        assert args[0] in commands.choices, args
        assert args[0] in SERVICE, f"{args[0]} is not a long-running command"
        parser.parse_args(args)  # exits on an unknown flag
    assert container(docs, "api")["args"] == ["api"]
    assert container(docs, "worker")["args"] == ["worker"]


def test_every_reprompt_variable_is_a_real_setting_and_the_config_validates(
    docs: tuple[Doc, ...],
) -> None:
    known = setting_env_names()
    data = config_data(docs)
    assert data
    for key in data:
        assert key.startswith("REPROMPT_"), key
        assert key in known, f"ConfigMap key {key} is no setting of app/settings.py"
    for _, spec in reprompt_containers(docs):
        for env in spec.get("env", []):
            assert env["name"] in known, f"{spec['name']}: {env['name']} is no setting"
        for source in spec.get("envFrom", []):
            assert "configMapRef" in source
    settings_of(docs)  # raises when a value is wrong (or two contradict each other)


def test_a_made_up_setting_would_be_caught() -> None:
    assert "REPROMPT_WORKER_CONCURRENCY" in setting_env_names()
    assert "REPROMPT_REDIS_URL" in setting_env_names()
    assert "REDIS_URL" in setting_env_names()
    assert "REPROMPT_WORKER_THREADS" not in setting_env_names()


def test_ports_agree_with_the_settings(docs: tuple[Doc, ...]) -> None:
    settings = settings_of(docs)
    assert settings.host == "0.0.0.0"  # reachable from the Service and Prometheus
    api, worker = container(docs, "api"), container(docs, "worker")
    assert named_port(api, "http") == settings.port
    assert named_port(worker, "metrics") == settings.worker_metrics_port
    for probe in ("startupProbe", "livenessProbe", "readinessProbe"):
        assert named_port(api, api[probe]["httpGet"]["port"]) == settings.port
    assert named_port(worker, worker["livenessProbe"]["httpGet"]["port"]) == (
        settings.worker_metrics_port
    )
    service = one(docs, "Service", "reprompt-api")
    for port in service["spec"]["ports"]:
        assert named_port(api, port["targetPort"]) == settings.port
    ingress = {
        policy["metadata"]["name"]: {
            p["port"] for rule in policy["spec"].get("ingress", []) for p in rule.get("ports", [])
        }
        for policy in of_kind(docs, "NetworkPolicy")
    }
    assert ingress["reprompt-api"] == {settings.port}
    assert ingress["reprompt-worker"] == {settings.worker_metrics_port}


def test_probe_paths_are_routes_of_the_api(docs: tuple[Doc, ...]) -> None:
    routes = {getattr(route, "path", None) for route in system_router.routes}
    api = container(docs, "api")
    for probe in ("startupProbe", "livenessProbe", "readinessProbe"):
        assert api[probe]["httpGet"]["path"] in routes
    assert container(docs, "worker")["livenessProbe"]["httpGet"]["path"] == "/metrics"


def test_workers_get_longer_than_their_drain_before_sigkill(docs: tuple[Doc, ...]) -> None:
    settings = settings_of(docs)
    grace = one(docs, "Deployment", "reprompt-worker")["spec"]["template"]["spec"][
        "terminationGracePeriodSeconds"
    ]
    assert grace >= settings.drain_timeout_s + GRACE_S + DRAIN_SLACK_S


def test_keda_targets_fewer_jobs_per_worker_than_a_worker_holds(docs: tuple[Doc, ...]) -> None:
    settings = settings_of(docs)
    scaled = one(docs, "ScaledObject", "reprompt-worker")
    (trigger,) = scaled["spec"]["triggers"]
    assert trigger["type"] == "prometheus"
    assert trigger["metricType"] == "AverageValue"
    assert 0 < float(trigger["metadata"]["threshold"]) <= settings.worker_concurrency
    assert scaled["spec"]["minReplicaCount"] >= 1  # RepromptNoWorkers assumes one at least


def test_files_and_directories_are_where_the_settings_say(
    docs: tuple[Doc, ...], tmp_path: Path
) -> None:
    settings = settings_of(docs)
    assert settings.providers_file is not None
    providers_map = one(docs, "ConfigMap", "reprompt-providers")
    for workload, spec in pod_specs(docs):
        if workload["metadata"]["name"] not in ("reprompt-api", "reprompt-worker"):
            continue
        (main,) = spec["containers"]
        mounts = {m["mountPath"]: m for m in main["volumeMounts"]}
        volumes = {v["name"]: v for v in spec["volumes"]}
        # The data directory is a writable emptyDir (the root filesystem is read-only).
        assert "emptyDir" in volumes[mounts[str(settings.data_dir)]["name"]]
        # The providers file is a key of the providers ConfigMap, mounted where it says.
        folder = mounts[str(settings.providers_file.parent)]
        assert volumes[folder["name"]]["configMap"]["name"] == providers_map["metadata"]["name"]
        assert settings.providers_file.name in providers_map["data"]
        # Every key file it names is in the provider-keys Secret's mount, in the workers
        # only: the API calls no model and does not read them (least privilege).
        config = tomllib.loads(providers_map["data"][settings.providers_file.name])
        key_files = [p["api_key_file"] for p in config["providers"].values() if "api_key_file" in p]
        assert key_files
        secrets_mounted = {v["secret"]["secretName"] for v in volumes.values() if "secret" in v}
        if workload["metadata"]["name"] == "reprompt-api":
            assert "reprompt-provider-keys" not in secrets_mounted
            continue
        for key_file in key_files:
            mount = mounts[str(Path(key_file).parent)]
            assert volumes[mount["name"]]["secret"]["secretName"] == "reprompt-provider-keys"
    # And the providers file loads as the service loads it, keys in place.
    text = providers_map["data"][settings.providers_file.name]
    config = tomllib.loads(text)
    for provider in config["providers"].values():
        if "api_key_file" in provider:
            key = tmp_path / Path(provider["api_key_file"]).name
            key.write_text("test-key-" + secrets.token_hex(8))
            text = text.replace(provider["api_key_file"], str(key))
    local = tmp_path / "providers.toml"
    local.write_text(text)
    loaded = load_providers({}, str(local))
    assert loaded.models
    assert loaded.default in {*loaded.models, *loaded.routes}


# -- metrics -------------------------------------------------------------------------------


def test_alerts_and_keda_name_only_exported_metrics_in_the_overlay_namespace(
    docs: tuple[Doc, ...],
) -> None:
    body, _ = metrics.exposition()
    exported = live_metric_names(body.decode())
    namespace = one(docs, "Deployment", "reprompt-api")["metadata"]["namespace"]
    exprs = queries(docs)
    assert len(exprs) >= 8
    for where, expr in exprs:
        for name, labels in selectors(expr):
            assert name in exported, f"{where}: {name} is not a metric reprompt exports"
            assert labels.get("namespace") == namespace, f"{where}: {name} {labels}"
            assert labels.get("component", "api") in ("api", "worker"), where
            # Only API processes compute the queue (at scrape time, over every shard); a
            # worker's gauges of it stay 0, so a query must not read them there.
            if name.startswith("reprompt_queue_"):
                assert labels.get("component") == "api", f"{where}: {name} {labels}"


def test_an_unexported_metric_would_be_caught() -> None:
    body, _ = metrics.exposition()
    exported = live_metric_names(body.decode())
    assert "reprompt_jobs_finished_total" in exported
    assert "reprompt_queue_depth" in exported
    assert "reprompt_llm_request_duration_seconds_bucket" in exported
    assert "reprompt_jobs_finished" not in exported  # a counter's samples end in _total
    assert "reprompt_queue_depth_total" not in exported


# -- the service as deployed, on loopback ----------------------------------------------


class Process:
    """One container's command as a process, its output in a file."""

    def __init__(self, args: list[str], env: dict[str, str], log: Path) -> None:
        self.log = log
        script = Path(sys.executable).with_name("reprompt")
        argv = [str(script)] if script.exists() else [sys.executable, "-m", "app.cli"]
        with open(log, "wb") as out:
            self.proc = subprocess.Popen(
                [*argv, *args],
                env=env,
                stdin=subprocess.DEVNULL,
                stdout=out,
                stderr=subprocess.STDOUT,
            )

    def output(self) -> str:
        return self.log.read_text(errors="replace")[-4000:]

    def stop(self, grace_s: float) -> tuple[int | None, float]:
        """SIGTERM, as the kubelet sends; (exit code, seconds it took) or (None, grace)."""
        if self.proc.poll() is not None:
            return self.proc.returncode, 0.0
        started = time.monotonic()
        self.proc.send_signal(signal.SIGTERM)
        try:
            code = self.proc.wait(timeout=grace_s)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait(timeout=10)
            return None, grace_s
        return code, time.monotonic() - started


def wait_for(url: str, process: Process) -> httpx.Response:
    def answered() -> httpx.Response | None:
        if process.proc.poll() is not None:
            pytest.fail(f"exited ({process.proc.returncode}):\n{process.output()}")
        try:
            response = httpx.get(url, timeout=5)
        except httpx.TransportError:
            return None
        return response if response.status_code == 200 else None

    return sync_until(answered, what=f"{url} to answer 200", every=0.2)


@pytest.fixture(scope="module")
def sim_url() -> Iterator[str]:
    with serve_in_background(SimConfig(seed=5)) as url:
        yield url


def test_the_service_started_as_the_manifests_say_exports_what_alerts_and_keda_read(
    docs: tuple[Doc, ...], sim_url: str, tmp_path: Path
) -> None:
    data = config_data(docs)
    api_spec, worker_spec = container(docs, "api"), container(docs, "worker")
    api_port, metrics_port = free_loopback_port(), free_loopback_port()
    key = "k8s-" + secrets.token_hex(8)
    providers = tmp_path / "sim.toml"
    providers.write_text(
        f'[providers.sim]\nkind = "openai"\nbase_url = "{sim_url}/v1"\n\n'
        '[models.sim-model]\nprovider = "sim"\nstructured = "prompt"\n'
    )
    base = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith(("REPROMPT_", "OPENAI_", "ANTHROPIC_", "REDIS_"))
    }
    grace = one(docs, "Deployment", "reprompt-worker")["spec"]["template"]["spec"][
        "terminationGracePeriodSeconds"
    ]
    with EmbeddedRedis(tmp_path / "redis") as redis:
        # The ConfigMap as is, then what differs on this machine; secrets as the Secret
        # would hold them.
        env = (
            base
            | data
            | {
                "PYTHONUNBUFFERED": "1",
                "REPROMPT_HOST": "127.0.0.1",
                "REPROMPT_PORT": str(api_port),
                "REPROMPT_WORKER_METRICS_PORT": str(metrics_port),
                "REPROMPT_DATA_DIR": str(tmp_path / "data"),
                "REPROMPT_PROVIDERS": str(providers),
                "REPROMPT_KEY_PREFIX": "k" + secrets.token_hex(4),
                "REPROMPT_REDIS_URL": redis.url,
                "REPROMPT_API_KEYS": f"ops:{hashlib.sha256(key.encode()).hexdigest()}",
                "REPROMPT_WEBHOOK_SIGNING_KEY": secrets.token_urlsafe(32),
            }
        )
        api = Process(api_spec["args"], env, tmp_path / "api.log")
        worker = Process(worker_spec["args"], env, tmp_path / "worker.log")
        try:
            url = f"http://127.0.0.1:{api_port}"
            for probe in ("startupProbe", "livenessProbe", "readinessProbe"):
                wait_for(url + api_spec[probe]["httpGet"]["path"], api)
            worker_metrics = f"http://127.0.0.1:{metrics_port}"
            wait_for(worker_metrics + worker_spec["livenessProbe"]["httpGet"]["path"], worker)

            directive = json.dumps({"script": ["ok"]})
            job = {
                "task": f"Name a city ({secrets.token_hex(4)})\n[[sim {directive}]]",
                "signature": "{city :string, population :int}",
                "budget": {"maxTurns": 1},
            }
            with httpx.Client(
                base_url=url, headers={"authorization": f"Bearer {key}"}, timeout=30
            ) as http:
                created = http.post("/v1/jobs", json=job)
                assert created.status_code == 202, created.text
                job_id = created.json()["id"]

                def ended() -> dict[str, Any] | None:
                    view: dict[str, Any] = http.get(
                        f"/v1/jobs/{job_id}", params={"waitMs": 5000}
                    ).json()
                    return view if view["status"] in ("succeeded", "failed") else None

                view = sync_until(ended, what="the job to end")
                assert view["status"] == "succeeded", f"{view}\n{worker.output()}"

            scraped = {"api": httpx.get(url + "/metrics", timeout=10).text}

            # The worker's circuit gauge follows within its refresh period.
            def worker_scrape() -> str:
                return httpx.get(worker_metrics + "/metrics", timeout=10).text

            scraped["worker"] = sync_until(
                lambda: (
                    text
                    if 'reprompt_circuit_state{target="sim/sim-model"}' in (text := worker_scrape())
                    else None
                ),
                what="the worker's circuit gauge",
                every=0.5,
            )
        finally:
            worker_exit = worker.stop(grace)
            api_exit = api.stop(30)

    names = {component: live_metric_names(text) for component, text in scraped.items()}
    assert 'reprompt_jobs_finished_total{error="",status="succeeded"} 1.0' in scraped["worker"]
    assert "reprompt_jobs_submitted_total 1.0" in scraped["api"]
    for where, expr in queries(docs):
        for name, labels in selectors(expr):
            component = labels.get("component")
            where_found = [c for c, exported in names.items() if name in exported]
            assert where_found, f"{where}: {name} is in neither live scrape"
            if component is not None:
                assert component in where_found, f"{where}: {name} not on the {component}"
    # SIGTERM: both exit 0, the worker well within its grace period.
    assert worker_exit[0] == 0, worker.output()
    assert worker_exit[1] < grace
    # uvicorn shuts down cleanly, then re-raises the SIGTERM it caught.
    assert api_exit[0] in (0, -signal.SIGTERM), api.output()
    assert "Application shutdown complete." in api.output()


# -- the operations guide ----------------------------------------------------------------

OPERATIONS = Path(__file__).resolve().parents[2] / "docs" / "operations.md"


def slug(heading: str) -> str:
    """A GitHub heading anchor: lower case, punctuation dropped, spaces to hyphens."""
    kept = "".join(c for c in heading.strip().lower() if c.isalnum() or c in " -_")
    return kept.replace(" ", "-")


def test_the_operations_guide_names_every_metric_and_every_alert(docs: tuple[Doc, ...]) -> None:
    text = OPERATIONS.read_text(encoding="utf-8")
    body, _ = metrics.exposition()
    families = {
        family.name + ("_total" if family.type == "counter" else "")
        for family in text_string_to_metric_families(body.decode())
        if not family.name.endswith("_created")  # a counter's creation time, exposed apart
    }
    assert len(families) >= 25
    for name in families:
        assert f"`{name}`" in text, f"docs/operations.md does not describe {name}"
    anchors = {slug(line.lstrip("#")) for line in text.splitlines() if line.startswith("#")}
    for rule in of_kind(docs, "PrometheusRule"):
        for group in rule["spec"]["groups"]:
            for alert in group["rules"]:
                assert f"### {alert['alert']}" in text, alert["alert"]
                url = alert["annotations"]["runbook_url"]
                page, _, anchor = url.partition("#")
                assert page == "docs/operations.md", url
                assert anchor in anchors, f"{alert['alert']}: no heading for #{anchor}"
