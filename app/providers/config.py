"""The providers configuration: a TOML or YAML file, provider env vars and secrets files.

Loaded once at start-up; any mistake is an ``InvalidInput`` naming the field::

    config = load_providers(os.environ, path=settings.providers_file)   # once, at start-up
    config = load_providers({"OPENAI_API_KEY": "sk-..."}, path="providers.toml")
    if config.is_empty(): ...        # no provider: the embedded local model takes over
    config = config.with_provider(
        "local",
        ProviderConfig(kind="openai", base_url=url),
        {"gemma": ModelConfig(provider="local", structured="json_object_schema")},
    )

File shape (see docs/providers.md for the full example)::

    default = "fast"                         # a model or route
    [providers.openai]                       # kind, base_url, api_key_env | api_key_file,
    kind = "openai"                          # timeout_s, max_attempts, headers, proxy
    [models.gpt-4o-mini]                     # provider, name, structured, prices,
    provider = "openai"                      # max_output_tokens, max_tokens_field, strict,
                                             # system_role, tools, prompt, prompt_cache
    [routes.fast]
    models = ["gpt-4o-mini", "claude-haiku"]
    [circuit]                                # failure_threshold, cooldown_s
    failure_threshold = 5

API keys are held as ``SecretStr`` and never appear in a repr, a log line or an error.
Keys are never read from the file itself: name an env var or a secrets file.
"""

from __future__ import annotations

import tomllib
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Final, Literal

import yaml
from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    SecretStr,
    ValidationError,
    field_validator,
    model_validator,
)

from app.core.turn.model import PromptProfile
from app.core.wire.errors import InvalidInput
from app.providers.circuit import DEFAULT_COOLDOWN_S, DEFAULT_FAILURE_THRESHOLD
from app.providers.http import proxy_problem
from app.providers.pricing import Price
from app.providers.retry import DEFAULT_MAX_ATTEMPTS
from app.providers.structured import Capability

Kind = Literal["openai", "anthropic"]

PROVIDERS_PATH_ENV: Final = "REPROMPT_PROVIDERS"
DEFAULT_BASE_URLS: Final[dict[str, str]] = {
    "openai": "https://api.openai.com/v1",
    "anthropic": "https://api.anthropic.com",
}
DEFAULT_CAPABILITY: Final[dict[str, Capability]] = {"openai": "json_schema", "anthropic": "tool"}
ANTHROPIC_CAPABILITIES: Final = frozenset({"tool", "prompt"})
ANTHROPIC_VERSION: Final = "2023-06-01"
DEFAULT_TIMEOUT_S: Final = 60.0


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class ProviderConfig(_Strict):
    """One upstream endpoint and its credentials. ``kind`` picks the wire protocol.

    ``base_url`` defaults to the vendor's: OpenAI's includes ``/v1``
    (``https://api.openai.com/v1``), Anthropic's does not (``https://api.anthropic.com``).
    """

    kind: Kind
    base_url: str | None = None
    api_key_env: str | None = None
    api_key_file: str | None = None
    # Resolved from api_key_env / api_key_file at load time; masked in every repr.
    api_key: SecretStr | None = None
    timeout_s: float = Field(default=DEFAULT_TIMEOUT_S, gt=0)
    max_attempts: int = Field(default=DEFAULT_MAX_ATTEMPTS, ge=1, le=10)
    headers: dict[str, str] = Field(default_factory=dict)
    anthropic_version: str = ANTHROPIC_VERSION
    # Every call to this provider through this http(s) proxy, in place of the environment's
    # (HTTPS_PROXY, NO_PROXY, ...). A secret: its credentials never show in a repr or error.
    proxy: SecretStr | None = None
    # Batches (#30): whether the provider has its vendor's batch API (OpenAI's Batch API,
    # Anthropic's Message Batches; false for vLLM, llama.cpp and most compatible servers),
    # and its batch price as a share of the live one.
    batch_api: bool = True
    batch_discount: float | None = Field(default=None, gt=0, le=1)

    @field_validator("base_url")
    @classmethod
    def _http_url(cls, value: str | None) -> str | None:
        if value is not None and not value.startswith(("http://", "https://")):
            raise ValueError("must start with http:// or https://")
        return value.rstrip("/") if value else value

    @field_validator("proxy")
    @classmethod
    def _proxy_url(cls, value: SecretStr | None) -> SecretStr | None:
        problem = None if value is None else proxy_problem(value.get_secret_value())
        if problem is not None:
            raise ValueError(problem)
        return value

    @model_validator(mode="after")
    def _one_key_source(self) -> ProviderConfig:
        if self.api_key_env and self.api_key_file:
            raise ValueError("set api_key_env or api_key_file, not both")
        return self

    @property
    def url(self) -> str:
        return self.base_url or DEFAULT_BASE_URLS[self.kind]


class ModelConfig(_Strict):
    """One callable model.

    ``name`` is the upstream id (defaults to the table key); ``structured`` the best
    structured-output mechanism it supports (by kind: ``json_schema`` for openai, ``tool``
    for anthropic).
    """

    provider: str
    name: str | None = None
    structured: Capability | None = None
    # Prices are finite: an infinite one would make every cost (and the JSON) unusable.
    input_usd_per_mtok: float | None = Field(default=None, ge=0, allow_inf_nan=False)
    output_usd_per_mtok: float | None = Field(default=None, ge=0, allow_inf_nan=False)
    # The prompt cache's rates: input read from it, and (Anthropic) written to it.
    cached_input_usd_per_mtok: float | None = Field(default=None, ge=0, allow_inf_nan=False)
    cache_write_usd_per_mtok: float | None = Field(default=None, ge=0, allow_inf_nan=False)
    # Mark the job's stable prompt prefix for the provider's cache (Anthropic
    # cache_control, OpenAI prompt_cache_key). Default: on for Anthropic and for OpenAI's
    # own API; off for other OpenAI-compatible servers, which may reject the field.
    prompt_cache: bool | None = None
    max_output_tokens: int | None = Field(default=None, ge=1)
    # OpenAI's newer models take max_completion_tokens; most compatible servers max_tokens.
    max_tokens_field: Literal["max_tokens", "max_completion_tokens"] = "max_tokens"
    # json_schema's "strict" flag; some servers reject strict schemas they cannot compile.
    strict: bool = True
    # Chat templates without a system role (Gemma's) drop system messages silently;
    # False folds the system prompt into the first user message instead.
    system_role: bool = True
    # Native tool calling (OpenAI ``tools``, Anthropic ``tool_use``). llama.cpp's Gemma chat
    # format has none: a job with tools for such a model is refused at submit.
    tools: bool = True
    # How prompts are written for it: "full" (the schema, the input as JSON in a delimiter
    # tag, the $fail instruction) or "compact" for small models that copy such scaffolding
    # into their answers (docs/providers.md, "Prompt profiles").
    prompt: PromptProfile = "full"
    # Ask for the answer's token log-probabilities (OpenAI-compatible ``logprobs``): the
    # envelope's ``confidence`` comes from them (docs/providers.md, "Confidence").
    logprobs: bool = False
    # json_object_schema only: send the schema as a GBNF ``grammar`` (llama.cpp), with the
    # digits of its numbers bounded (app/providers/grammar.py).
    grammar: bool = False

    @model_validator(mode="after")
    def _both_prices(self) -> ModelConfig:
        if (self.input_usd_per_mtok is None) != (self.output_usd_per_mtok is None):
            raise ValueError("set both input_usd_per_mtok and output_usd_per_mtok, or neither")
        cache_rates = (self.cached_input_usd_per_mtok, self.cache_write_usd_per_mtok)
        if self.input_usd_per_mtok is None and any(r is not None for r in cache_rates):
            raise ValueError(
                "cached_input_usd_per_mtok and cache_write_usd_per_mtok need "
                "input_usd_per_mtok and output_usd_per_mtok"
            )
        return self

    @property
    def price(self) -> Price | None:
        if self.input_usd_per_mtok is None or self.output_usd_per_mtok is None:
            return None
        return Price(
            self.input_usd_per_mtok,
            self.output_usd_per_mtok,
            self.cached_input_usd_per_mtok,
            self.cache_write_usd_per_mtok,
        )


class RouteConfig(_Strict):
    """Models tried in order: the next one answers when one is unavailable or rate-limited."""

    models: list[str] = Field(min_length=1)


class CircuitConfig(_Strict):
    failure_threshold: int = Field(default=DEFAULT_FAILURE_THRESHOLD, ge=1)
    cooldown_s: float = Field(default=DEFAULT_COOLDOWN_S, ge=0)


class ProvidersConfig(_Strict):
    """Everything the router is built from. Cross-references are checked on construction."""

    default: str | None = None
    providers: dict[str, ProviderConfig] = Field(default_factory=dict)
    models: dict[str, ModelConfig] = Field(default_factory=dict)
    routes: dict[str, RouteConfig] = Field(default_factory=dict)
    circuit: CircuitConfig = Field(default_factory=CircuitConfig)

    @model_validator(mode="after")
    def _references(self) -> ProvidersConfig:
        # InvalidInput is not a ValueError, so pydantic lets it through with its field path.
        for key, model in self.models.items():
            provider = self.providers.get(model.provider)
            if provider is None:
                raise InvalidInput(
                    f"models.{key}.provider: unknown provider {model.provider!r}"
                    f" (configured: {_names(self.providers)})",
                    field=f"models.{key}.provider",
                )
            structured = model.structured or DEFAULT_CAPABILITY[provider.kind]
            if provider.kind == "anthropic" and structured not in ANTHROPIC_CAPABILITIES:
                raise InvalidInput(
                    f"models.{key}.structured: {structured!r} is not available on an anthropic"
                    f" provider (use one of: {', '.join(sorted(ANTHROPIC_CAPABILITIES))})",
                    field=f"models.{key}.structured",
                )
            prompt_cache = model.prompt_cache
            if prompt_cache is None:
                prompt_cache = (
                    provider.kind == "anthropic" or provider.url == DEFAULT_BASE_URLS["openai"]
                )
            # Normalise in place: the dict is ours (validation copied it), the models frozen.
            self.models[key] = model.model_copy(
                update={
                    "name": model.name or key,
                    "structured": structured,
                    "prompt_cache": prompt_cache,
                }
            )
        for key, route in self.routes.items():
            if key in self.models:
                raise InvalidInput(
                    f"routes.{key}: a model has the same name; names must be unique",
                    field=f"routes.{key}",
                )
            for i, name in enumerate(route.models):
                if name not in self.models:
                    raise InvalidInput(
                        f"routes.{key}.models.{i}: unknown model {name!r}"
                        f" (configured: {_names(self.models)})",
                        field=f"routes.{key}.models.{i}",
                    )
        if self.default is not None and not (
            self.default in self.models or self.default in self.routes
        ):
            raise InvalidInput(
                f"default: {self.default!r} is neither a configured model nor a route",
                field="default",
            )
        return self

    def is_empty(self) -> bool:
        """No model is configured: the service falls back to the embedded local model."""
        return not self.models

    def default_target(self) -> str | None:
        """``default``, else the first route, else the first model."""
        return self.default or next(iter(self.routes), None) or next(iter(self.models), None)

    def with_provider(
        self,
        name: str,
        provider: ProviderConfig,
        models: Mapping[str, ModelConfig],
        *,
        default: bool = False,
    ) -> ProvidersConfig:
        """A copy with one more provider and its models.

        They become the default when ``default`` is true or nothing else is configured.
        """
        if name in self.providers:
            raise InvalidInput(f"providers.{name}: already configured", field=f"providers.{name}")
        for key in models:
            if key in self.models or key in self.routes:
                raise InvalidInput(f"models.{key}: already configured", field=f"models.{key}")
        first = next(iter(models), None)
        return ProvidersConfig(
            default=first if default or self.default_target() is None else self.default,
            providers={**self.providers, name: provider},
            models={**self.models, **models},
            routes=dict(self.routes),
            circuit=self.circuit,
        )


def load_providers(
    env: Mapping[str, str], path: str | None = None, *, keys: bool = True
) -> ProvidersConfig:
    """Read the providers file ``path`` and the provider variables of ``env``.

    ``OPENAI_API_KEY`` (or ``OPENAI_BASE_URL``) adds provider ``openai`` with model
    ``$OPENAI_MODEL`` (default gpt-4o-mini), ``ANTHROPIC_API_KEY`` (or ``ANTHROPIC_BASE_URL``)
    adds ``anthropic`` with ``$ANTHROPIC_MODEL`` (default claude-haiku-4-5), unless the file
    configures that provider. ``env`` also resolves the file's ``api_key_env`` references.
    ``keys=False`` reads no key (every ``api_key`` None), for a process that calls no model.
    """
    raw = _read_file(path) if path else {}
    where = f"providers file {path}: " if path else "providers configuration: "
    providers = raw.setdefault("providers", {})
    models = raw.setdefault("models", {})
    if not isinstance(providers, dict) or not isinstance(models, dict):
        field = "providers" if not isinstance(providers, dict) else "models"
        raise InvalidInput(f"{where}{field}: must be a table of tables", field=field)
    # A relative api_key_file is relative to the providers file.
    base = Path(path).parent if path else Path.cwd()
    for name, provider in providers.items():
        if isinstance(provider, dict):
            _resolve_key(name, provider, env, where, base, keys=keys)
    for spec in _ENV_PROVIDERS:
        _add_env_provider(spec, providers, models, env)
    # Raised outside the except blocks so no traceback carries the raw input along.
    try:
        return ProvidersConfig.model_validate(raw)
    except ValidationError as exc:
        error = _invalid(exc, where)
    except InvalidInput as exc:
        error = InvalidInput(f"{where}{exc.detail}", field=exc.field)
    raise error


# (provider name, kind, key var, base url var, model var, default model)
_ENV_PROVIDERS: Final = (
    ("openai", "openai", "OPENAI_API_KEY", "OPENAI_BASE_URL", "OPENAI_MODEL", "gpt-4o-mini"),
    (
        "anthropic",
        "anthropic",
        "ANTHROPIC_API_KEY",
        "ANTHROPIC_BASE_URL",
        "ANTHROPIC_MODEL",
        "claude-haiku-4-5",
    ),
)


def _add_env_provider(
    spec: tuple[str, str, str, str, str, str],
    providers: dict[str, Any],
    models: dict[str, Any],
    env: Mapping[str, str],
) -> None:
    name, kind, key_var, url_var, model_var, default_model = spec
    key, url = env.get(key_var), env.get(url_var)
    if not key and not url:
        return
    if name in providers or any(
        isinstance(p, dict) and p.get("api_key_env") == key_var for p in providers.values()
    ):
        return
    provider: dict[str, Any] = {"kind": kind}
    if url:
        provider["base_url"] = url
    if key:
        provider["api_key_env"] = key_var
        provider["api_key"] = SecretStr(key)
    providers[name] = provider
    model = env.get(model_var) or default_model
    models.setdefault(model, {"provider": name})


def _resolve_key(
    name: str,
    provider: dict[str, Any],
    env: Mapping[str, str],
    where: str,
    base: Path,
    *,
    keys: bool,
) -> None:
    field = f"providers.{name}"
    if "api_key" in provider:
        raise InvalidInput(
            f"{where}{field}.api_key: keys are not read from this file;"
            " name an env var (api_key_env) or a secrets file (api_key_file)",
            field=f"{field}.api_key",
        )
    var, file = provider.get("api_key_env"), provider.get("api_key_file")
    if (var and file) or not keys:
        return  # the model validator names the conflict; or no key is wanted
    if isinstance(var, str) and var:
        value = env.get(var)
        if not value:
            raise InvalidInput(
                f"{where}{field}.api_key_env: environment variable {var} is not set",
                field=f"{field}.api_key_env",
            )
        provider["api_key"] = SecretStr(value)
    elif isinstance(file, str) and file:
        try:
            value = (base / file).read_text(encoding="utf-8").strip()
        except OSError as exc:
            raise InvalidInput(
                f"{where}{field}.api_key_file: cannot read {file} ({exc.strerror or exc})",
                field=f"{field}.api_key_file",
            ) from None
        if not value:
            raise InvalidInput(
                f"{where}{field}.api_key_file: {file} is empty", field=f"{field}.api_key_file"
            )
        provider["api_key"] = SecretStr(value)


def _read_file(path: str) -> dict[str, Any]:
    suffix = Path(path).suffix.lower()
    try:
        text = Path(path).read_text(encoding="utf-8")
    except OSError as exc:
        raise InvalidInput(
            f"providers file {path}: cannot read it ({exc.strerror or exc})",
            field=PROVIDERS_PATH_ENV,
        ) from None
    data: object
    if suffix == ".toml":
        try:
            data = tomllib.loads(text)
        except tomllib.TOMLDecodeError as exc:
            raise InvalidInput(
                f"providers file {path}: not valid TOML ({exc})", field=PROVIDERS_PATH_ENV
            ) from None
    elif suffix in (".yaml", ".yml"):
        try:
            data = yaml.safe_load(text)
        except yaml.YAMLError as exc:
            raise InvalidInput(
                f"providers file {path}: not valid YAML ({exc})", field=PROVIDERS_PATH_ENV
            ) from None
        data = {} if data is None else data
    else:
        raise InvalidInput(
            f"providers file {path}: expected a .toml, .yaml or .yml file",
            field=PROVIDERS_PATH_ENV,
        )
    if not isinstance(data, dict):
        raise InvalidInput(
            f"providers file {path}: the top level must be a table/mapping",
            field=PROVIDERS_PATH_ENV,
        )
    return data


def _invalid(exc: ValidationError, where: str) -> InvalidInput:
    problems = []
    for error in exc.errors(include_url=False, include_input=False):
        path = ".".join(str(part) for part in error["loc"])
        problems.append(f"{path}: {error['msg']}" if path else error["msg"])
    first = exc.errors(include_url=False, include_input=False)[0]["loc"]
    return InvalidInput(where + "; ".join(problems), field=".".join(str(p) for p in first) or None)


def _names(table: Mapping[str, object]) -> str:
    return ", ".join(sorted(table)) or "none"
