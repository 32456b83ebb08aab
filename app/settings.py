"""The one settings class: ``REPROMPT_*`` environment variables, validated once at start-up.

settings = Settings()          # reads the environment
settings.redis_url             # None: start the embedded redis-server
"""

from __future__ import annotations

import hashlib
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Annotated

from pydantic import AliasChoices, Field, SecretStr, ValidationError, field_validator
from pydantic_settings import BaseSettings, NoDecode, SettingsConfigDict


def default_data_dir(environ: Mapping[str, str] = os.environ) -> Path:
    """``$REPROMPT_DATA_DIR``, else ``~/.cache/reprompt``."""
    configured = environ.get("REPROMPT_DATA_DIR")
    return Path(configured).expanduser() if configured else Path.home() / ".cache" / "reprompt"


def invalid_settings(exc: ValidationError) -> str:
    """Which settings are wrong and why, one per line, never their values (they may be
    secrets)."""
    return "\n".join(
        f"  {'.'.join(str(p) for p in error['loc']) or '(settings)'}: {error['msg']}"
        for error in exc.errors(include_input=False, include_url=False)
    )


class ApiKey:
    """A tenant's bearer key, held only as its SHA-256 (configured as ``name:sha256hex``)."""

    __slots__ = ("digest", "tenant")

    def __init__(self, tenant: str, digest: str) -> None:
        self.tenant = tenant
        self.digest = digest

    def __repr__(self) -> str:
        return f"ApiKey(tenant={self.tenant!r})"

    @staticmethod
    def hash(key: str) -> str:
        return hashlib.sha256(key.encode()).hexdigest()


class Settings(BaseSettings):
    model_config = SettingsConfigDict(env_prefix="REPROMPT_", extra="ignore", frozen=True)

    # Where state lives.
    redis_url: SecretStr | None = Field(
        default=None,
        validation_alias=AliasChoices("REPROMPT_REDIS_URL", "REDIS_URL"),
        description="Redis to use; unset: start the embedded redis-server.",
    )
    data_dir: Path = Field(default_factory=default_data_dir)
    providers_file: Path | None = Field(
        default=None,
        validation_alias=AliasChoices("REPROMPT_PROVIDERS", "REPROMPT_PROVIDERS_FILE"),
        description="The providers file (TOML or YAML): models, routes, prices, circuits.",
    )
    key_prefix: str = Field(default="rp", pattern=r"^[A-Za-z0-9_-]{1,32}$")

    # The HTTP API.
    host: str = "127.0.0.1"
    port: int = Field(default=8080, ge=0, le=65535)
    api_keys: Annotated[list[str], NoDecode] = Field(
        default_factory=list, description="Comma-separated tenant:sha256hex of each bearer key."
    )

    # Workers and the queue.
    worker_concurrency: int = Field(default=32, ge=1, le=10_000)
    worker_metrics_port: int = Field(default=9101, ge=0, le=65535)
    lease_ms: int = Field(default=30_000, ge=500)
    heartbeat_ms: int = Field(default=10_000, ge=100)
    reap_interval_ms: int = Field(default=5_000, ge=100)
    max_attempts: int = Field(
        default=3, ge=1, le=20, description="Worker losses before a job fails."
    )
    retention_s: int = Field(
        default=7 * 24 * 3600, ge=60, description="How long finished jobs stay."
    )
    idempotency_ttl_s: int = Field(default=24 * 3600, ge=60)
    drain_timeout_s: float = Field(default=30.0, ge=0)

    # Caps on what a client may ask for.
    max_queued: int = Field(default=10_000, ge=1)
    max_body_bytes: int = Field(default=1_048_576, ge=1024)
    max_schema_bytes: int = Field(default=65_536, ge=256)
    max_schema_depth: int = Field(default=32, ge=2, le=128)
    # A job's `input` (and `fallback.data`): compact JSON size, and nesting depth.
    max_input_bytes: int = Field(default=983_040, ge=256)
    max_input_depth: int = Field(default=64, ge=1, le=256)
    max_task_chars: int = Field(default=100_000, ge=1)
    max_turns: int = Field(default=20, ge=1, le=50)
    max_return_retries: int = Field(default=10, ge=0, le=20)
    max_deadline_ms: int = Field(default=3_600_000, ge=1000)
    max_output_tokens: int = Field(default=32_768, ge=16)
    max_wait_ms: int = Field(default=60_000, ge=0)

    @field_validator("api_keys", mode="before")
    @classmethod
    def _split(cls, value: object) -> object:
        if isinstance(value, str):
            return [part.strip() for part in value.split(",") if part.strip()]
        return value

    @field_validator("api_keys")
    @classmethod
    def _well_formed(cls, value: list[str]) -> list[str]:
        for entry in value:
            tenant, _, digest = entry.partition(":")
            if not tenant or len(digest) != 64 or any(c not in "0123456789abcdef" for c in digest):
                raise ValueError(
                    "each entry is tenant:sha256hex (64 lowercase hex digits of the key's SHA-256)"
                )
        return value

    @property
    def keys(self) -> dict[str, ApiKey]:
        """Digest → key; empty means auth is off and every caller is tenant ``default``."""
        out: dict[str, ApiKey] = {}
        for entry in self.api_keys:
            tenant, _, digest = entry.partition(":")
            out[digest] = ApiKey(tenant, digest)
        return out
