"""The console's assets ship in the wheel: a service installed from it serves them."""

from __future__ import annotations

import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from app.console import STATIC

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.slow
def test_the_wheel_holds_the_templates_the_assets_and_their_licences(tmp_path: Path) -> None:
    subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--no-deps", "-q", "-w", str(tmp_path), str(ROOT)],
        check=True,
        capture_output=True,
        timeout=300,
    )
    (wheel,) = tmp_path.glob("reprompt-*.whl")
    names = set(zipfile.ZipFile(wheel).namelist())
    assets = [p for p in STATIC.rglob("*") if p.is_file()]
    assets += [p for p in (STATIC.parent / "templates").glob("*.html")]
    assert len(assets) > 10
    missing = [p.relative_to(ROOT).as_posix() for p in assets]
    missing = [name for name in missing if name not in names]
    assert missing == []
    assert "app/console/static/vendor/LICENSE.htmx.txt" in names
