"""An API process without a worker calls no model, so it does not read the providers'
keys: a deployment mounts the key files (or sets the key variables) in the workers only.
A process that runs a worker still refuses to start without them."""

from __future__ import annotations

from pathlib import Path

import pytest

from app.assembly import api_app, providers_config
from app.core.wire.errors import InvalidInput
from tests.service import KEYS, api_keys, client, serve, settings_for

PROVIDERS = """
[providers.paid]
kind = "openai"
base_url = "https://api.example.invalid/v1"
api_key_file = "{key_file}"

[providers.other]
kind = "anthropic"
base_url = "https://anthropic.example.invalid"
api_key_env = "REPROMPT_TEST_UNSET_KEY"

[models.paid-model]
provider = "paid"

[models.other-model]
provider = "other"
"""


@pytest.fixture
def providers_file(tmp_path: Path) -> Path:
    path = tmp_path / "providers.toml"
    path.write_text(PROVIDERS.format(key_file=tmp_path / "not-mounted.key"), encoding="utf-8")
    return path


def test_an_api_alone_starts_and_serves_without_the_provider_keys(
    redis_url: str, data_dir: Path, providers_file: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("REPROMPT_TEST_UNSET_KEY", raising=False)
    settings = settings_for(
        redis_url,
        data_dir,
        api_keys=api_keys(),
        REPROMPT_PROVIDERS=providers_file,
        key_prefix="nokeys",
    )
    with serve(api_app(settings, embedded_worker=False)) as url, client(url, KEYS["alice"]) as http:
        models = http.get("/v1/models")
        assert models.status_code == 200, models.text
        names = {m["name"] for m in models.json()["models"]}
        assert {"paid-model", "other-model"} <= names
        assert "not-mounted" not in models.text
        job = {"task": "Name a city.", "signature": "{city :string}", "model": "paid-model"}
        accepted = http.post("/v1/jobs", json=job)
        assert accepted.status_code == 202, accepted.text  # queued for a worker that has them


def test_a_process_that_calls_models_still_needs_the_keys(
    redis_url: str, data_dir: Path, providers_file: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("REPROMPT_TEST_UNSET_KEY", raising=False)
    settings = settings_for(redis_url, data_dir, REPROMPT_PROVIDERS=providers_file)
    with pytest.raises(InvalidInput) as refused:
        providers_config(settings)
    assert refused.value.field == "providers.paid.api_key_file"
    config = providers_config(settings, keys=False)
    assert all(p.api_key is None for p in config.providers.values())
