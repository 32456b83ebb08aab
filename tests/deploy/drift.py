"""What the deployment files may name, read from the product itself, so they cannot drift.

Helpers for every test of the files under deploy/ and docker-compose.yml (compose and
Kubernetes alike); each reads the code, never a copied list::

    cli_subcommands()            {"serve", "api", "worker", "sim", ...}: ``reprompt COMMAND``
    parse_command(["api"])       argparse's verdict on a whole ``reprompt ...`` command line
    setting_env_names()          every REPROMPT_* variable app/settings.py reads (aliases too)
    provider_env_names()         OPENAI_API_KEY, ANTHROPIC_MODEL, ... (app/providers/config.py)
    setting_default("port")      a setting's default (8080)
    interpolate(text, env)       Compose's ${VAR}, ${VAR:-default}, ${VAR-default}, $$
    load_compose(env={})         docker-compose.yml as Compose reads it, variables resolved
    promql_metric_names(expr)    the metric names a PromQL expression reads
    dashboard_exprs(dashboard)   every panel's PromQL (rows and nested panels included)
    live_metric_names(text)      every sample name a /metrics body can carry, its families'
                                 suffixes included (_total, _bucket, _sum, _count, _created)
"""

from __future__ import annotations

import re
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import yaml
from prometheus_client.parser import text_string_to_metric_families
from pydantic import AliasChoices

from app.cli import _parser
from app.providers.config import _ENV_PROVIDERS
from app.settings import Settings

ROOT = Path(__file__).resolve().parents[2]
COMPOSE_FILE = ROOT / "docker-compose.yml"
DOCKERFILE = ROOT / "Dockerfile"


# -- the command line -------------------------------------------------------------------------


def cli_subcommands() -> set[str]:
    """The subcommands ``reprompt`` knows (``reprompt --help``)."""
    parser = _parser()
    for action in parser._actions:
        choices = getattr(action, "choices", None)
        if isinstance(choices, dict):
            return set(choices)
    raise AssertionError("reprompt has no subcommands")


def parse_command(argv: list[str]) -> str | None:
    """Why ``reprompt *argv`` would be refused by its argument parser, or None if accepted.
    ``reprompt sim ...`` is checked by the simulator's own parser, as the CLI hands it over."""
    from reprompt_sim.__main__ import build_parser

    parser = build_parser() if argv[:1] == ["sim"] else _parser()
    args = argv[1:] if argv[:1] == ["sim"] else argv
    try:
        parser.parse_args(args)
    except SystemExit as exc:
        return f"reprompt {' '.join(argv)}: refused (exit {exc.code})"
    return None


# -- settings and the provider variables ------------------------------------------------------


def setting_env_names() -> set[str]:
    """Every environment variable ``Settings`` reads: ``REPROMPT_<FIELD>`` or its aliases."""
    prefix = str(Settings.model_config.get("env_prefix", ""))
    names: set[str] = set()
    for field, info in Settings.model_fields.items():
        alias = info.validation_alias
        if isinstance(alias, AliasChoices):
            names.update(str(choice) for choice in alias.choices)
        elif isinstance(alias, str):
            names.add(alias)
        else:
            names.add(f"{prefix}{field}".upper())
    return names


def provider_env_names() -> set[str]:
    """The provider variables ``load_providers`` reads besides the providers file."""
    names = {"REPROMPT_PROVIDERS"}
    for _name, _kind, key_var, url_var, model_var, _model in _ENV_PROVIDERS:
        names.update((key_var, url_var, model_var))
    return names


def setting_default(field: str) -> Any:
    """A setting's default value (``setting_default("port") == 8080``)."""
    return Settings.model_fields[field].get_default(call_default_factory=True)


# -- Compose --------------------------------------------------------------------------------

_VARIABLE = re.compile(
    r"\$\$|\$\{(?P<name>[A-Za-z_][A-Za-z0-9_]*)(?:(?P<op>:?-)(?P<default>[^}]*))?\}"
)


def interpolate(text: str, env: Mapping[str, str]) -> str:
    """Compose's variable interpolation: ``${VAR}``, ``${VAR:-default}`` (unset or empty),
    ``${VAR-default}`` (unset), ``$$`` for a literal ``$``. Other forms are refused."""

    def value(match: re.Match[str]) -> str:
        if match.group(0) == "$$":
            return "$"
        name, op, default = match.group("name"), match.group("op"), match.group("default")
        current = env.get(name)
        if op == ":-":
            return current if current else default
        if op == "-":
            return current if current is not None else default
        return current or ""

    return _VARIABLE.sub(value, text)


def compose_variables(text: str) -> dict[str, str | None]:
    """The variables a compose file interpolates, with their defaults (None: no default)."""
    found: dict[str, str | None] = {}
    for match in _VARIABLE.finditer(text):
        if match.group("name"):
            found.setdefault(match.group("name"), match.group("default"))
    return found


def load_compose(env: Mapping[str, str] | None = None, path: Path = COMPOSE_FILE) -> Any:
    """The compose file as Compose reads it, ``env`` (default: none set) interpolated."""
    text = path.read_text(encoding="utf-8")
    return yaml.safe_load(interpolate(text, env or {}))


def environment(service: Mapping[str, Any]) -> dict[str, str]:
    """A service's ``environment`` as a dict (Compose takes a mapping or ``KEY=VALUE`` list)."""
    raw = service.get("environment") or {}
    if isinstance(raw, list):
        return dict(str(item).partition("=")[::2] for item in raw)
    return {str(k): "" if v is None else str(v) for k, v in raw.items()}


def command(service: Mapping[str, Any]) -> list[str]:
    """A service's ``command`` as a list of arguments."""
    raw = service.get("command") or []
    return raw.split() if isinstance(raw, str) else [str(part) for part in raw]


# -- Prometheus and Grafana -------------------------------------------------------------------

_PROMQL_WORDS = {
    "by", "without", "on", "ignoring", "group_left", "group_right", "bool", "and", "or",
    "unless", "offset", "inf", "nan",
}  # fmt: skip
_STRING = re.compile(r'"(?:[^"\\]|\\.)*"|\'(?:[^\'\\]|\\.)*\'')
_GROUPING = re.compile(r"\b(?:by|without|on|ignoring|group_left|group_right)\s*\([^)]*\)")
_IDENTIFIER = re.compile(r"(?<![\w:$.])([A-Za-z_:][\w:]*)(?!\w)(\s*\()?")


def promql_metric_names(expr: str) -> set[str]:
    """The metric names ``expr`` selects: identifiers that are not functions, keywords,
    label names (inside ``{...}`` or ``by (...)``), durations or Grafana's ``$__`` variables."""
    text = _STRING.sub('""', expr)
    text = re.sub(r"\{[^}]*\}", "", text)  # label matchers
    text = re.sub(r"\[[^\]]*\]", "", text)  # range and subquery selectors
    text = _GROUPING.sub("", text)
    names = set()
    for match in _IDENTIFIER.finditer(text):
        name, call = match.group(1), match.group(2)
        if call or name.lower() in _PROMQL_WORDS:
            continue
        names.add(name)
    return names


def dashboard_exprs(dashboard: Mapping[str, Any]) -> list[str]:
    """Every PromQL expression of a Grafana dashboard, rows' nested panels included."""

    def panels(items: list[Any]) -> Iterator[Mapping[str, Any]]:
        for panel in items:
            yield panel
            yield from panels(panel.get("panels") or [])

    return [
        str(target["expr"])
        for panel in panels(dashboard.get("panels") or [])
        for target in panel.get("targets") or []
        if target.get("expr")
    ]


_SUFFIXES = {
    "counter": ("_total", "_created"),
    "histogram": ("_bucket", "_sum", "_count", "_created"),
    "summary": ("", "_sum", "_count", "_created"),
    "gauge": ("",),
    "info": ("_info",),
    "stateset": ("",),
    "gaugehistogram": ("_bucket", "_gsum", "_gcount"),
    "unknown": ("",),
}


def live_metric_names(text: str) -> set[str]:
    """Every sample name a /metrics body (Prometheus text format) can carry: its samples'
    names, and for each family the names its type implies, so a labelled counter that has
    not counted anything yet still names ``<family>_total`` (and a counter's bare family
    name, which no series has, is not one)."""
    names: set[str] = set()
    for family in text_string_to_metric_families(text):
        names.update(f"{family.name}{suffix}" for suffix in _SUFFIXES.get(family.type, ("",)))
        names.update(sample.name for sample in family.samples)
    return names
