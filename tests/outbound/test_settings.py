"""The outbound block of the settings: defaults, the allowlist, and named errors."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from pydantic import ValidationError

from app.outbound.guard import Allowlist, OutboundPolicy
from app.settings import Settings, invalid_settings


def _refused(**values: Any) -> str:
    with pytest.raises(ValidationError) as refused:
        Settings(**values)
    return invalid_settings(refused.value)


def test_the_defaults_allow_nothing_inside_and_match_the_policys() -> None:
    settings = Settings()
    policy = OutboundPolicy()
    assert settings.outbound_allow == []
    assert settings.outbound_timeout_ms == policy.timeout_s * 1000 == 10_000
    assert settings.outbound_max_response_bytes == policy.max_response_bytes == 1 << 20
    assert settings.outbound_max_request_bytes == policy.max_request_bytes
    assert settings.outbound_retries == policy.retries == 2
    assert settings.webhook_signing_key is None
    assert settings.tool_secrets_file is None


def test_the_allowlist_is_read_from_a_comma_separated_variable(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("REPROMPT_OUTBOUND_ALLOW", "127.0.0.1/32, hooks.internal ,fd00::/8,")
    settings = Settings()
    assert settings.outbound_allow == ["127.0.0.1/32", "hooks.internal", "fd00::/8"]
    allow = Allowlist.parse(settings.outbound_allow)
    assert allow.hosts == frozenset({"hooks.internal"})
    assert len(allow.networks) == 2


@pytest.mark.parametrize("entry", ["10.0.0.0/33", "10.0.0.999", "not a host", "*.example.com"])
def test_a_bad_allowlist_entry_is_refused_naming_it(
    entry: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("REPROMPT_OUTBOUND_ALLOW", f"10.0.0.0/8,{entry}")
    said = _refused()
    assert "REPROMPT_OUTBOUND_ALLOW" in said
    assert repr(entry) in said
    # What the settings accept, the guard accepts too.
    with pytest.raises(ValueError, match="REPROMPT_OUTBOUND_ALLOW"):
        Allowlist.parse([entry])


def test_a_short_signing_key_is_refused_without_showing_it(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("REPROMPT_WEBHOOK_SIGNING_KEY", "short-key")
    said = _refused()
    assert "webhook_signing_key" in said
    assert "16 bytes" in said
    assert "short-key" not in said


def test_a_missing_secrets_file_is_refused(tmp_path: Path) -> None:
    said = _refused(tool_secrets_file=tmp_path / "nope.toml")
    assert "tool_secrets_file" in said
    assert "is not a file" in said
    (tmp_path / "s.toml").write_text("", encoding="utf-8")
    assert Settings(tool_secrets_file=tmp_path / "s.toml").tool_secrets_file == tmp_path / "s.toml"


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("outbound_timeout_ms", 50),
        ("outbound_timeout_ms", 300_001),
        ("outbound_retries", 11),
        ("outbound_max_response_bytes", 10),
    ],
)
def test_out_of_range_limits_are_refused(field: str, value: int) -> None:
    assert field in _refused(**{field: value})
