"""API keys never leave the request headers: not in reprs, errors, logs or responses."""

from __future__ import annotations

import dataclasses
import logging
import traceback
from pathlib import Path

import httpx
import pytest

from app.core.turn.model import LLMRequest, Message
from app.core.wire.errors import ProviderConfigError, ProviderError
from app.providers.config import ProvidersConfig, load_providers
from app.providers.router import build_router
from tests.providers.upstream import Reply, Upstream, recorded

OPENAI_KEY = "sk-proj-LeakCheck0penAI9876543210zyxw"
ANTHROPIC_KEY = "sk-ant-api03-LeakCheckAnthr0pic_0123456789-abc"
# Fragments a careless mask or log line might still show.
FRAGMENTS = ("LeakCheck", "0penAI98765", "Anthr0pic_012")
ASK = LLMRequest(messages=(Message("user", "hi"),), model="gpt-4o-mini")


def assert_clean(text: str) -> None:
    for secret in (OPENAI_KEY, ANTHROPIC_KEY, *FRAGMENTS):
        assert secret not in text


def configure(upstream: Upstream, tmp_path: Path) -> ProvidersConfig:
    key_file = tmp_path / "anthropic.key"
    key_file.write_text(ANTHROPIC_KEY + "\n", encoding="utf-8")
    providers = tmp_path / "providers.toml"
    providers.write_text(
        f'[providers.anthropic]\nkind = "anthropic"\nbase_url = "{upstream.url}"\n'
        f'api_key_file = "{key_file}"\nmax_attempts = 2\n'
        '[models.claude-haiku]\nprovider = "anthropic"\n',
        encoding="utf-8",
    )
    env = {"OPENAI_API_KEY": OPENAI_KEY, "OPENAI_BASE_URL": upstream.url + "/v1"}
    return load_providers(env, path=str(providers))


def everything_about(err: BaseException) -> str:
    parts = []
    seen: BaseException | None = err
    while seen is not None:
        parts += [str(seen), repr(seen), repr(seen.args), repr(vars(seen))]
        seen = seen.__cause__ or seen.__context__
    parts += traceback.format_exception(err)
    return "\n".join(parts)


def logged(caplog: pytest.LogCaptureFixture) -> str:
    return "\n".join(
        f"{r.name} {r.getMessage()} {r.args!r} {r.exc_text or ''}" for r in caplog.records
    )


async def test_the_key_is_sent_but_never_shown_after_success(
    upstream: Upstream, http: httpx.AsyncClient, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG)
    config = configure(upstream, tmp_path)
    router = build_router(config, http)
    upstream.script(recorded("openai_429"), recorded("openai_success"))

    response = await router.complete(ASK)
    upstream.script(recorded("anthropic_success"))
    other = await router.complete(LLMRequest(messages=ASK.messages, model="claude-haiku"))

    assert upstream.seen[0].headers["authorization"] == f"Bearer {OPENAI_KEY}"
    assert upstream.seen[-1].headers["x-api-key"] == ANTHROPIC_KEY
    for answer in (response, other):
        assert_clean(repr(answer))
        assert_clean(repr(dataclasses.asdict(answer)))
    assert_clean(repr(config) + str(config) + config.model_dump_json())
    assert_clean(repr(config.providers) + repr(router) + repr(router.snapshot()))
    assert_clean(logged(caplog))
    assert caplog.records  # the retry was logged, without the key


@pytest.mark.parametrize(
    ("model", "reply"),
    [
        (
            "gpt-4o-mini",
            Reply(
                401,
                {
                    "error": {
                        "message": f"Incorrect API key provided: {OPENAI_KEY}.",
                        "type": "invalid_request_error",
                        "code": "invalid_api_key",
                    }
                },
            ),
        ),
        ("gpt-4o-mini", recorded("openai_401")),
        (
            "claude-haiku",
            Reply(
                401,
                {
                    "type": "error",
                    "error": {
                        "type": "authentication_error",
                        "message": f"invalid x-api-key {ANTHROPIC_KEY}",
                    },
                },
            ),
        ),
        (
            "claude-haiku",
            Reply(500, f"<html>upstream said Bearer {ANTHROPIC_KEY} was odd</html>"),
        ),
    ],
)
async def test_the_key_never_appears_in_errors_or_logs_after_a_rejection(
    upstream: Upstream,
    http: httpx.AsyncClient,
    tmp_path: Path,
    caplog: pytest.LogCaptureFixture,
    model: str,
    reply: Reply,
) -> None:
    caplog.set_level(logging.DEBUG)
    router = build_router(configure(upstream, tmp_path), http)
    upstream.script(reply)

    with pytest.raises(ProviderError) as caught:
        await router.complete(LLMRequest(messages=ASK.messages, model=model))

    assert_clean(everything_about(caught.value))
    assert_clean(logged(caplog))
    if isinstance(caught.value, ProviderConfigError):
        provider = "openai" if model.startswith("gpt") else "anthropic"
        assert str(caught.value).startswith(
            f"{provider} rejected the credentials (401) for model {model}"
        )
