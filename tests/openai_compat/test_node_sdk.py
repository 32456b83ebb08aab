"""The official ``openai`` npm package against ``POST /v1/chat/completions``: a small node
script (tests/openai_compat/node, its own package.json and lock, installed by ``npm ci``)
asks for a structured answer, streams one with usage, and spends a budget.

Each structured answer's first simulated answer is invalid: the SDK gets the validated
object, ``usage`` counts both calls, and the job record shows the re-ask.
"""

from __future__ import annotations

import fcntl
import hashlib
import json
import os
import shutil
import subprocess
import tempfile
from pathlib import Path

import pytest

from tests.openai_compat.test_python_sdk import directive, job_of
from tests.service import KEYS

pytestmark = pytest.mark.slow

NODE = Path(__file__).resolve().parent / "node"
STAMP = ".reprompt-lock.sha256"  # in node_modules: the lock (and node) npm ci installed from


def tool(name: str) -> str:
    path = shutil.which(name)
    if path is None:  # CI and the dev machines have it: a missing one is a failure
        pytest.fail(f"{name} is not on PATH: the node SDK test needs Node 20+ (npm)")
    return path


def npm_ci_if_needed() -> None:
    npm, node = tool("npm"), tool("node")
    version = subprocess.run([node, "--version"], capture_output=True, text=True, check=True)
    lock = (NODE / "package-lock.json").read_bytes()
    want = hashlib.sha256(lock + version.stdout.strip().encode()).hexdigest()
    stamp = NODE / "node_modules" / STAMP
    where = hashlib.sha256(bytes(NODE)).hexdigest()[:12]
    guard = Path(tempfile.gettempdir()) / f"reprompt-npm-ci-{where}.lock"
    with guard.open("w") as held:  # one npm ci at a time
        fcntl.flock(held, fcntl.LOCK_EX)
        if stamp.is_file() and stamp.read_text().strip() == want:
            return
        proc = subprocess.run(
            [npm, "ci", "--no-audit", "--no-fund"],
            cwd=NODE,
            capture_output=True,
            text=True,
            timeout=600,
            check=False,
        )
        assert proc.returncode == 0, proc.stdout + proc.stderr
        stamp.write_text(want + "\n")


def test_the_node_sdk_gets_validated_objects(api: str) -> None:
    npm_ci_if_needed()
    env = {
        **os.environ,
        "REPROMPT_URL": api,
        "REPROMPT_API_KEY": KEYS["alice"],
        "PROMPT_OK": directive(["missing_field", "ok"]),
        "PROMPT_STREAM": directive(["missing_field", "ok"]),
        "PROMPT_FAIL": directive(["missing_field"] * 3),
    }
    proc = subprocess.run(
        [tool("node"), "chat.mjs"],
        cwd=NODE,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr
    out = json.loads(proc.stdout.strip().splitlines()[-1])
    assert out["object"] == "chat.completion"
    assert out["model"] == "sim-model"
    assert out["finish"] == "stop"
    assert set(out["answer"]) == {"city", "population"}
    assert out["attempts"] == "2"
    assert out["id"] == out["jobId"]
    turns = job_of(api, out["id"])["turns"]
    assert [t["outcome"] for t in turns] == ["invalid", "success"]
    assert out["usage"]["prompt_tokens"] == sum(t["usage"]["inputTokens"] for t in turns)
    assert out["usage"]["completion_tokens"] == sum(t["usage"]["outputTokens"] for t in turns)
    assert set(out["streamed"]) == {"city", "population"}
    stream_turns = job_of(api, out["streamId"])["turns"]
    assert [t["outcome"] for t in stream_turns] == ["invalid", "success"]
    assert out["streamUsage"]["total_tokens"] == sum(
        t["usage"]["inputTokens"] + t["usage"]["outputTokens"] for t in stream_turns
    )
    events = out["streamEvents"]
    discarded = events.index("partial_discarded")
    assert "partial" in events[discarded:]  # the passing attempt's partials
    first = events.index("content")
    assert discarded < first
    assert set(events[first:]) == {"content"}
    assert sorted(out["models"]) == [["fast", "reprompt"], ["sim-model", "sim"]]
    failure = out["failure"]
    assert failure["unprocessable"] is True
    assert failure["status"] == 422
    assert failure["code"] == "budget-exhausted"
    assert "missing required field" in failure["message"]
