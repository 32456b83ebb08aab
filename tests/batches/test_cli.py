"""``reprompt batch submit FILE.jsonl`` (a progress bar) and ``reprompt batch results ID``
against the running API."""

from __future__ import annotations

import json
import subprocess
import sys
import uuid
from pathlib import Path

from tests.service import KEYS

ROOT = Path(__file__).resolve().parents[2]


def _cli(*args: str, url: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "app.cli", "batch", *args, "--url", url, "--key", KEYS["alice"]],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )


def test_the_cli_submits_a_jsonl_file_follows_it_and_writes_the_results(
    batch_api: str, tmp_path: Path
) -> None:
    tag = uuid.uuid4().hex[:8]
    template = {
        "task": f"Name the city the input is about and its population ({tag}).",
        "signature": "{city :string, population :int}",
        "model": "an",
    }
    (tmp_path / "template.json").write_text(json.dumps(template))
    items = tmp_path / "items.jsonl"
    items.write_text(
        "\n".join(json.dumps({"customId": f"row-{i}", "input": {"row": i}}) for i in range(30))
    )
    submitted = _cli(
        "submit", str(items), "--template", str(tmp_path / "template.json"), url=batch_api
    )
    assert submitted.returncode == 0, submitted.stderr
    assert "30/30" in submitted.stderr  # the progress bar's last state
    batch = json.loads(submitted.stdout)
    assert batch["status"] == "completed"

    results = _cli("results", batch["id"], url=batch_api)
    assert results.returncode == 0, results.stderr
    lines = [json.loads(line) for line in results.stdout.splitlines()]
    assert [line["customId"] for line in lines] == [f"row-{i}" for i in range(30)]
    assert all(line["status"] in ("succeeded", "failed") for line in lines)


def test_the_cli_refuses_a_file_without_a_template(batch_api: str, tmp_path: Path) -> None:
    items = tmp_path / "items.jsonl"
    items.write_text(json.dumps({"customId": "a", "input": 1}))
    refused = _cli("submit", str(items), url=batch_api)
    assert refused.returncode == 2
    assert "--template" in refused.stderr
