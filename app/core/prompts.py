"""Model-facing text: Mustache templates from ``prompts/``, rendered without HTML escaping.

The only module that imports the Mustache library::

    text = render("retry_feedback", {"first": True, "diagnosis": "...", "excerpt": None})
"""

from __future__ import annotations

from collections.abc import Mapping
from functools import cache
from pathlib import Path
from typing import Any

import pystache

from app.core.errors import InvalidInput

_HERE = Path(__file__).resolve().parent


def _prompt_dir() -> Path:
    # An installed wheel carries the templates inside the package; a checkout keeps them at the top.
    for candidate in (_HERE.parent / "_prompts", _HERE.parent.parent / "prompts"):
        if candidate.is_dir():
            return candidate
    raise RuntimeError("reprompt's prompts/ directory is missing from this installation")


@cache
def template(name: str) -> str:
    """The raw text of ``prompts/<name>.mustache``."""
    return (_prompt_dir() / f"{name}.mustache").read_text(encoding="utf-8")


def _identity(text: str) -> str:
    return text


class _Partials:
    def get(self, name: str) -> str:
        return template(name)


_STRICT = pystache.Renderer(escape=_identity, partials=_Partials(), missing_tags="strict")
_LENIENT = pystache.Renderer(escape=_identity, partials=_Partials(), missing_tags="ignore")


def render(name: str, context: Mapping[str, Any]) -> str:
    """Render a shipped template; a key it names but ``context`` lacks is a bug, so it raises."""
    return _tidy(_STRICT.render(template(name), dict(context)))


def render_custom(source: str, context: Mapping[str, Any]) -> str:
    """Render a client's template (``retryPrompt``); unknown keys render empty."""
    return _tidy(_LENIENT.render(source, dict(context)))


def check_custom(source: str, *, field: str) -> None:
    """Reject a client template that does not parse, naming the field."""
    try:
        pystache.parse(source)
    except Exception as exc:  # pystache raises ParsingError and plain ValueErrors
        raise InvalidInput(f"{field}: not a valid Mustache template: {exc}", field=field) from exc


def _tidy(text: str) -> str:
    # Sections leave blank lines where they are off; keep at most one in a row.
    lines = text.strip("\n").split("\n")
    out: list[str] = []
    for line in lines:
        if not line.strip() and out and not out[-1].strip():
            continue
        out.append(line.rstrip())
    return "\n".join(out).strip("\n")
