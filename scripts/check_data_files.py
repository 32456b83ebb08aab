"""Fail when a TOML, YAML or JSON file does not parse (a pre-commit hook; no network).

python scripts/check_data_files.py pyproject.toml openapi/openapi.json ...
"""

from __future__ import annotations

import json
import sys
import tomllib
from pathlib import Path

import yaml


def problem(path: Path) -> str | None:
    """Why ``path`` does not parse, or None when it does."""
    try:
        if path.suffix == ".toml":
            tomllib.loads(path.read_text(encoding="utf-8"))
        elif path.suffix in (".yaml", ".yml"):
            list(yaml.safe_load_all(path.read_text(encoding="utf-8")))
        elif path.suffix == ".json":
            json.loads(path.read_text(encoding="utf-8"))
    except (ValueError, yaml.YAMLError) as exc:  # JSONDecodeError, TOMLDecodeError, Unicode
        return f"{type(exc).__name__}: {exc}"
    return None


def main(paths: list[str]) -> int:
    failed = 0
    for name in paths:
        why = problem(Path(name))
        if why is not None:
            print(f"{name}: {why}", file=sys.stderr)
            failed += 1
    return 1 if failed else 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
