"""The providers file (TOML or YAML), provider env vars and secrets files; clear errors."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

import httpx
import pytest

from app.core.turn.model import PromptStyle
from app.core.wire.errors import InvalidInput
from app.providers.config import ModelConfig, ProviderConfig, ProvidersConfig, load_providers
from app.providers.embedded import with_local_model
from app.providers.local import local_model_settings
from app.providers.router import build_router

TOML = """
default = "fast"

[providers.openai]
kind = "openai"
base_url = "https://api.openai.com/v1"
api_key_env = "OPENAI_API_KEY"
timeout_s = 60
max_attempts = 3

[providers.anthropic]
kind = "anthropic"
api_key_file = "{secret}"
headers = {{ "anthropic-beta" = "token-efficient-tools-2025-02-19" }}

[providers.ollama]
kind = "openai"
base_url = "http://127.0.0.1:11434/v1"

[models.gpt-4o-mini]
provider = "openai"
name = "gpt-4o-mini"
structured = "json_schema"
input_usd_per_mtok = 0.15
output_usd_per_mtok = 0.60
max_output_tokens = 16384

[models.claude-haiku]
provider = "anthropic"
name = "claude-haiku-4-5"
input_usd_per_mtok = 1.0
output_usd_per_mtok = 5.0

[models.qwen]
provider = "ollama"
name = "qwen2.5:7b"
structured = "json_object_schema"

[routes.fast]
models = ["gpt-4o-mini", "claude-haiku"]

[circuit]
failure_threshold = 4
cooldown_s = 15
"""

YAML = """
default: fast
providers:
  openai:
    kind: openai
    base_url: https://api.openai.com/v1
    api_key_env: OPENAI_API_KEY
    timeout_s: 60
    max_attempts: 3
  anthropic:
    kind: anthropic
    api_key_file: "{secret}"
    headers:
      anthropic-beta: token-efficient-tools-2025-02-19
  ollama:
    kind: openai
    base_url: http://127.0.0.1:11434/v1
models:
  gpt-4o-mini:
    provider: openai
    name: gpt-4o-mini
    structured: json_schema
    input_usd_per_mtok: 0.15
    output_usd_per_mtok: 0.60
    max_output_tokens: 16384
  claude-haiku:
    provider: anthropic
    name: claude-haiku-4-5
    input_usd_per_mtok: 1.0
    output_usd_per_mtok: 5.0
  qwen:
    provider: ollama
    name: "qwen2.5:7b"
    structured: json_object_schema
routes:
  fast:
    models: [gpt-4o-mini, claude-haiku]
circuit:
  failure_threshold: 4
  cooldown_s: 15
"""

ENV = {"OPENAI_API_KEY": "sk-env-openai-0123456789"}


def write(tmp_path: Path, name: str, text: str) -> str:
    secret = tmp_path / "anthropic.key"
    secret.write_text("sk-ant-file-0123456789\n", encoding="utf-8")
    path = tmp_path / name
    path.write_text(text.replace("{secret}", str(secret)).replace("{{", "{").replace("}}", "}"))
    return str(path)


def assert_full_example(config: ProvidersConfig) -> None:
    assert config.default == "fast"
    assert set(config.providers) == {"openai", "anthropic", "ollama"}
    openai = config.providers["openai"]
    assert openai.api_key is not None
    assert openai.api_key.get_secret_value() == "sk-env-openai-0123456789"
    anthropic = config.providers["anthropic"]
    assert anthropic.api_key is not None
    assert anthropic.api_key.get_secret_value() == "sk-ant-file-0123456789"
    assert anthropic.url == "https://api.anthropic.com"
    assert anthropic.headers == {"anthropic-beta": "token-efficient-tools-2025-02-19"}
    assert config.providers["ollama"].api_key is None
    assert config.models["claude-haiku"].structured == "tool"  # the anthropic default
    assert config.models["qwen"].structured == "json_object_schema"
    assert config.models["gpt-4o-mini"].price is not None
    assert config.routes["fast"].models == ["gpt-4o-mini", "claude-haiku"]
    assert (config.circuit.failure_threshold, config.circuit.cooldown_s) == (4, 15.0)
    assert not config.is_empty()


def test_toml_file_loads_with_keys_from_env_and_secrets_file(tmp_path: Path) -> None:
    assert_full_example(load_providers(ENV, path=write(tmp_path, "providers.toml", TOML)))


def test_yaml_file_loads_to_the_same_config(tmp_path: Path) -> None:
    from_toml = load_providers(ENV, path=write(tmp_path, "p.toml", TOML))
    from_yaml = load_providers(ENV, path=write(tmp_path, "p.yaml", YAML))

    assert_full_example(from_yaml)
    assert from_yaml == from_toml


def test_the_path_comes_from_reprompt_providers(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from app.assembly import providers_config
    from app.settings import Settings

    monkeypatch.setenv("REPROMPT_PROVIDERS", write(tmp_path, "providers.yml", YAML))
    config = providers_config(Settings(), ENV)
    assert "qwen" in config.models


async def test_a_loaded_config_builds_a_router(tmp_path: Path, http: httpx.AsyncClient) -> None:
    config = load_providers(ENV, path=write(tmp_path, "providers.toml", TOML))
    router = build_router(config, http)
    assert router.resolve(None) == ("gpt-4o-mini", "claude-haiku")
    assert router.structured_mode("qwen", "auto") == "json_object"


def test_nothing_configured_is_empty() -> None:
    config = load_providers({})
    assert config.is_empty()
    assert config.default_target() is None


def test_env_vars_alone_create_providers_and_models() -> None:
    config = load_providers(
        {
            "OPENAI_API_KEY": "sk-one-0123456789",
            "ANTHROPIC_API_KEY": "sk-ant-two-0123456789",
            "ANTHROPIC_BASE_URL": "https://proxy.example/anthropic",
            "ANTHROPIC_MODEL": "claude-sonnet-4-5",
        }
    )

    assert config.providers["openai"].url == "https://api.openai.com/v1"
    assert config.models["gpt-4o-mini"].provider == "openai"
    assert config.providers["anthropic"].url == "https://proxy.example/anthropic"
    assert config.models["claude-sonnet-4-5"].structured == "tool"
    assert config.default_target() == "gpt-4o-mini"


def test_an_openai_base_url_alone_configures_a_keyless_server() -> None:
    config = load_providers(
        {"OPENAI_BASE_URL": "http://127.0.0.1:11434/v1", "OPENAI_MODEL": "llama3.2"}
    )
    assert config.providers["openai"].api_key is None
    assert config.models["llama3.2"].name == "llama3.2"


def test_env_vars_do_not_override_a_provider_the_file_configures(tmp_path: Path) -> None:
    path = write(tmp_path, "providers.toml", TOML)
    config = load_providers({**ENV, "OPENAI_MODEL": "gpt-4.1"}, path=path)

    assert "gpt-4.1" not in config.models
    assert config.providers["openai"].base_url == "https://api.openai.com/v1"


def test_with_provider_adds_the_local_model_as_default_when_nothing_else_is_configured() -> None:
    local = ProviderConfig(kind="openai", base_url="http://127.0.0.1:8089/v1")
    config = load_providers({}).with_provider(
        "local", local, {"gemma": ModelConfig(provider="local", structured="json_object_schema")}
    )

    assert not config.is_empty()
    assert config.default_target() == "gemma"
    assert config.models["gemma"].name == "gemma"


def test_with_provider_refuses_a_name_already_taken() -> None:
    config = load_providers(ENV)
    with pytest.raises(InvalidInput) as caught:
        config.with_provider("openai", ProviderConfig(kind="openai"), {})
    assert caught.value.field == "providers.openai"


@pytest.mark.parametrize(
    ("text", "field", "says"),
    [
        (
            '[providers.p]\nkind = "openai"\n[models.m]\nprovider = "p"\nstructured = "xml"',
            "models.m.structured",
            "models.m.structured: Input should be",
        ),
        (
            '[providers.p]\nkind = "gemini"',
            "providers.p.kind",
            "providers.p.kind",
        ),
        (
            '[providers.p]\nkind = "openai"\n[models.m]\nprovider = "p"\nprompt = "tiny"',
            "models.m.prompt",
            "models.m.prompt: Input should be 'full' or 'compact'",
        ),
        (
            '[providers.p]\nkind = "openai"\ntimeout = 5',
            "providers.p.timeout",
            "Extra inputs are not permitted",
        ),
        (
            '[providers.p]\nkind = "openai"\nbase_url = "api.openai.com"',
            "providers.p.base_url",
            "must start with http",
        ),
        (
            '[providers.p]\nkind = "openai"\n[models.m]\nprovider = "q"',
            "models.m.provider",
            "unknown provider 'q'",
        ),
        (
            '[providers.p]\nkind = "anthropic"\n[models.m]\nprovider = "p"\n'
            'structured = "json_schema"',
            "models.m.structured",
            "not available on an anthropic provider",
        ),
        (
            '[providers.p]\nkind = "openai"\n[models.m]\nprovider = "p"\ninput_usd_per_mtok = 1.0',
            "models.m",
            "set both",
        ),
        (
            '[providers.p]\nkind = "openai"\n[models.m]\nprovider = "p"\n'
            '[routes.r]\nmodels = ["m", "x"]',
            "routes.r.models.1",
            "unknown model 'x'",
        ),
        (
            '[providers.p]\nkind = "openai"\n[models.m]\nprovider = "p"\n[routes.r]\nmodels = []',
            "routes.r.models",
            "at least 1 item",
        ),
        (
            'default = "nope"\n[providers.p]\nkind = "openai"',
            "default",
            "neither a configured model nor a route",
        ),
        (
            '[providers.p]\nkind = "openai"\napi_key_env = "MISSING_KEY_VAR"',
            "providers.p.api_key_env",
            "environment variable MISSING_KEY_VAR is not set",
        ),
        (
            '[providers.p]\nkind = "openai"\napi_key_file = "/nonexistent/key"',
            "providers.p.api_key_file",
            "cannot read /nonexistent/key",
        ),
        (
            '[providers.p]\nkind = "openai"\napi_key = "sk-inline-0123456789"',
            "providers.p.api_key",
            "keys are not read from this file",
        ),
        (
            '[providers.p]\nkind = "openai"\nmax_attempts = 0',
            "providers.p.max_attempts",
            "greater than or equal to 1",
        ),
        (
            '[circuit]\nfailure_threshold = "many"',
            "circuit.failure_threshold",
            "circuit.failure_threshold",
        ),
        (
            '[providers.p]\nkind = "openai"\napi_key_env = "K"\napi_key_file = "/k"',
            "providers.p",
            "set api_key_env or api_key_file, not both",
        ),
        ("this is = not [toml", "REPROMPT_PROVIDERS", "not valid TOML"),
    ],
)
def test_a_bad_file_is_invalid_input_naming_the_field(
    tmp_path: Path, text: str, field: str, says: str
) -> None:
    path = tmp_path / "providers.toml"
    path.write_text(text, encoding="utf-8")

    with pytest.raises(InvalidInput) as caught:
        load_providers({}, path=str(path))

    assert caught.value.field == field
    assert says in caught.value.detail
    assert str(path) in caught.value.detail


def test_invalid_yaml_and_unknown_extensions_are_named(tmp_path: Path) -> None:
    bad_yaml = tmp_path / "p.yaml"
    bad_yaml.write_text("providers: [unclosed", encoding="utf-8")
    other = tmp_path / "p.json"
    other.write_text("{}", encoding="utf-8")

    with pytest.raises(InvalidInput, match="not valid YAML"):
        load_providers({}, path=str(bad_yaml))
    with pytest.raises(InvalidInput, match=r"expected a \.toml, \.yaml or \.yml file"):
        load_providers({}, path=str(other))
    with pytest.raises(InvalidInput, match="cannot read it") as caught:
        load_providers({}, path=str(tmp_path / "missing.toml"))
    assert caught.value.field == "REPROMPT_PROVIDERS"


def test_an_empty_secrets_file_is_an_error(tmp_path: Path) -> None:
    key = tmp_path / "key"
    key.write_text("\n", encoding="utf-8")
    path = tmp_path / "p.toml"
    path.write_text(f'[providers.p]\nkind = "openai"\napi_key_file = "{key}"', encoding="utf-8")

    with pytest.raises(InvalidInput, match="is empty") as caught:
        load_providers({}, path=str(path))
    assert caught.value.field == "providers.p.api_key_file"


def test_the_documented_examples_load(tmp_path: Path) -> None:
    doc = (Path(__file__).parents[2] / "docs" / "providers.md").read_text(encoding="utf-8")
    secret = tmp_path / "anthropic.key"
    secret.write_text("sk-ant-doc-0123456789", encoding="utf-8")
    configs = []
    for fence, suffix in (("```toml\n", ".toml"), ("```yaml\n", ".yaml")):
        block = doc.split(fence, 1)[1].split("```", 1)[0]
        path = tmp_path / f"doc{suffix}"
        path.write_text(block.replace("/run/secrets/anthropic", str(secret)), encoding="utf-8")
        configs.append(load_providers(ENV, path=str(path)))

    toml, yaml = configs
    assert toml.default_target() == yaml.default_target() == "fast"
    assert set(toml.models) == set(yaml.models) == {"gpt-4o-mini", "claude-haiku", "qwen"}


def test_a_relative_secrets_file_is_found_next_to_the_providers_file(tmp_path: Path) -> None:
    (tmp_path / "secrets").mkdir()
    (tmp_path / "secrets" / "key").write_text("sk-relative-0123456789\n", encoding="utf-8")
    path = tmp_path / "p.toml"
    path.write_text('[providers.p]\nkind = "openai"\napi_key_file = "secrets/key"', "utf-8")

    key = load_providers({}, path=str(path)).providers["p"].api_key

    assert key is not None
    assert key.get_secret_value() == "sk-relative-0123456789"


PROFILES = """
[providers.p]
kind = "openai"
base_url = "http://127.0.0.1:9/v1"
[models.small]
provider = "p"
structured = "json_object_schema"
prompt = "compact"
[models.tiny]
provider = "p"
structured = "json_object"
prompt = "compact"
[models.big]
provider = "p"
[routes.smalls]
models = ["small", "tiny"]
[routes.mixed]
models = ["small", "big"]
"""


async def test_a_models_prompt_profile_comes_from_the_file(
    tmp_path: Path, http: httpx.AsyncClient
) -> None:
    router = build_router(load_providers({}, path=write(tmp_path, "p.toml", PROFILES)), http)
    assert router.prompt_style("small", "auto") == PromptStyle("compact", schema_enforced=True)
    # json_object without a schema constrains to some JSON only: the prompt must say the schema.
    assert router.prompt_style("tiny", "auto") == PromptStyle("compact", schema_enforced=False)
    assert router.prompt_style("small", "prompt") == PromptStyle("compact", schema_enforced=False)
    assert router.prompt_style("big", "auto") == PromptStyle("full", schema_enforced=True)
    # A route's prompt is written once: compact only if every model is, enforced only if all are.
    assert router.prompt_style("smalls", "auto") == PromptStyle("compact", schema_enforced=False)
    assert router.prompt_style("mixed", "auto") == PromptStyle("full", schema_enforced=True)


def test_the_embedded_model_is_compact_by_default(tmp_path: Path) -> None:
    server = SimpleNamespace(settings=local_model_settings(), base_url="http://127.0.0.1:9/v1")
    config = with_local_model(ProvidersConfig(), server)  # type: ignore[arg-type]
    (model,) = config.models.values()
    assert model.prompt == "compact"
    assert ModelConfig(provider="x").prompt == "full"
