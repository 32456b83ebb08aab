"""The core stays pure: no web framework, Redis, HTTP client or retry library in app/core."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

CORE = Path(__file__).resolve().parents[2] / "app" / "core"
FORBIDDEN = {
    "fastapi",
    "starlette",
    "redis",
    "httpx",
    "aiohttp",
    "uvicorn",
    "tenacity",
    "prometheus_client",
    "opentelemetry",
}


def imported_roots(path: Path) -> set[str]:
    roots: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            roots.update(alias.name.split(".")[0] for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            roots.add(node.module.split(".")[0])
    return roots


@pytest.mark.parametrize(
    "path", sorted(CORE.rglob("*.py")), ids=lambda p: p.relative_to(CORE).as_posix()
)
def test_core_module_imports_no_io_library(path: Path) -> None:
    assert imported_roots(path) & FORBIDDEN == set()


def test_core_has_no_module_at_its_top_but_its_init() -> None:
    assert sorted(p.name for p in CORE.glob("*.py")) == ["__init__.py"]


def test_no_prompt_prose_outside_templates() -> None:
    # Every model-facing sentence lives in prompts/*.mustache; spot-check the loop's modules.
    for name in ("turn/loop.py", "answer/feedback.py", "turn/conversation.py"):
        text = (CORE / name).read_text(encoding="utf-8")
        assert "You MUST" not in text
        assert "Your previous answer" not in text
