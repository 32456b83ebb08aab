"""docs/outbound.md stays true: its receiver recipe verifies our signatures, and its
wiring builds a working guard, client and signer from the settings."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import app.outbound
from app.outbound.webhooks import Signer
from app.settings import Settings

DOC = Path(__file__).resolve().parents[2] / "docs" / "outbound.md"


def _python_block(containing: str) -> str:
    text = DOC.read_text(encoding="utf-8")
    blocks = [m.group(1) for m in re.finditer(r"```python\n(.*?)```", text, re.DOTALL)]
    (block,) = [b for b in blocks if containing in b]
    return block


def test_the_documented_hmac_recipe_verifies_our_signatures() -> None:
    namespace: dict[str, Any] = {}
    exec(_python_block("def verified"), namespace)
    signer = Signer(b"docs-operator-key-0123456789")
    body = b'{"jobId":"j","toolCallId":"c","name":"t","arguments":{}}'
    headers = signer.headers("acme", "msg_doc", body)
    assert namespace["verified"](signer.secret_for("acme"), headers, body)
    assert not namespace["verified"](signer.secret_for("bob"), headers, body)
    assert not namespace["verified"](signer.secret_for("acme"), headers, body + b" ")


async def test_the_documented_wiring_builds_from_the_settings(tmp_path: Path) -> None:
    secrets_file = tmp_path / "tool-secrets.toml"
    secrets_file.write_text('[tenants.acme]\nK = "v"\n', encoding="utf-8")
    settings = Settings(
        data_dir=tmp_path,
        outbound_allow=["127.0.0.1/32", "hooks.internal"],
        outbound_timeout_ms=2500,
        tool_secrets_file=secrets_file,
    )
    namespace: dict[str, Any] = {"settings": settings}
    namespace.update({name: getattr(app.outbound, name) for name in app.outbound.__all__})
    exec(_python_block("guard = Guard(policy)"), namespace)
    try:
        assert namespace["guard"].check_url("http://hooks.internal/x") is None
        assert namespace["policy"].timeout_s == 2.5
        assert namespace["signer"].secret_for("acme").startswith("whsec_")
        assert namespace["secrets"].names("acme") == frozenset({"K"})
    finally:
        await namespace["outbound"].aclose()
