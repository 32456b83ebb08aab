"""When traces are on (the standard OTEL_* variables), and that the service runs the same
without the OpenTelemetry packages (the ``otel`` extra)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from app.tracing import AVAILABLE, configured, open_tracing

ROOT = Path(__file__).resolve().parents[1]


@pytest.mark.parametrize(
    ("environ", "exporters"),
    [
        ({}, ()),
        ({"OTEL_SERVICE_NAME": "x", "OTEL_RESOURCE_ATTRIBUTES": "a=b"}, ()),
        ({"OTEL_TRACES_EXPORTER": "none"}, ()),
        ({"OTEL_TRACES_EXPORTER": " "}, ()),
        ({"OTEL_TRACES_EXPORTER": "otlp"}, ("otlp",)),
        ({"OTEL_TRACES_EXPORTER": "OTLP, console,otlp"}, ("otlp", "console")),
        ({"OTEL_EXPORTER_OTLP_ENDPOINT": "http://127.0.0.1:4318"}, ("otlp",)),
        ({"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": "http://127.0.0.1:4318/v1/traces"}, ("otlp",)),
        ({"OTEL_TRACES_EXPORTER": "console", "OTEL_SDK_DISABLED": "true"}, ()),
        ({"OTEL_EXPORTER_OTLP_ENDPOINT": "http://x", "OTEL_SDK_DISABLED": "TRUE"}, ()),
        ({"OTEL_TRACES_EXPORTER": "console", "OTEL_SDK_DISABLED": "false"}, ("console",)),
    ],
)
def test_traces_are_on_only_when_an_exporter_or_an_endpoint_is_configured(
    environ: dict[str, str], exporters: tuple[str, ...]
) -> None:
    assert configured(environ) == exporters


def test_no_otel_variables_means_no_tracing_at_all() -> None:
    assert open_tracing({}) is None
    assert open_tracing({"OTEL_TRACES_EXPORTER": "none"}) is None


@pytest.mark.skipif(not AVAILABLE, reason="needs the otel extra")
def test_an_unknown_exporter_or_protocol_is_logged_and_traces_stay_off(
    caplog: pytest.LogCaptureFixture,
) -> None:
    assert open_tracing({"OTEL_TRACES_EXPORTER": "zipkin"}) is None
    assert "'zipkin' is not supported" in caplog.text
    environ = {"OTEL_TRACES_EXPORTER": "otlp", "OTEL_EXPORTER_OTLP_PROTOCOL": "http/json"}
    assert open_tracing(environ) is None
    assert "'http/json' is not supported" in caplog.text


@pytest.mark.parametrize("hidden", ["opentelemetry", "opentelemetry.sdk"])
def test_without_the_otel_packages_the_service_imports_and_tracing_is_off(hidden: str) -> None:
    # A None entry in sys.modules makes every import of that package fail, as if absent.
    # FastAPI itself needs opentelemetry-api: without any of it, the worker's side still runs.
    modules = "app.assembly" if hidden == "opentelemetry.sdk" else "app.worker, app.providers"
    code = (
        "import logging, sys\n"
        f"sys.modules[{hidden!r}] = None\n"
        "logging.basicConfig(level=logging.WARNING, format='%(message)s')\n"
        "import app.tracing as t\n"
        "print(t.AVAILABLE, t.open_tracing({'OTEL_TRACES_EXPORTER': 'otlp'}))\n"
        f"import {modules}\n"
    )
    proc = subprocess.run(
        [sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=60
    )
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == "False None"
    assert "OpenTelemetry is not installed" in proc.stderr
    assert "pip install 'reprompt[otel]'" in proc.stderr
