"""docs/architecture.md names only paths that exist: a renamed module fails here first."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
DOC = ROOT / "docs" / "architecture.md"
# A backticked file or folder: `core/turn/loop.py`, `worker/`, `lua/submit.lua`, `jobs.py`.
PATH = re.compile(r"`([\w./*-]+?(?:/|\.py|\.lua|\.md|\.mustache))`")


def named_paths() -> list[str]:
    return sorted(set(PATH.findall(DOC.read_text())))


def exists(name: str) -> bool:
    if "/" not in name.rstrip("/"):  # a bare name: somewhere under app/ (or the top folder)
        bare = name.rstrip("/")
        return (ROOT / bare).exists() or any((ROOT / "app").rglob(bare))
    bases = (ROOT, ROOT / "app", ROOT / "app" / "core", ROOT / "app" / "store")
    return any(list(base.glob(name.rstrip("/"))) for base in bases)


def test_the_architecture_map_names_only_paths_that_exist() -> None:
    names = named_paths()
    assert len(names) > 60  # the map still names the tree
    assert [name for name in names if not exists(name)] == []


def test_the_check_catches_a_path_that_is_gone() -> None:
    assert not exists("core/turn/loopy.py")
    assert not exists("delivery.py")
    assert not exists("lean.py")
