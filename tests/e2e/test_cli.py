"""The ``reprompt`` command, run as a user runs it."""

from __future__ import annotations

import json
from pathlib import Path

from tests.e2e.conftest import output, reprompt_cli


def test_demo_starts_the_service_and_runs_the_example_on_the_simulator(tmp_path: Path) -> None:
    proc = reprompt_cli("demo", "--sim", env={"REPROMPT_DATA_DIR": str(tmp_path)}, timeout=180)
    assert proc.returncode == 0, proc.stderr
    envelope = output(proc)
    assert envelope["status"] == "success"
    assert envelope["data"]["vendor"] == "ACME Tools"
    assert "submitted job_" in proc.stderr
    assert "[Attempt 1]" in proc.stderr


def test_run_with_a_providers_file_prints_envelope_turns_and_transcript(
    sim_url: str, tmp_path: Path
) -> None:
    providers = tmp_path / "providers.toml"
    providers.write_text(
        f'[providers.sim]\nkind = "openai"\nbase_url = "{sim_url}/v1"\n\n'
        '[models.sim-model]\nprovider = "sim"\nstructured = "prompt"\n'
        "input_usd_per_mtok = 0.5\noutput_usd_per_mtok = 1.5\n"
    )
    directive = json.dumps({"script": ["missing_field", "ok"], "counter": "requests"})
    job = tmp_path / "job.json"
    job.write_text(
        json.dumps(
            {
                "task": f"Name a colour and its hex code [[sim {directive}]]",
                "signature": "{name :string, hex :string}",
                "budget": {"maxTurns": 1, "returnRetries": 1},
                "purify": True,
            }
        )
    )
    proc = reprompt_cli("run", str(job), "--full", env={"REPROMPT_PROVIDERS": str(providers)})
    assert proc.returncode == 0, proc.stderr
    out = output(proc)
    assert out["result"]["status"] == "success"
    assert out["result"]["execution"]["retryCount"] == 1
    assert out["result"]["execution"]["cost"] > 0
    assert out["result"]["provenance"].startswith("resolved after 1 retry: ")
    assert [t["type"] for t in out["turns"]] == ["must_return", "retry"]
    assert [m["role"] for m in out["transcript"]] == ["system", "user", "assistant"]
    assert "retrying with feedback" in proc.stderr


def test_run_reports_invalid_job_fields(tmp_path: Path) -> None:
    job = tmp_path / "job.json"
    job.write_text(json.dumps({"task": "", "signature": "{x :int}", "budget": {"maxTurns": 0}}))
    proc = reprompt_cli("run", str(job))
    assert proc.returncode == 2
    assert "task" in proc.stderr
    assert "budget.maxTurns" in proc.stderr


def test_run_reports_a_bad_signature_with_its_position(sim_url: str, tmp_path: Path) -> None:
    job = tmp_path / "job.json"
    job.write_text(json.dumps({"task": "t", "signature": "{x :strng}"}))
    proc = reprompt_cli("run", str(job), env={"OPENAI_BASE_URL": f"{sim_url}/v1"})
    assert proc.returncode == 1
    result = output(proc)["result"]
    assert result["error"] == "invalid-input"
    assert "position 3 (line 1, col 4)" in result["detail"]
    assert ":string" in result["detail"]
