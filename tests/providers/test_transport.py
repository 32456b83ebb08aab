"""Classification at the edge: HTTP statuses, Retry-After forms, key scrubbing."""

from __future__ import annotations

import json
from datetime import UTC, datetime

import httpx
import pytest

from app.core.wire.errors import (
    ProviderConfigError,
    ProviderError,
    ProviderRateLimited,
    ProviderTimeout,
    ProviderTokenLimit,
    ProviderUnavailable,
)
from app.providers.transport import Edge, classify_status, redact, retry_after_seconds

NOW = datetime(2025, 6, 2, 12, 0, 0, tzinfo=UTC)
EDGE = Edge("openai", "gpt-4o-mini", ("sk-live-CONFIGURED-VALUE-0001",))


def body(message: str, code: str | None = None) -> str:
    return json.dumps({"error": {"message": message, "type": "x", "code": code}})


@pytest.mark.parametrize(
    ("status", "text", "error"),
    [
        (429, body("slow down"), ProviderRateLimited),
        (500, body("oops"), ProviderUnavailable),
        (502, "<html>bad gateway</html>", ProviderUnavailable),
        (503, body("overloaded"), ProviderUnavailable),
        (529, body("Overloaded"), ProviderUnavailable),
        (408, body("timeout"), ProviderTimeout),
        (400, body("too long", "context_length_exceeded"), ProviderTokenLimit),
        (400, body("This model's maximum context length is 8192 tokens."), ProviderTokenLimit),
        (400, body("prompt is too long: 208310 tokens > 200000 maximum"), ProviderTokenLimit),
        (413, body("request_too_large: input is too long"), ProviderTokenLimit),
        (400, body("temperature must be <= 2"), ProviderConfigError),
        (422, body("unprocessable"), ProviderConfigError),
        (401, body("bad key"), ProviderConfigError),
        (403, body("forbidden"), ProviderConfigError),
        (404, body("no such model"), ProviderConfigError),
    ],
)
def test_statuses_map_to_the_error_tree_most_specific_first(
    status: int, text: str, error: type[ProviderError]
) -> None:
    err = classify_status(status, httpx.Headers(), text, EDGE, now=NOW)

    assert type(err) is error
    assert (err.provider, err.model) == ("openai", "gpt-4o-mini")


def test_credentials_error_names_provider_and_model_and_scrubs_keys() -> None:
    text = body(
        "Incorrect API key provided: sk-live-CONFIGURED-VALUE-0001 (also sk-proj-abc***wxyz)",
        "invalid_api_key",
    )
    err = classify_status(401, httpx.Headers(), text, EDGE)

    assert str(err).startswith("openai rejected the credentials (401) for model gpt-4o-mini")
    assert "CONFIGURED" not in str(err)
    assert "sk-proj" not in str(err)
    assert "[redacted]" in str(err)


@pytest.mark.parametrize(
    ("headers", "seconds"),
    [
        ({"retry-after": "7"}, 7.0),
        ({"retry-after": "1.5"}, 1.5),
        ({"retry-after-ms": "250", "retry-after": "9"}, 0.25),
        ({"retry-after": "Mon, 02 Jun 2025 12:00:30 GMT"}, 30.0),
        ({"retry-after": "Mon, 02 Jun 2025 11:00:00 GMT"}, 0.0),
        ({"retry-after": "soon"}, None),
        ({}, None),
        (
            {
                "anthropic-ratelimit-requests-remaining": "0",
                "anthropic-ratelimit-requests-reset": "2025-06-02T12:00:20Z",
                "anthropic-ratelimit-tokens-remaining": "5000",
                "anthropic-ratelimit-tokens-reset": "2025-06-02T12:00:03Z",
            },
            20.0,
        ),
        (
            {
                "anthropic-ratelimit-input-tokens-remaining": "0",
                "anthropic-ratelimit-input-tokens-reset": "2025-06-02T12:00:04Z",
                "anthropic-ratelimit-output-tokens-remaining": "0",
                "anthropic-ratelimit-output-tokens-reset": "2025-06-02T12:00:09Z",
            },
            9.0,
        ),
        ({"anthropic-ratelimit-tokens-reset": "2025-06-02T12:00:05+00:00"}, 5.0),
        ({"retry-after": "3", "anthropic-ratelimit-tokens-reset": "2025-06-02T12:00:50Z"}, 3.0),
    ],
)
def test_retry_after_is_read_in_every_documented_form(
    headers: dict[str, str], seconds: float | None
) -> None:
    assert retry_after_seconds(httpx.Headers(headers), now=NOW) == seconds


def test_rate_limit_and_unavailable_carry_the_wait() -> None:
    headers = httpx.Headers({"retry-after": "4"})
    assert classify_status(429, headers, "", EDGE).retry_after_s == 4.0
    assert classify_status(503, headers, "", EDGE).retry_after_s == 4.0


@pytest.mark.parametrize(
    "secret",
    [
        "sk-proj-AbCdEf0123456789",
        "sk-ant-api03-AbCdEf0123456789_-xyz",
        "gsk_AbCdEf0123456789",
        "Bearer abc.def.ghi",
        "0123456789abcdef0123456789abcdef0123",
    ],
)
def test_redact_removes_key_shaped_text(secret: str) -> None:
    assert secret not in redact(f"error: {secret} was rejected")


def test_redact_keeps_model_ids_readable() -> None:
    text = "model gpt-4o-mini-2024-07-18 and claude-3-5-haiku-20241022 not found"
    assert redact(text) == text
