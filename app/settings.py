"""The one settings class: ``REPROMPT_*`` environment variables, validated once at start-up.

settings = Settings()          # reads the environment
settings.redis_url             # None: start the embedded redis-server
"""

from __future__ import annotations

import hashlib
import ipaddress
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Annotated

from pydantic import (
    AliasChoices,
    Field,
    SecretStr,
    ValidationError,
    field_validator,
    model_validator,
)
from pydantic_settings import BaseSettings, NoDecode, SettingsConfigDict


def default_data_dir(environ: Mapping[str, str] = os.environ) -> Path:
    """``$REPROMPT_DATA_DIR``, else ``~/.cache/reprompt``."""
    configured = environ.get("REPROMPT_DATA_DIR")
    return Path(configured).expanduser() if configured else Path.home() / ".cache" / "reprompt"


def invalid_settings(exc: ValidationError) -> str:
    """Which settings are wrong and why, one per line, never their values (maybe secrets)."""
    return "\n".join(
        f"  {'.'.join(str(p) for p in error['loc']) or '(settings)'}: "
        f"{error['msg'].removeprefix('Value error, ')}"
        for error in exc.errors(include_input=False, include_url=False)
    )


def is_loopback(host: str) -> bool:
    """Whether ``host`` reaches only this machine: ``localhost``, 127.0.0.0/8, ``::1``."""
    name = host.strip().removeprefix("[").removesuffix("]").rstrip(".").lower()
    if name == "localhost":
        return True
    try:
        return ipaddress.ip_address(name).is_loopback
    except ValueError:
        return False  # a hostname (or "0.0.0.0", "::"): assume others can reach it


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
    # validate_by_name: Settings(redis_url=...) as well as its aliases (pydantic-settings
    # 2.7 ignores a field's name when it has a validation alias).
    model_config = SettingsConfigDict(
        env_prefix="REPROMPT_", extra="ignore", frozen=True, validate_by_name=True
    )

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
    redis_cluster: bool = Field(
        default=False, description="The Redis URL names a Redis Cluster node (any one)."
    )
    shards: int = Field(
        default=1,
        ge=1,
        le=256,
        description="Queue shards, each on its own hash slot: more than one spreads jobs over "
        "a cluster's masters. May grow, never shrink.",
    )

    # The HTTP API.
    host: str = "127.0.0.1"
    port: int = Field(default=8080, ge=0, le=65535)
    api_keys: Annotated[list[str], NoDecode] = Field(
        default_factory=list, description="Comma-separated tenant:sha256hex of each bearer key."
    )
    insecure_no_auth: bool = Field(
        default=False,
        description="Serve without API keys on a non-loopback address (something in front "
        "of the service authenticates callers).",
    )

    # The console (#32: docs/console.md): web pages at /console over the same jobs.
    console: bool = Field(
        default=True, description="Serve the web console at /console (false: not mounted)."
    )
    console_operator_keys: Annotated[list[str], NoDecode] = Field(
        default_factory=list,
        description="Comma-separated sha256hex of each operator key: signed in with one, "
        "the console shows every tenant's jobs.",
    )
    console_session_ttl_s: int = Field(
        default=8 * 3600, ge=60, le=7 * 24 * 3600, description="How long a sign-in lasts."
    )
    console_signins_per_minute: int = Field(
        default=10, ge=1, le=10_000, description="Sign-in attempts per client address a minute."
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

    # The embedded redis-server (``serve`` without a Redis URL).
    embedded_redis_maxmemory_mb: int = Field(
        default=1024,
        ge=64,
        description="maxmemory of the embedded redis-server (noeviction: when full, writes "
        "are refused and no job is evicted).",
    )

    # Caps on what a client may ask for.
    max_queued: int = Field(default=10_000, ge=1, description="Queued jobs per tenant.")
    max_in_flight_per_tenant: int = Field(
        default=0,
        ge=0,
        description="Jobs one tenant may have running at once (0: no cap; claims take tenants "
        "in turn anyway).",
    )
    max_tenant_bytes: int = Field(
        default=1 << 30,
        ge=0,
        description="Bytes of jobs one tenant may submit within the retention window (0: no cap).",
    )
    max_body_bytes: int = Field(default=1_048_576, ge=1024)
    max_schema_bytes: int = Field(default=65_536, ge=256)
    max_schema_depth: int = Field(default=32, ge=2, le=128)
    # A job's `input` (and `fallback.data`): compact JSON size, and nesting depth.
    max_input_bytes: int = Field(default=983_040, ge=256)
    max_input_depth: int = Field(default=64, ge=1, le=256)
    max_task_chars: int = Field(default=100_000, ge=1)
    max_turns: int = Field(default=20, ge=1, le=50)
    max_return_retries: int = Field(default=10, ge=0, le=20)
    max_candidates: int = Field(
        default=8,
        ge=1,
        le=16,
        description="The most answers a job may ask for per call (candidates.n, best-of-N).",
    )
    max_deadline_ms: int = Field(default=3_600_000, ge=1000)
    default_deadline_ms: int = Field(
        default=600_000,
        ge=1000,
        description="budget.deadlineMs of a job that gives none (at most max_deadline_ms).",
    )
    max_output_tokens: int = Field(default=32_768, ge=16)
    max_wait_ms: int = Field(default=60_000, ge=0)
    tool_timeout_ms: int = Field(
        default=300_000,
        ge=1000,
        description="How long a job in requires_action waits for its tool outputs when it "
        "gives no toolTimeoutMs (the wait also counts toward its deadline).",
    )
    max_tool_output_bytes: int = Field(
        default=262_144, ge=256, description="Compact JSON bytes of one client tool output."
    )

    # Images with a job's task (#34: chat completions' image_url parts, a job's `images`).
    max_images: int = Field(default=8, ge=0, le=64, description="Images one request may carry.")
    max_image_bytes: int = Field(
        default=4 << 20,
        ge=1024,
        le=32 << 20,
        description="Bytes of one image (decoded; a fetched image_url is read no further).",
    )
    max_images_bytes: int = Field(
        default=8 << 20, ge=1024, le=48 << 20, description="Bytes of one request's images in all."
    )

    @model_validator(mode="after")
    def _image_caps(self) -> Settings:
        if self.max_image_bytes > self.max_images_bytes:
            raise ValueError(
                f"REPROMPT_MAX_IMAGE_BYTES ({self.max_image_bytes}) must be at most "
                f"REPROMPT_MAX_IMAGES_BYTES ({self.max_images_bytes})"
            )
        return self

    # Fairness between tenants, per API process (0: no limit).
    rate_per_tenant: float = Field(
        default=100.0, ge=0, description="Requests per second one tenant may make."
    )
    burst_per_tenant: int = Field(default=200, ge=1, description="Requests in one burst.")
    max_waits_per_tenant: int = Field(
        default=200, ge=0, description="Long-polls and event streams one tenant may hold open."
    )

    # -- Outbound calls a tenant can aim (HTTP tools, webhook validators, callbacks) ------
    # Read by the assembly into app.outbound's policy, signer and secrets; docs/outbound.md.
    outbound_allow: Annotated[list[str], NoDecode] = Field(
        default_factory=list,
        description="Comma-separated host names and CIDR networks tenants may reach though "
        "they are private or loopback; the only hosts plain http may go to.",
    )
    # At most 5 minutes: a retry resends the first attempt's signature, and receivers
    # accept a webhook-timestamp up to 5 minutes old.
    outbound_timeout_ms: int = Field(
        default=10_000,
        ge=100,
        le=300_000,
        description="The most one outbound call may take, retries included; the default "
        "for a call that names no timeout.",
    )
    outbound_max_response_bytes: int = Field(
        default=1_048_576, ge=1024, le=64 << 20, description="The largest answer read."
    )
    outbound_max_request_bytes: int = Field(
        default=4 << 20, ge=1024, le=64 << 20, description="The largest body sent."
    )
    outbound_retries: int = Field(
        default=2, ge=0, le=10, description="Transport retries of one outbound call."
    )
    webhook_signing_key: SecretStr | None = Field(
        default=None,
        description="The operator key every tenant's webhook secret is derived from; unset: "
        "a random key kept in the data directory.",
    )
    webhook_signing_key_previous: SecretStr | None = Field(
        default=None,
        description="The key being rotated out: messages carry a signature under each.",
    )
    webhook_secrets: SecretStr | None = Field(
        default=None,
        description="Tenants' own signing secrets, tenant=whsec_… comma-separated (a tenant "
        "twice: its previous secret, during a rotation); they replace the derived ones.",
    )
    webhook_secrets_file: Path | None = Field(
        default=None,
        description='TOML of tenants\' signing secrets: [tenants.<name>] secrets = ["whsec_…"].',
    )
    tool_secrets_file: Path | None = Field(
        default=None,
        description="TOML of per-tenant secrets that outbound headers reference as "
        "{{secret:NAME}}.",
    )

    @field_validator("outbound_allow", mode="before")
    @classmethod
    def _split_allow(cls, value: object) -> object:
        if isinstance(value, str):
            return [part.strip() for part in value.split(",") if part.strip()]
        return value

    @field_validator("outbound_allow")
    @classmethod
    def _allow_entries(cls, value: list[str]) -> list[str]:
        for entry in value:
            try:
                ipaddress.ip_network(entry, strict=False)
            except ValueError:
                # A host name: letters, digits, "-", "_" and dots (not only digits and dots).
                name = entry.removesuffix(".")
                if (
                    not name
                    or any(not (c.isascii() and (c.isalnum() or c in "-_.")) for c in name)
                    or name.replace(".", "").isdigit()
                    or ".." in name
                ):
                    raise ValueError(
                        f"REPROMPT_OUTBOUND_ALLOW: {entry!r} is neither a host name nor an "
                        "address or CIDR network (like 10.1.2.0/24 or fd00::/8)"
                    ) from None
        return value

    @field_validator("webhook_signing_key", "webhook_signing_key_previous")
    @classmethod
    def _long_enough(cls, value: SecretStr | None) -> SecretStr | None:
        if value is not None and len(value.get_secret_value().encode()) < 16:
            raise ValueError(
                "a webhook signing key must be at least 16 bytes (openssl rand -base64 32)"
            )
        return value

    @field_validator("tool_secrets_file", "webhook_secrets_file")
    @classmethod
    def _secrets_file(cls, value: Path | None) -> Path | None:
        if value is not None and not value.expanduser().is_file():
            raise ValueError(f"{value} is not a file")
        return value.expanduser() if value is not None else None

    # -- end of the outbound block ---------------------------------------------------------

    # -- Completion callbacks (#13): the outbox's sender in each worker; docs/callbacks.md --
    callback_retry_window_s: int = Field(
        default=86_400,
        ge=1,
        le=30 * 86_400,
        description="How long a callback is retried after its event (the last try at the "
        "end); keep it within REPROMPT_RETENTION_S, or deliveries end with their job.",
    )
    callback_backoff_ms: int = Field(
        default=10_000,
        ge=1,
        description="The wait after a callback's first failed attempt, doubled after each "
        "next one (with jitter), at most REPROMPT_CALLBACK_MAX_BACKOFF_S.",
    )
    callback_max_backoff_s: int = Field(
        default=3_600, ge=1, description="The longest wait between two callback attempts."
    )
    callback_concurrency: int = Field(
        default=16,
        ge=0,
        le=1_000,
        description="Callback requests one worker sends at once (0: this worker sends none).",
    )

    # -- Batches (#30): many items through the providers' batch APIs; docs/batches.md --
    batch_max_items: int = Field(
        default=100_000, ge=1, le=1_000_000, description="Items one batch may hold."
    )
    batch_max_bytes: int = Field(
        default=268_435_456,
        ge=1024,
        description="Bytes of one batch's submission (its JSONL upload or JSON body).",
    )
    batch_max_open_per_tenant: int = Field(
        default=10, ge=1, le=10_000, description="Batches one tenant may have running at once."
    )
    batch_poll_ms: int = Field(
        default=5_000,
        ge=10,
        le=600_000,
        description="How often a worker looks at a provider batch that has not ended.",
    )
    batch_lease_ms: int = Field(
        default=30_000,
        ge=1_000,
        description="How long a worker holds a batch's round step before another may take it.",
    )
    batch_line_attempts: int = Field(
        default=3,
        ge=1,
        le=10,
        description="Rounds a provider error on one item's line is retried before it counts.",
    )
    batch_discount: float = Field(
        default=0.5,
        gt=0,
        le=1,
        description="The batch price as a share of the live price (OpenAI and Anthropic: 0.5).",
    )
    batch_pool_slots: int = Field(
        default=1,
        ge=1,
        le=64,
        description="Calls one worker makes at once for batches whose provider has no batch "
        "API, each started only while the worker runs no interactive job.",
    )
    batch_concurrency: int = Field(
        default=4,
        ge=0,
        le=1_000,
        description="Batch steps one worker runs at once (0: this worker runs none).",
    )
    # -- Streamed partials (#31): docs/streaming.md ----------------------------------------
    stream_interval_ms: int = Field(
        default=50,
        ge=0,
        le=5_000,
        description="The shortest time between two partial events of one streaming answer "
        "(the newest partial wins; the last one of an answer is always sent).",
    )

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

    @field_validator("console_operator_keys", mode="before")
    @classmethod
    def _split_operator_keys(cls, value: object) -> object:
        if isinstance(value, str):
            return [part.strip() for part in value.split(",") if part.strip()]
        return value

    @field_validator("console_operator_keys")
    @classmethod
    def _operator_digests(cls, value: list[str]) -> list[str]:
        for digest in value:
            if len(digest) != 64 or any(c not in "0123456789abcdef" for c in digest):
                raise ValueError(
                    "each entry is the 64 lowercase hex digits of an operator key's SHA-256"
                )
        return value

    @model_validator(mode="after")
    def _consistent(self) -> Settings:
        """The checks that involve two settings; every problem is reported at once."""
        problems = []
        if self.heartbeat_ms * 3 > self.lease_ms:
            problems.append(
                f"REPROMPT_HEARTBEAT_MS ({self.heartbeat_ms}) must be at most a third of "
                f"REPROMPT_LEASE_MS ({self.lease_ms}): a lease must survive two missed "
                "heartbeats, or a busy worker loses its jobs to another"
            )
        # Only when set: the default 10 minutes shrinks to a smaller cap on its own.
        explicit = "default_deadline_ms" in self.model_fields_set
        if explicit and self.default_deadline_ms > self.max_deadline_ms:
            problems.append(
                f"REPROMPT_DEFAULT_DEADLINE_MS ({self.default_deadline_ms}) must be at most "
                f"REPROMPT_MAX_DEADLINE_MS ({self.max_deadline_ms})"
            )
        if problems:
            raise ValueError("\n  ".join(problems))
        return self

    def exposed_without_auth(self) -> str | None:
        """Why the API must not start as configured, or ``None`` when it may.

        With no API keys every caller is one tenant and sees every job: fine on loopback,
        refused on any other address unless ``insecure_no_auth`` says something in front
        of the service authenticates callers.
        """
        if self.api_keys or self.insecure_no_auth or is_loopback(self.host):
            return None
        return (
            f"refusing to serve the API on {self.host} without authentication: anyone who "
            "can reach it could submit jobs (spending your provider credit) and read every "
            "job. Set REPROMPT_API_KEYS=tenant:sha256hex,... (the SHA-256 of each bearer "
            'key: printf %s "$KEY" | sha256sum), or listen on loopback (--host '
            "127.0.0.1), or, if a proxy in front authenticates callers, pass "
            "--insecure-no-auth (REPROMPT_INSECURE_NO_AUTH=1)"
        )

    @property
    def keys(self) -> dict[str, ApiKey]:
        """Digest → key; empty means auth is off and every caller is tenant ``default``."""
        out: dict[str, ApiKey] = {}
        for entry in self.api_keys:
            tenant, _, digest = entry.partition(":")
            out[digest] = ApiKey(tenant, digest)
        return out

    @property
    def job_default_deadline_ms(self) -> int:
        """The deadline a job without one gets: the default, within the cap."""
        return min(self.default_deadline_ms, self.max_deadline_ms)
