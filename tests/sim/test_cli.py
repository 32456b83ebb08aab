"""``python -m reprompt_sim``: flags, validation and a real start-up."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys

import httpx
import pytest

from reprompt_sim.__main__ import main
from reprompt_sim.config import SimConfig, parse_rates
from tests.waiting import sync_until

FLAGS = (
    "--host", "--port", "--seed", "--fail", "--fix", "--blind-fix", "--rate-limit",
    "--retry-after", "--server-error", "--latency-ms", "--jitter-ms", "--slow", "--slow-ms",
    "--verbose-tokens", "--log-level",
)  # fmt: skip


def test_help_documents_every_flag(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exit_:
        main(["--help"])

    assert exit_.value.code == 0
    out = capsys.readouterr().out
    for flag in FLAGS:
        assert flag in out
    assert "broken_json" in out


@pytest.mark.parametrize(
    "argv",
    [
        ["--fail", "broken_json=0.7,prose=0.5"],
        ["--fail", "rate_limit=0.1"],
        ["--fail", "broken_json"],
        ["--fix", "1.5"],
    ],
)
def test_bad_flags_exit_with_usage_error(
    argv: list[str], capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as exit_:
        main(argv)

    assert exit_.value.code == 2
    assert "error" in capsys.readouterr().err


def test_rates_parse_and_validate() -> None:
    assert parse_rates("broken_json=0.2, wrong_type=0.1") == {"broken_json": 0.2, "wrong_type": 0.1}
    with pytest.raises(ValueError, match="transport fault"):
        SimConfig(failure_rates={"server_error": 0.1})
    with pytest.raises(ValueError, match="latency_ms"):
        SimConfig(latency_ms=-1)


def test_module_serves_until_interrupted() -> None:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    argv = [sys.executable, "-m", "reprompt_sim", "--port", str(port), "--seed", "3", "--log-level",
            "warning", "--fail", "prose=1"]  # fmt: skip
    proc = subprocess.Popen(argv, stderr=subprocess.PIPE, text=True, env={**os.environ})
    try:

        def answered() -> httpx.Response | None:
            try:
                return httpx.get(f"http://127.0.0.1:{port}/healthz")
            except httpx.TransportError:
                assert proc.poll() is None
                return None

        health = sync_until(answered, what="the simulator to answer")
        assert health.json() == {"status": "ok", "seed": 3}
    finally:
        proc.send_signal(signal.SIGINT)
        _, err = proc.communicate(timeout=10)

    assert proc.returncode == 0
    assert f"http://127.0.0.1:{port}" in err
    assert "prose=1" in err
