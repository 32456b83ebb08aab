"""Standard Webhooks signatures: the published vector, the reference library, rotation,
and the operator key kept in the data directory."""

from __future__ import annotations

import base64
import json
import re
import stat
import time
from datetime import UTC, datetime
from pathlib import Path

import pytest
import standardwebhooks

from app.outbound.webhooks import (
    KEY_FILE,
    InvalidSignature,
    Signer,
    load_signing_key,
    parse_tenant_secrets,
    secret_key,
    sign,
    tenant_secret,
    verify,
)

# The Standard Webhooks specification's test vector.
VECTOR_SECRET = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"
VECTOR_ID = "msg_p5jXN8AQM9LWM0D4loKWxJek"
VECTOR_TS = 1614265330
VECTOR_BODY = b'{"test": 2432232314}'
VECTOR_SIGNATURE = "v1,g0hM9SsE+OTPJTGt/tmIKtSyZlE3uFJELVlNIOLJ1OE="

KEY = b"operator-key-0123456789abcdef"
BODY = json.dumps({"jobId": "j1", "arguments": {"sku": "A-1", "note": "naïve"}}).encode()


def test_signatures_match_the_specifications_test_vector() -> None:
    headers = sign(VECTOR_SECRET, VECTOR_ID, VECTOR_TS, VECTOR_BODY)
    assert headers == {
        "webhook-id": VECTOR_ID,
        "webhook-timestamp": str(VECTOR_TS),
        "webhook-signature": VECTOR_SIGNATURE,
    }
    verify(VECTOR_SECRET, headers, VECTOR_BODY, now=VECTOR_TS + 10)


def test_the_reference_library_verifies_our_signatures() -> None:
    secret = Signer(KEY).secret_for("acme")
    headers = Signer(KEY).headers("acme", "msg_1", BODY)
    assert standardwebhooks.Webhook(secret).verify(BODY, headers) == json.loads(BODY)
    with pytest.raises(standardwebhooks.webhooks.WebhookVerificationError):
        standardwebhooks.Webhook(Signer(KEY).secret_for("other")).verify(BODY, headers)


def test_we_verify_the_reference_librarys_signatures() -> None:
    secret = tenant_secret(KEY, "acme")
    now = datetime.now(UTC)
    theirs = standardwebhooks.Webhook(secret).sign("msg_2", now, BODY.decode())
    headers = {
        "Webhook-Id": "msg_2",
        "Webhook-Timestamp": str(int(now.timestamp())),
        "Webhook-Signature": theirs,
    }
    verify(secret, headers, BODY)


@pytest.mark.parametrize(
    ("change", "why"),
    [
        ({"body": BODY + b" "}, "no signature matches"),
        ({"secret": tenant_secret(KEY, "other")}, "no signature matches"),
        ({"now": 1_000_000 + 301}, "too old"),
        ({"now": 1_000_000 - 301}, "in the future"),
        ({"drop": "webhook-id"}, "missing"),
        ({"drop": "webhook-signature"}, "missing"),
        ({"set": ("webhook-timestamp", "1e6")}, "whole number"),
        ({"set": ("webhook-id", "msg_other")}, "no signature matches"),
        ({"set": ("webhook-signature", "v2,AAAA")}, "no signature matches"),
    ],
)
def test_verification_fails_for_a_changed_message_a_wrong_secret_or_a_stale_time(
    change: dict[str, object], why: str
) -> None:
    secret = tenant_secret(KEY, "acme")
    headers = sign(secret, "msg_1", 1_000_000, BODY)
    if isinstance(drop := change.get("drop"), str):
        del headers[drop]
    if isinstance(pair := change.get("set"), tuple):
        headers[pair[0]] = pair[1]
    body = change.get("body", BODY)
    assert isinstance(body, bytes)
    with pytest.raises(InvalidSignature, match=why):
        verify(
            str(change.get("secret", secret)),
            headers,
            body,
            now=float(change.get("now", 1_000_000 + 5)),  # type: ignore[arg-type]
        )


def test_any_one_of_several_signatures_may_match() -> None:
    secret = tenant_secret(KEY, "acme")
    good = sign(secret, "msg_1", 1_000_000, BODY)["webhook-signature"]
    headers = {
        "webhook-id": "msg_1",
        "webhook-timestamp": "1000000",
        "webhook-signature": f"v1,bm90IGl0 v2,whatever {good}",
    }
    verify(secret, headers, BODY, now=1_000_000)
    verify(["whsec_" + "QUFBQUFBQUFBQUFBQUFBQQ==", secret], headers, BODY, now=1_000_000)


def test_tenant_secrets_are_derived_per_tenant_and_per_key() -> None:
    acme = Signer(KEY).secret_for("acme")
    assert acme == Signer(KEY).secret_for("acme")  # every process with the key agrees
    assert acme.startswith("whsec_")
    assert len(secret_key(acme)) == 32
    assert acme != Signer(KEY).secret_for("acme2")
    assert acme != Signer(KEY + b"!").secret_for("acme")
    assert KEY.decode() not in repr(Signer(KEY))


def test_during_a_rotation_each_message_verifies_with_the_old_or_the_new_secret() -> None:
    old_key, new_key = b"old-operator-key-0123456789", b"new-operator-key-0123456789"
    signer = Signer(new_key, previous=old_key, clock=lambda: 1_000_000.0)
    headers = signer.headers("acme", "msg_9", BODY)
    assert len(headers["webhook-signature"].split(" ")) == 2
    verify(Signer(old_key).secret_for("acme"), headers, BODY, now=1_000_000)
    verify(Signer(new_key).secret_for("acme"), headers, BODY, now=1_000_000)
    assert signer.secrets_for("acme") == (
        Signer(new_key).secret_for("acme"),
        Signer(old_key).secret_for("acme"),
    )


def test_secrets_without_prefix_or_padding_are_read_and_garbage_is_not() -> None:
    assert secret_key("MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw") == secret_key(VECTOR_SECRET)
    unpadded = tenant_secret(KEY, "acme").rstrip("=")
    assert secret_key(unpadded) == secret_key(tenant_secret(KEY, "acme"))
    for bad in ("whsec_", "whsec_not base64!"):
        with pytest.raises(ValueError, match="whsec_ followed by base64"):
            secret_key(bad)


def test_the_configured_operator_key_is_used_as_given(tmp_path: Path) -> None:
    assert load_signing_key("a-configured-key-of-some-length", tmp_path) == (
        b"a-configured-key-of-some-length"
    )
    assert not (tmp_path / KEY_FILE).exists()


def test_without_a_configured_key_one_is_made_once_0600_and_kept(tmp_path: Path) -> None:
    data_dir = tmp_path / "data"
    first = load_signing_key(None, data_dir)
    path = data_dir / KEY_FILE
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert len(first) == 32
    assert load_signing_key(None, data_dir) == first  # a restart signs alike
    assert [p.name for p in data_dir.iterdir()] == [KEY_FILE]  # no temporary file left


def test_a_key_file_readable_by_others_is_tightened(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    key = load_signing_key(None, tmp_path)
    (tmp_path / KEY_FILE).chmod(0o644)
    assert load_signing_key(None, tmp_path) == key
    assert stat.S_IMODE((tmp_path / KEY_FILE).stat().st_mode) == 0o600
    assert "readable by others" in caplog.text


def test_a_damaged_key_file_is_an_error_saying_what_to_do(tmp_path: Path) -> None:
    path = tmp_path / KEY_FILE
    path.write_text("not base64 at all!\n", encoding="ascii")
    path.chmod(0o600)
    with pytest.raises(ValueError, match="remove it to make a new one"):
        load_signing_key(None, tmp_path)


def test_the_signer_signs_with_the_current_time() -> None:
    before = int(time.time())
    headers = Signer(KEY).headers("acme", "msg_1", BODY)
    assert before <= int(headers["webhook-timestamp"]) <= int(time.time())
    verify(Signer(KEY).secret_for("acme"), headers, BODY)


def test_tenant_secrets_from_env_and_file_current_first() -> None:
    a = "whsec_" + base64.b64encode(b"a" * 24).decode()
    b = "whsec_" + base64.b64encode(b"b" * 24).decode()
    c = "whsec_" + base64.b64encode(b"c" * 24).decode()
    file = f'[tenants.bob]\nsecrets = ["{c}"]\n'.encode()
    found = parse_tenant_secrets(f"alice={a}, alice={b}", file)
    assert found == {"alice": (a, b), "bob": (c,)}
    signer = Signer(b"k" * 32, configured=found)
    assert signer.secrets_for("alice") == (a, b)
    assert signer.secret_for("bob") == c
    assert signer.secret_for("carol") == tenant_secret(b"k" * 32, "carol")
    assert a not in repr(signer)


@pytest.mark.parametrize(
    ("env", "file", "says"),
    [
        ("alice", None, "tenant=whsec_"),
        ("alice=nothex", None, "not whsec_"),
        ("alice=whsec_AAAA", None, "not whsec_"),
        (None, b'[tenants.a]\nsecrets = "x"', "secrets = ["),
        (None, b"not toml [", "not TOML"),
    ],
)
def test_malformed_tenant_secrets_are_refused_without_showing_them(
    env: str | None, file: bytes | None, says: str
) -> None:
    with pytest.raises(ValueError, match=re.escape(says)) as caught:
        parse_tenant_secrets(env, file)
    assert "nothex" not in str(caught.value)


def test_three_secrets_for_one_tenant_are_refused() -> None:
    s = "whsec_" + base64.b64encode(b"s" * 24).decode()
    with pytest.raises(ValueError, match="1 or 2"):
        parse_tenant_secrets(f"t={s},t={s},t={s}", None)
