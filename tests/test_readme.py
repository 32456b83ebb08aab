"""The README's two commands, kept true: named in the README, called by CI, and the demo
run in a fresh clone with a fresh virtualenv."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
from pathlib import Path

import pytest

from app.providers.local import local_available

ROOT = Path(__file__).resolve().parents[1]
README = (ROOT / "README.md").read_text(encoding="utf-8")


def commands() -> list[str]:
    section = README.split("## The two commands", 1)[1].split("\n## ", 1)[0]
    return re.findall(r"```sh\n(.+?)\n```", section)


def test_the_readme_names_a_demo_command_and_a_test_command() -> None:
    assert commands() == ["make demo", "make test"]


def test_ci_runs_the_readme_test_command() -> None:
    ci = (ROOT / ".ci" / "run").read_text(encoding="utf-8")
    assert commands()[1] in ci


@pytest.mark.slow
@pytest.mark.llama
@pytest.mark.timeout(1200)  # a virtualenv installed from the lock, then the local model's demo
@pytest.mark.skipif(shutil.which("git") is None, reason="needs git")
@pytest.mark.skipif(not local_available(), reason="needs the local extra's wheels")
def test_make_demo_in_a_fresh_clone_and_virtualenv(tmp_path: Path) -> None:
    clone = tmp_path / "clone"
    subprocess.run(["git", "clone", "--quiet", str(ROOT), str(clone)], check=True)
    env = {k: v for k, v in os.environ.items() if not k.endswith("_API_KEY")}
    env.pop("REPROMPT_PROVIDERS", None)
    for name in ("VIRTUAL_ENV", "MAKELEVEL", "MAKEFLAGS", "MFLAGS"):  # as if typed at a shell
        env.pop(name, None)
    env["REPROMPT_DATA_DIR"] = str(tmp_path / "data")
    proc = subprocess.run(
        ["make", "demo"],
        cwd=clone,
        env=env,
        capture_output=True,
        text=True,
        timeout=1200,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert (clone / ".venv" / "bin" / "reprompt").exists()
    lines = proc.stdout.splitlines()
    start = max(i for i, line in enumerate(lines) if line == "{")  # the printed envelope
    end = lines.index("}", start)
    envelope = json.loads("\n".join(lines[start : end + 1]))
    assert envelope["status"] == "success"
    assert envelope["data"]["email"] == "dana.reyes@acme.example"
    assert "[Attempt 1]" in proc.stderr
