"""deploy/base/alerts.yaml's alerts evaluated by Prometheus's own tools (#29, item 12).

``promtool test rules`` runs tests/deploy/alerts/tests.yaml against the PrometheusRule's
groups: each alert fires on its condition and stays quiet otherwise. ``promtool check``
checks the rules (annotation templates included) and the compose Prometheus config.
promtool comes with Debian's ``prometheus`` package (scripts/apt-packages.txt). A real
Prometheus scraping a running API and workers: tests/deploy/test_compose_processes.py.
"""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.deploy.drift import ROOT

ALERTS = ROOT / "deploy" / "base" / "alerts.yaml"
CASES = Path(__file__).with_name("alerts") / "tests.yaml"
COMPOSE_PROMETHEUS = ROOT / "deploy" / "compose" / "prometheus.yml"


def promtool() -> str:
    path = shutil.which("promtool")
    if path is None:  # `make install` installs it: a missing one is a failure, not a skip
        pytest.fail("promtool is not on PATH: install Debian's prometheus package")
    return path


def groups(*, annotations: bool) -> list[dict[str, Any]]:
    """The PrometheusRule's rule groups (a Prometheus rules file's ``groups``)."""
    rule = yaml.safe_load(ALERTS.read_text(encoding="utf-8"))
    assert rule["kind"] == "PrometheusRule"
    found: list[dict[str, Any]] = rule["spec"]["groups"]
    if not annotations:
        for group in found:
            for each in group["rules"]:
                each.pop("annotations", None)
    return found


def run(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [promtool(), *args], cwd=cwd, capture_output=True, text=True, timeout=120, check=False
    )


def test_every_alert_has_a_case_where_it_fires_and_one_where_it_stays_quiet() -> None:
    alerts = {rule["alert"] for group in groups(annotations=True) for rule in group["rules"]}
    cases = yaml.safe_load(CASES.read_text(encoding="utf-8"))["tests"]
    fires: set[str] = set()
    quiet: set[str] = set()
    for case in cases:
        for check in case["alert_rule_test"]:
            (fires if check["exp_alerts"] else quiet).add(check["alertname"])
    assert len(alerts) == 10
    assert sorted(alerts - fires) == []
    assert sorted(alerts - quiet) == []
    assert sorted((fires | quiet) - alerts) == []


def test_each_alert_fires_on_its_condition_and_stays_quiet_otherwise(tmp_path: Path) -> None:
    rules = tmp_path / "rules.yaml"
    # The annotations are left out here: promtool compares them too, and they render
    # $value; the conditions are what these cases pin down (the templates are checked below).
    rules.write_text(yaml.safe_dump({"groups": groups(annotations=False)}))
    shutil.copy(CASES, tmp_path / "tests.yaml")
    done = run("test", "rules", "tests.yaml", cwd=tmp_path)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "SUCCESS" in done.stdout


def test_the_rules_and_their_templates_pass_promtool_check(tmp_path: Path) -> None:
    rules = tmp_path / "rules.yaml"
    rules.write_text(yaml.safe_dump({"groups": groups(annotations=True)}))
    done = run("check", "rules", str(rules), cwd=tmp_path)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "SUCCESS: 10 rules found" in done.stdout


def test_the_compose_prometheus_config_passes_promtool_check(tmp_path: Path) -> None:
    done = run("check", "config", str(COMPOSE_PROMETHEUS), cwd=tmp_path)
    assert done.returncode == 0, done.stdout + done.stderr
