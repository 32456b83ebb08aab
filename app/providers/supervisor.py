"""Keeps the embedded local model answering: a self-test before it counts as ready, crash
detection, restarts with backoff (a bounded number), and a state for ``/readyz``.

    supervisor = Supervisor(LocalModelServer(data_dir))
    await supervisor.start()       # start + self-test; ProviderConfigError saying what to do
    supervisor.problem()           # None when ready, else "local model exited with signal 11
                                   # (SIGSEGV): …; restarting (2 of 5)"
    adapter = SupervisedAdapter(http, supervisor=supervisor, provider="local", config=cfg)
    ...
    await supervisor.stop()

A crash while a request is in flight ends that request with ``ProviderCrashed`` naming the
exit (signal, code, the server's last log lines) and is not retried: the request may be
what killed it. Requests that arrive while the server restarts wait for it (bounded by
their own timeout). When the server crashes more than ``max_restarts`` times within
``window_s`` the supervisor gives up: ``problem()`` says so until the process restarts.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import json
import logging
import time
from collections.abc import Awaitable, Callable
from typing import Any, Final, Literal

import httpx

from app.child import crashed, describe_exit
from app.core.turn.model import LLMRequest, LLMResponse
from app.core.wire.errors import ProviderConfigError, ProviderCrashed, ProviderUnavailable
from app.providers.config import ModelConfig, ProviderConfig
from app.providers.local import PROVIDER, LocalModelServer, rebuild_advice
from app.providers.openai import CHAT_PATH, OpenAIAdapter
from app.providers.structured import Capability

log = logging.getLogger(__name__)

State = Literal["stopped", "starting", "ready", "restarting", "failed"]
Sleep = Callable[[float], Awaitable[None]]

DEFAULT_MAX_RESTARTS: Final = 5
DEFAULT_WINDOW_S: Final = 600.0
DEFAULT_BACKOFF_S: Final = 1.0
MAX_BACKOFF_S: Final = 30.0
START_ATTEMPTS: Final = 3
SELF_TEST_TIMEOUT_S: Final = 60.0
WATCH_INTERVAL_S: Final = 0.25
# After a transport error, how long the server gets to be seen dead (a crash resets the
# connection a moment before the process is reaped).
EXIT_GRACE_S: Final = 1.0
# The longest a request waits for a restarting server before it fails.
MAX_RESTART_WAIT_S: Final = 60.0

# The self-test: one tiny completion constrained by a schema, what every job does.
SELF_TEST_SCHEMA: Final = {
    "type": "object",
    "properties": {"ok": {"type": "boolean"}},
    "required": ["ok"],
}


class SelfTestFailed(Exception):
    """The server answered the self-test, but not with what a working model sends."""


class Supervisor:
    """Owns a ``LocalModelServer``: starts, self-tests, watches and restarts it."""

    def __init__(
        self,
        server: LocalModelServer,
        *,
        max_restarts: int = DEFAULT_MAX_RESTARTS,
        window_s: float = DEFAULT_WINDOW_S,
        backoff_s: float = DEFAULT_BACKOFF_S,
        start_attempts: int = START_ATTEMPTS,
        self_test_timeout_s: float = SELF_TEST_TIMEOUT_S,
        sleep: Sleep = asyncio.sleep,
    ) -> None:
        self.server = server
        self.state: State = "stopped"
        self.restarts = 0
        self.last_exit: str | None = None  # how the server last died, with its last words
        self._max_restarts = max_restarts
        self._window_s = window_s
        self._backoff_s = backoff_s
        self._start_attempts = start_attempts
        self._self_test_timeout_s = self_test_timeout_s
        self._sleep = sleep
        self._crashes: collections.deque[float] = collections.deque()
        self._ready = asyncio.Event()
        self._wake = asyncio.Event()  # a request saw the server die: look now
        self._watcher: asyncio.Task[None] | None = None
        self._exits: dict[int, str] = {}  # generation -> how it ended

    @property
    def generation(self) -> int:
        return self.server.generation

    @property
    def base_url(self) -> str:
        return self.server.base_url

    def problem(self) -> str | None:
        """Why the local model cannot answer now, for ``/readyz``; ``None`` when it can."""
        if self.state == "ready":
            return None
        what = f"local model {self.last_exit}" if self.last_exit else "local model"
        if self.state == "restarting":
            return f"{what}; restarting (restart {self.restarts} of at most {self._max_restarts})"
        if self.state == "failed":
            return f"{what}; gave up after {self.restarts} restarts: {rebuild_advice()}"
        return f"{what} is {self.state}"

    async def start(self) -> None:
        """Start the server and self-test it, trying ``start_attempts`` times in all.

        Raises ``ProviderConfigError`` with what to do when it cannot be made to work.
        """
        self.state = "starting"
        failure: str | None = "did not start"
        for attempt in range(1, self._start_attempts + 1):
            failure = await self._launch()
            if failure is None:
                self._watcher = asyncio.create_task(self._watch(), name="local-model-watch")
                return
            if attempt < self._start_attempts:
                await self._sleep(self._backoff_s * 2 ** (attempt - 1))
        self.state = "failed"
        raise ProviderConfigError(
            f"the local model {failure}", provider=PROVIDER, model=self.server.model_name
        )

    async def stop(self) -> None:
        self.state = "stopped"
        self._ready.clear()
        if self._watcher is not None:
            self._watcher.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._watcher
            self._watcher = None
        await self.server.astop()

    async def wait_ready(self, timeout_s: float) -> bool:
        """Wait until the server is ready; ``False`` on timeout or when the supervisor gave up."""
        if self.state == "ready":
            return True
        if self.state in ("failed", "stopped") or timeout_s <= 0:
            return False
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(timeout_s):
                await self._ready.wait()
        return self._ready.is_set()

    async def exit_of(self, generation: int) -> str | None:
        """How the server of ``generation`` ended, or ``None`` while it is up.

        Waits ``EXIT_GRACE_S`` for a dying process to be reaped.
        """
        deadline = time.monotonic() + EXIT_GRACE_S
        while True:
            if generation in self._exits:
                return self._exits[generation]
            if generation != self.server.generation:
                return "exited"
            report = self.server.exit_report(lines=3)
            if report is not None:
                self._wake.set()
                return report
            if time.monotonic() >= deadline:
                return None
            await asyncio.sleep(0.05)

    # -- inside --------------------------------------------------------------------------

    async def _launch(self) -> str | None:
        """Start the server and self-test it; ``None`` on success, else what went wrong."""
        self._ready.clear()
        try:
            await self.server.astart()
        except ProviderConfigError as exc:
            return exc.detail
        try:
            await self_test(self.server, self._self_test_timeout_s)
        except (httpx.HTTPError, SelfTestFailed, TimeoutError) as exc:
            await asyncio.sleep(0.2)  # let a crash be reaped, so it is reported as one
            report = self.server.exit_report()
            await self.server.astop()
            if report is not None:
                self._log_exit(report, "during its self-test")
                return f"{report} (during its self-test); {rebuild_advice()}"
            return f"failed its self-test ({type(exc).__name__}: {str(exc)[:300]})"
        self.state = "ready"
        self._ready.set()
        log.info("local model ready on %s (self-test passed)", self.server.base_url)
        return None

    async def _watch(self) -> None:
        while True:
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(WATCH_INTERVAL_S):
                    await self._wake.wait()
            self._wake.clear()
            code = self.server.returncode
            if code is None:
                continue
            report = self.server.exit_report() or describe_exit(code)
            self._exits[self.server.generation] = report
            self.last_exit = report
            self.state = "restarting"
            self._ready.clear()
            self._log_exit(report, "", code=code)
            if not await self._restart():
                return

    async def _restart(self) -> bool:
        """Restart with backoff until it works; ``False`` once the budget is spent."""
        while True:
            now = time.monotonic()
            self._crashes.append(now)
            while self._crashes and self._crashes[0] < now - self._window_s:
                self._crashes.popleft()
            if len(self._crashes) > self._max_restarts:
                self.state = "failed"
                log.error(
                    "local model: %d crashes within %.0f s, giving up; /readyz reports it. %s",
                    len(self._crashes),
                    self._window_s,
                    rebuild_advice(),
                )
                return False
            self.state = "restarting"
            self.restarts += 1
            wait_s = min(self._backoff_s * 2 ** (len(self._crashes) - 1), MAX_BACKOFF_S)
            log.warning("local model: restart %d in %.1f s", self.restarts, wait_s)
            await self._sleep(wait_s)
            failure = await self._launch()
            if failure is None:
                return True
            self.last_exit = failure

    def _log_exit(self, report: str, when: str, *, code: int | None = None) -> None:
        # One line that says what happened and what to do; the log tail is in /readyz.
        first = report.split("; its last words", 1)[0]
        if code is None or crashed(code) or when:
            advice = rebuild_advice()
        else:
            advice = f"see {self.server.log_path} (killed for memory? check `dmesg`)"
        log.error("local model %s%s. %s", first, f" {when}" if when else "", advice)


async def self_test(server: LocalModelServer, timeout_s: float) -> None:
    """One tiny schema-constrained completion; raises unless it is valid JSON of the schema."""
    body: dict[str, Any] = {
        "model": server.model_name,
        "messages": [{"role": "user", "content": 'Reply {"ok": true}.'}],
        "max_tokens": 16,
        "temperature": 0,
        "response_format": {"type": "json_object", "schema": SELF_TEST_SCHEMA},
    }
    async with (
        asyncio.timeout(timeout_s),
        httpx.AsyncClient(timeout=timeout_s, trust_env=False) as http,
    ):
        response = await http.post(
            server.base_url + CHAT_PATH, json=body, headers=server.auth_headers()
        )
    if response.status_code != 200:
        raise SelfTestFailed(f"HTTP {response.status_code}: {response.text[:200]}")
    try:
        content = response.json()["choices"][0]["message"]["content"]
        answer = json.loads(content)
    except (ValueError, KeyError, IndexError, TypeError) as exc:
        raise SelfTestFailed(f"not a JSON answer: {response.text[:200]}") from exc
    if not isinstance(answer, dict) or not isinstance(answer.get("ok"), bool):
        raise SelfTestFailed(f"answer does not fit the schema: {content[:200]}")


class SupervisedAdapter(OpenAIAdapter):
    """The OpenAI-compatible adapter for the supervised server, wherever it runs.

    It waits out restarts and names a crash instead of "connection refused".
    """

    supports_n = False  # llama.cpp's server answers one choice per request

    def __init__(
        self,
        http: httpx.AsyncClient,
        *,
        supervisor: Supervisor,
        provider: str,
        config: ProviderConfig,
    ) -> None:
        super().__init__(http, provider=provider, config=config)
        self._supervisor = supervisor

    def url(self) -> str:
        return self._supervisor.base_url + self.path

    def api_key(self) -> str | None:
        return self._supervisor.server.api_key

    async def send(
        self,
        request: LLMRequest,
        *,
        model: str,
        spec: ModelConfig,
        mechanism: Capability,
        timeout_s: float,
    ) -> LLMResponse:
        supervisor = self._supervisor
        if not await supervisor.wait_ready(min(timeout_s, MAX_RESTART_WAIT_S)):
            raise ProviderUnavailable(
                supervisor.problem() or "the local model is not running",
                provider=self._provider,
                model=model,
            )
        generation = supervisor.generation
        try:
            return await super().send(
                request, model=model, spec=spec, mechanism=mechanism, timeout_s=timeout_s
            )
        except ProviderUnavailable as exc:
            report = await supervisor.exit_of(generation)
            if report is None:
                raise
            raise ProviderCrashed(
                f"the local model {report} (during this request)",
                provider=self._provider,
                model=model,
            ) from exc
