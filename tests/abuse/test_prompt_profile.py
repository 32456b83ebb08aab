"""The providers file's ``prompt`` (a model's prompt profile) takes "full" or "compact" and
nothing else: a wrong type, an unknown name or a huge value is refused at start-up, naming
the field, without echoing the value back."""

from __future__ import annotations

from pathlib import Path

import pytest

from app.core.wire.errors import InvalidInput
from app.providers.config import load_providers

HEAD = 'providers:\n  p:\n    kind: openai\n    base_url: "http://127.0.0.1:9/v1"\nmodels:\n  m:\n'


@pytest.mark.parametrize(
    "value",
    [
        "COMPACT",
        "'compact '",
        "",
        "[compact]",
        "{full: true}",
        "1",
        "null",
        "x" * 100_000,
        "'{{#schema}}{{{schema}}}{{/schema}}'",
    ],
)
def test_a_bad_prompt_profile_is_refused_naming_the_field(value: str, tmp_path: Path) -> None:
    path = tmp_path / "providers.yaml"
    path.write_text(f"{HEAD}    provider: p\n    prompt: {value}\n")
    with pytest.raises(InvalidInput) as refused:
        load_providers({}, path=str(path))
    assert refused.value.field == "models.m.prompt"
    assert "models.m.prompt" in refused.value.detail
    assert len(refused.value.detail) < 500
    assert "xxxxxxxxxx" not in refused.value.detail
