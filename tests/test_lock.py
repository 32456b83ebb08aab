"""requirements.lock pins every dependency pyproject.toml names, inside pyproject's ranges,
and the install path builds llama-cpp-python from that pin (scripts/llama_wheel.py)."""

from __future__ import annotations

import re
import sys
import tomllib
from pathlib import Path

from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

ROOT = Path(__file__).resolve().parents[1]


def _locked() -> dict[str, str]:
    pins: dict[str, str] = {}
    for line in (ROOT / "requirements.lock").read_text().splitlines():
        match = re.match(r"^([A-Za-z0-9_.\-]+)==([^\s;#]+)", line)
        if match:
            pins[canonicalize_name(match.group(1))] = match.group(2)
    return pins


def _declared() -> list[Requirement]:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    names = list(project["dependencies"])
    for extra in project["optional-dependencies"].values():
        names.extend(extra)
    return [Requirement(name) for name in names]


def test_every_declared_dependency_is_locked_inside_its_range() -> None:
    locked = _locked()
    for requirement in _declared():
        name = canonicalize_name(requirement.name)
        assert name in locked, f"{name} is not in requirements.lock: run `make lock`"
        assert requirement.specifier.contains(locked[name], prereleases=True), (
            f"{name}=={locked[name]} is outside {requirement.specifier}: run `make lock`"
        )


def test_the_llama_wheel_is_built_from_the_locked_version_and_keyed_by_its_settings() -> None:
    sys.path.insert(0, str(ROOT / "scripts"))
    try:
        import llama_wheel
    finally:
        sys.path.pop(0)
    version = llama_wheel.pinned_version(ROOT / "requirements.lock")
    assert version == _locked()["llama-cpp-python"]
    portable = llama_wheel.build_dir(version, llama_wheel.PORTABLE)
    native = llama_wheel.build_dir(version, "-DGGML_NATIVE=ON")
    assert portable != native  # a wheel built with other settings is never picked up
    assert llama_wheel.PORTABLE == "-DGGML_NATIVE=OFF"
    makefile = (ROOT / "Makefile").read_text()
    assert "scripts/llama_wheel.py --install" in makefile
    assert "-c $(LOCK)" in makefile
