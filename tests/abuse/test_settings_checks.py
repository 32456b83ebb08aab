"""Settings that contradict each other are refused at start-up, naming them (issue #10).

``REPROMPT_HEARTBEAT_MS`` at or above ``REPROMPT_LEASE_MS`` was accepted: every running
job's lease then expired between heartbeats and another worker ran it again. A heartbeat
must now be at most a third of the lease (two may be missed), and an explicit
``REPROMPT_DEFAULT_DEADLINE_MS`` may not exceed ``REPROMPT_MAX_DEADLINE_MS``.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from pydantic import ValidationError

from app.settings import Settings, invalid_settings

ROOT = Path(__file__).resolve().parents[2]


def _refused(**values: Any) -> str:
    with pytest.raises(ValidationError) as refused:
        Settings(**values)
    return invalid_settings(refused.value)


@pytest.mark.parametrize("heartbeat_ms", [30_000, 40_000, 10_001])
def test_a_heartbeat_longer_than_a_third_of_the_lease_is_refused(heartbeat_ms: int) -> None:
    said = _refused(lease_ms=30_000, heartbeat_ms=heartbeat_ms)
    assert "REPROMPT_HEARTBEAT_MS" in said
    assert "REPROMPT_LEASE_MS" in said
    assert "a third" in said


def test_a_heartbeat_of_a_third_of_the_lease_is_fine() -> None:
    assert Settings(lease_ms=30_000, heartbeat_ms=10_000).heartbeat_ms == 10_000
    assert Settings(lease_ms=1500, heartbeat_ms=300).lease_ms == 1500


def test_an_explicit_default_deadline_over_the_cap_is_refused() -> None:
    said = _refused(default_deadline_ms=120_000, max_deadline_ms=60_000)
    assert "REPROMPT_DEFAULT_DEADLINE_MS" in said
    assert "REPROMPT_MAX_DEADLINE_MS" in said


def test_every_problem_is_reported_at_once_without_pydantic_boilerplate() -> None:
    said = _refused(
        lease_ms=1000, heartbeat_ms=1000, default_deadline_ms=120_000, max_deadline_ms=60_000
    )
    assert "REPROMPT_HEARTBEAT_MS" in said
    assert "REPROMPT_DEFAULT_DEADLINE_MS" in said
    assert "Value error" not in said


@pytest.mark.parametrize("command", ["worker", "api"])
def test_the_commands_exit_2_naming_the_settings(command: str, tmp_path: Path) -> None:
    env = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith(("REPROMPT_", "OPENAI_", "ANTHROPIC_", "REDIS_"))
    }
    env |= {
        "REPROMPT_REDIS_URL": "redis://127.0.0.1:1/0",
        "REPROMPT_DATA_DIR": str(tmp_path),
        "REPROMPT_LEASE_MS": "30000",
        "REPROMPT_HEARTBEAT_MS": "30000",
        # Configured, never called: were the settings accepted, no local model would start.
        "OPENAI_BASE_URL": "http://127.0.0.1:9/v1",
    }
    proc = subprocess.run(
        [sys.executable, "-m", "app.cli", command],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert proc.returncode == 2, proc.stderr
    assert "invalid configuration" in proc.stderr
    assert "REPROMPT_HEARTBEAT_MS (30000) must be at most a third of REPROMPT_LEASE_MS" in (
        proc.stderr
    )
