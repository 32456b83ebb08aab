from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from reprompt_sim.server import SimConfig, serve_in_background

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def sim_url() -> Iterator[str]:
    with serve_in_background(SimConfig(seed=3)) as url:
        yield url


def reprompt_cli(
    *args: str, env: dict[str, str] | None = None, timeout: float = 300
) -> subprocess.CompletedProcess[str]:
    """Run the installed ``reprompt`` entry point as a user would."""
    base = {k: v for k, v in os.environ.items() if not k.endswith("_API_KEY")}
    base.pop("REPROMPT_PROVIDERS", None)
    return subprocess.run(
        [sys.executable, "-m", "app.cli", *args],
        cwd=ROOT,
        env={**base, **(env or {})},
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )


def output(proc: subprocess.CompletedProcess[str]) -> dict[str, Any]:
    assert proc.stdout, proc.stderr
    return dict(json.loads(proc.stdout))
