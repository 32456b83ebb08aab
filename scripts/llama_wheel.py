"""Build llama-cpp-python portably, once, and install exactly that build.

``pip install llama-cpp-python`` compiles llama.cpp from source with ``GGML_NATIVE=ON``:
the library then uses every instruction the *build* host has (AVX-512, AMX, ...). Such a
build crashed with SIGSEGV on an Intel Xeon with AMX, and a wheel built that way sits in
pip's cache and is silently reused by the next install, whatever ``CMAKE_ARGS`` says.

This script builds the version pinned in ``requirements.lock`` with ``GGML_NATIVE=OFF``
(ggml then enables the x86-64 levels every server of the last decade has: SSE4.2, AVX,
AVX2, FMA, F16C, BMI2) into a cache directory whose name is a digest of the version,
the CMake arguments, the Python tag and the machine, so a wheel built with other
settings is never picked up. pip's own wheel cache is not used (``--no-cache-dir``)::

    python scripts/llama_wheel.py                 # build if needed, print the wheel's path
    python scripts/llama_wheel.py --install       # ... and install it into this Python
    LLAMA_CMAKE_ARGS="-DGGML_NATIVE=ON" python scripts/llama_wheel.py --install

``--install`` replaces an installed llama-cpp-python that did not come from that wheel
(for instance a native build from pip's cache) and leaves it alone otherwise.
The cache is ``$LLAMA_WHEEL_CACHE``, else ``$XDG_CACHE_HOME/reprompt/wheels``, else
``~/.cache/reprompt/wheels``.
"""

from __future__ import annotations

import argparse
import contextlib
import fcntl
import hashlib
import importlib.metadata
import json
import os
import platform
import re
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
LOCK = ROOT / "requirements.lock"
DIST = "llama-cpp-python"
PORTABLE = "-DGGML_NATIVE=OFF"


def pinned_version(lock: Path) -> str:
    match = re.search(r"^llama-cpp-python==([^\s;]+)", lock.read_text(), re.MULTILINE)
    if match is None:
        raise SystemExit(f"{lock} does not pin {DIST}")
    return match.group(1)


def cache_root() -> Path:
    if configured := os.environ.get("LLAMA_WHEEL_CACHE"):
        return Path(configured).expanduser()
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "reprompt" / "wheels"


def build_dir(version: str, cmake_args: str) -> Path:
    tag = f"cp{sys.version_info.major}{sys.version_info.minor}"
    key = f"{version}|{cmake_args}|{tag}|{platform.machine()}"
    digest = hashlib.sha256(key.encode()).hexdigest()[:16]
    return cache_root() / f"{DIST}-{version}-{digest}"


def find_wheel(directory: Path) -> Path | None:
    wheels = sorted(directory.glob("llama_cpp_python-*.whl"))
    return wheels[0] if wheels and (directory / "build.json").is_file() else None


def build(version: str, cmake_args: str) -> Path:
    target = build_dir(version, cmake_args)
    target.parent.mkdir(parents=True, exist_ok=True)
    with open(target.parent / ".lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # a concurrent build of the same key waits for ours
        if (wheel := find_wheel(target)) is not None:
            return wheel
        print(
            f"building {DIST}=={version} with CMAKE_ARGS={cmake_args!r} "
            "(about 6-7 minutes on 2 cores, once)",
            file=sys.stderr,
        )
        began = time.monotonic()
        with tempfile.TemporaryDirectory(dir=target.parent, prefix=".build-") as tmp:
            env = {**os.environ, "CMAKE_ARGS": cmake_args, "FORCE_CMAKE": "1"}
            subprocess.run(
                [
                    sys.executable, "-m", "pip", "wheel", "--quiet",
                    "--no-deps", "--no-cache-dir", "--no-binary", DIST,
                    "--wheel-dir", tmp, f"{DIST}=={version}",
                ],
                env=env,
                check=True,
            )  # fmt: skip
            (Path(tmp) / "build.json").write_text(
                json.dumps(
                    {
                        "version": version,
                        "cmake_args": cmake_args,
                        "python": sys.version.split()[0],
                        "machine": platform.machine(),
                        "built_on": platform.node(),
                        "seconds": round(time.monotonic() - began),
                    },
                    indent=1,
                )
            )
            with contextlib.suppress(FileNotFoundError):
                shutil.rmtree(target)
            os.replace(tmp, target)
            # TemporaryDirectory's cleanup must not fail on the moved directory.
            Path(tmp).mkdir()
        wheel = find_wheel(target)
        if wheel is None:
            raise SystemExit(f"the build left no wheel in {target}")
        return wheel


def installed_from(wheel: Path) -> bool:
    """Whether the installed distribution was installed from exactly ``wheel``."""
    try:
        dist = importlib.metadata.distribution(DIST)
    except importlib.metadata.PackageNotFoundError:
        return False
    direct = dist.read_text("direct_url.json")
    if not direct:
        return False  # from an index or pip's cache: possibly a native build
    url = json.loads(direct).get("url", "")
    return bool(url == wheel.resolve().as_uri())


def install(wheel: Path) -> None:
    if installed_from(wheel):
        return
    subprocess.run(
        [
            sys.executable, "-m", "pip", "install", "--quiet",
            "--no-deps", "--force-reinstall", "--no-cache-dir", str(wheel),
        ],
        check=True,
    )  # fmt: skip
    print(f"installed {wheel.name} from {wheel.parent}", file=sys.stderr)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--lock", type=Path, default=LOCK)
    parser.add_argument(
        "--cmake-args",
        default=os.environ.get("LLAMA_CMAKE_ARGS") or PORTABLE,
        help=f"CMake arguments for llama.cpp (LLAMA_CMAKE_ARGS, default {PORTABLE!r})",
    )
    parser.add_argument("--install", action="store_true", help="install it into this Python")
    args = parser.parse_args()
    wheel = build(pinned_version(args.lock), args.cmake_args.strip())
    if args.install:
        install(wheel)
    print(wheel)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
