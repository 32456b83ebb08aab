"""Tenant secrets for headers: submit-time checks, call-time rendering, no value leaks."""

from __future__ import annotations

import logging
import os
from pathlib import Path

import pytest

from app.outbound.secrets import MAX_HEADERS, ToolSecrets, UnknownSecret, parse

TOKEN = "crm-token-7Yh2kLq9Zx"
OTHER = "b0b-s3cret-Wm4nP8"
FILE = f"""
[tenants.acme]
CRM_TOKEN = "{TOKEN}"
REGION = "eu"

[tenants.bob]
CRM_TOKEN = "{OTHER}"
"""


@pytest.fixture
def secrets_file(tmp_path: Path) -> Path:
    path = tmp_path / "tool-secrets.toml"
    path.write_text(FILE, encoding="utf-8")
    path.chmod(0o600)
    return path


@pytest.fixture
def secrets(secrets_file: Path) -> ToolSecrets:
    return ToolSecrets.load(secrets_file)


def test_headers_render_with_the_tenants_own_secrets(secrets: ToolSecrets) -> None:
    headers = {"Authorization": "Bearer {{secret:CRM_TOKEN}}", "X-Region": "{{secret:REGION}}"}
    assert secrets.check_headers(headers, "acme") is None
    rendered = secrets.render_headers(headers, "acme")
    assert rendered.headers == {"Authorization": f"Bearer {TOKEN}", "X-Region": "eu"}
    assert set(rendered.secrets) == {TOKEN, "eu"}
    assert secrets.render_headers(headers | {"X-Region": "plain"}, "bob").headers == {
        "Authorization": f"Bearer {OTHER}",
        "X-Region": "plain",
    }


def test_another_tenants_secret_is_an_unknown_secret(secrets: ToolSecrets) -> None:
    headers = {"X-Region": "{{secret:REGION}}"}
    problem = secrets.check_headers(headers, "bob")
    assert problem is not None
    assert "unknown secret 'REGION'" in problem
    assert "X-Region" in problem
    with pytest.raises(UnknownSecret, match="REGION"):
        secrets.render_headers(headers, "bob")
    assert secrets.check_headers(headers, "nobody") is not None


@pytest.mark.parametrize(
    ("headers", "why"),
    [
        ({f"X-H{i}": "v" for i in range(MAX_HEADERS + 1)}, "at most 16 headers"),
        ({"Host": "internal.example"}, "set by the service"),
        ({"content-length": "5"}, "set by the service"),
        ({"Transfer-Encoding": "chunked"}, "set by the service"),
        ({"Connection": "close"}, "set by the service"),
        ({"Proxy-Authorization": "x"}, "set by the service"),
        ({"Content-Type": "text/plain"}, "set by the service"),
        ({"webhook-signature": "v1,forged"}, "set by the service"),
        ({"Webhook-Id": "msg_1"}, "set by the service"),
        ({"X-A": "line\r\nInjected: yes"}, "line break"),
        ({"X-A": "nul\x00"}, "control character"),
        ({"Bad Name": "v"}, "not a valid HTTP header name"),
        ({"X-Ünicode": "v"}, "not a valid HTTP header name"),
        ({"": "v"}, "not a valid HTTP header name"),
        ({"X-A": "v" * 1025}, "1024 characters"),
        ({"x-a": "1", "X-A": "2"}, "given twice"),
        ({"X-A": "{{secret:NOPE}}"}, "unknown secret 'NOPE'"),
        ({"X-A": "{{ secret:CRM_TOKEN }}"}, "double braces"),
        ({"X-A": "{{env:HOME}}"}, "double braces"),
    ],
)
def test_unsafe_headers_are_refused_at_submit_with_the_reason(
    secrets: ToolSecrets, headers: dict[str, str], why: str
) -> None:
    problem = secrets.check_headers(headers, "acme")
    assert problem is not None
    assert why in problem


def test_no_headers_and_no_file_are_fine() -> None:
    none = ToolSecrets.none()
    assert none.check_headers(None, "acme") is None
    assert none.check_headers({"X-Plain": "v"}, "acme") is None
    assert none.render_headers(None, "acme").headers == {}
    assert "unknown secret" in (none.check_headers({"A": "{{secret:X}}"}, "acme") or "")


def test_secret_values_never_show_in_reprs_or_problems(
    secrets: ToolSecrets, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG)
    rendered = secrets.render_headers({"Authorization": "Bearer {{secret:CRM_TOKEN}}"}, "acme")
    texts = [
        repr(secrets),
        repr(rendered),
        str(rendered),
        secrets.check_headers({"Authorization": "{{secret:CRM_TOKN}}"}, "acme") or "",
        caplog.text,
    ]
    assert all(TOKEN not in text for text in texts)
    assert "Authorization" in repr(rendered)


def test_the_file_is_read_again_when_it_changes(secrets_file: Path) -> None:
    secrets = ToolSecrets.load(secrets_file)
    rotated = FILE.replace(TOKEN, "rotated-token-XY12")
    secrets_file.write_text(rotated + '\n[tenants.carol]\nKEY = "k"\n', encoding="utf-8")
    os.utime(secrets_file, ns=(1, 1))  # a new mtime, whatever the clock's resolution
    rendered = secrets.render_headers({"A": "{{secret:CRM_TOKEN}}"}, "acme")
    assert rendered.headers == {"A": "rotated-token-XY12"}
    assert secrets.names("carol") == frozenset({"KEY"})


def test_a_bad_edit_keeps_the_previous_secrets(
    secrets_file: Path, caplog: pytest.LogCaptureFixture
) -> None:
    secrets = ToolSecrets.load(secrets_file)
    secrets_file.write_text(f'[tenants.acme]\nCRM_TOKEN = "{TOKEN}', encoding="utf-8")
    os.utime(secrets_file, ns=(2, 2))
    assert secrets.names("acme") == frozenset({"CRM_TOKEN", "REGION"})
    assert "keeping the previous tool secrets" in caplog.text
    assert TOKEN not in caplog.text


@pytest.mark.parametrize(
    ("text", "why"),
    [
        ("tenants = 1", "must be a table"),
        ("[other]\nx = 1", "unknown top-level keys"),
        ("[tenants]\nacme = 1", "[tenants.acme] must be a table"),
        ('[tenants.acme]\n1BAD = "v"', "a secret name is"),
        ("[tenants.acme]\nK = 3", "non-empty string"),
        ('[tenants.acme]\nK = ""', "non-empty string"),
        ('[tenants.acme]\nK = "a\\nb"', "line break"),
        ('[tenants.acme\nK = "v"', "not valid TOML"),
    ],
)
def test_a_bad_file_is_an_error_naming_the_problem_not_the_value(text: str, why: str) -> None:
    with pytest.raises(ValueError, match="tool secrets file") as info:
        parse(text.encode())
    assert why in str(info.value)


def test_a_file_readable_by_others_is_loaded_with_a_warning(
    secrets_file: Path, caplog: pytest.LogCaptureFixture
) -> None:
    secrets_file.chmod(0o644)
    assert ToolSecrets.load(secrets_file).names("acme") == frozenset({"CRM_TOKEN", "REGION"})
    assert "chmod 600" in caplog.text


BOUND = f"""
[tenants.acme]
CRM_TOKEN = {{ value = "{TOKEN}", hosts = ["crm.example.com", "*.eu.example.com"] }}
"""


@pytest.mark.parametrize(
    ("host", "allowed"),
    [
        ("crm.example.com", True),
        ("CRM.Example.com.", True),
        ("api.eu.example.com", True),
        ("eu.example.com", False),  # *.domain is its subdomains only
        ("crm.example.com.evil.net", False),
        ("evilcrm.example.com", False),
        ("attacker.example.net", False),
    ],
)
def test_a_bound_secret_goes_only_to_its_hosts(host: str, allowed: bool) -> None:
    secrets = ToolSecrets(None, parse(BOUND.encode()))
    headers = {"Authorization": "Bearer {{secret:CRM_TOKEN}}"}
    problem = secrets.check_headers(headers, "acme", host=host)
    assert (problem is None) is allowed, problem
    if allowed:
        assert secrets.render_headers(headers, "acme", host=host).secrets == (TOKEN,)
    else:
        assert problem is not None
        assert "'CRM_TOKEN' is not for" in problem
        assert TOKEN not in problem
        with pytest.raises(UnknownSecret, match="is not for"):
            secrets.render_headers(headers, "acme", host=host)


@pytest.mark.parametrize(
    ("entry", "why"),
    [
        ('{ value = "v", hosts = [] }', "hosts must be a list"),
        ('{ value = "v" }', "hosts must be a list"),
        ('{ value = "v", hosts = ["a b"] }', "not a host name"),
        ('{ value = "v", hosts = ["x.com"], extra = 1 }', "unknown keys"),
        ('{ hosts = ["x.com"] }', "non-empty string"),
        ('"caf\\u00e9"', "non-ASCII"),
    ],
)
def test_bad_bound_secrets_are_refused_with_the_reason(entry: str, why: str) -> None:
    with pytest.raises(ValueError, match=why):
        parse(f"[tenants.acme]\nX = {entry}\n".encode())


def test_unbound_secrets_are_warned_about(caplog: pytest.LogCaptureFixture) -> None:
    parse(FILE.encode())
    assert "may be sent to any host" in caplog.text
    assert TOKEN not in caplog.text
