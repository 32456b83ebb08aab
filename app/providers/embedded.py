"""The model client a process runs with: the configured providers, else the local model.

    async with open_router(clients, data_dir=settings.data_dir, config=config) as router:
        await run_job(spec, Runtime(client=router))

``clients``: one ``httpx.AsyncClient``, or ``open_clients``' (the local model is called
through their ``direct`` one: it listens on loopback, never behind a proxy).

With no provider configured (no ``REPROMPT_PROVIDERS``, no ``OPENAI_API_KEY`` or
``ANTHROPIC_API_KEY``) the llama.cpp server from the ``local`` extra is started as a
managed subprocess and becomes the default model; without that extra the operator is
told what to configure.
"""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

import httpx

from app.core.wire.errors import ProviderConfigError
from app.providers.config import ModelConfig, ProviderConfig, ProvidersConfig
from app.providers.http import ProviderClients
from app.providers.local import LocalModelServer, explain_missing, local_available
from app.providers.retry import OnRetry
from app.providers.router import Adapter, Health, Router, build_router
from app.providers.supervisor import SupervisedAdapter, Supervisor
from app.tracing import Tracing

log = logging.getLogger(__name__)

LOCAL_PROVIDER = "local"


@asynccontextmanager
async def open_router(
    http: httpx.AsyncClient | ProviderClients,
    *,
    data_dir: Path,
    config: ProvidersConfig,
    on_retry: OnRetry | None = None,
    local: Supervisor | None = None,
    tracing: Tracing | None = None,
) -> AsyncIterator[Router]:
    """A router over the configured providers, or over a managed local model.

    The local model is self-tested before this yields and supervised while it runs;
    ``router.problem()`` says when it is down. ``local`` replaces the default supervised
    server (tests); ``on_retry`` and ``tracing`` are ``build_router``'s.
    """
    supervisor: Supervisor | None = None
    adapters: dict[str, Adapter] = {}
    health: dict[str, Health] = {}
    if config.is_empty():
        if local is None and not local_available():
            raise ProviderConfigError(explain_missing(), provider=LOCAL_PROVIDER)
        supervisor = Supervisor(LocalModelServer(data_dir)) if local is None else local
        server = supervisor.server
        log.info("no provider configured: starting the local llama.cpp model")
        try:
            await supervisor.start()
        except BaseException:
            await supervisor.stop()
            raise
        config = with_local_model(config, server)
        adapters[LOCAL_PROVIDER] = SupervisedAdapter(
            http.direct if isinstance(http, ProviderClients) else http,
            supervisor=supervisor,
            provider=LOCAL_PROVIDER,
            config=config.providers[LOCAL_PROVIDER],
        )
        health[LOCAL_PROVIDER] = supervisor.problem
    try:
        yield build_router(
            config, http, on_retry=on_retry, adapters=adapters, health=health, tracing=tracing
        )
    finally:
        if supervisor is not None:
            await supervisor.stop()


def with_local_model(config: ProvidersConfig, server: LocalModelServer) -> ProvidersConfig:
    """``config`` plus the running local server as provider ``local`` and default model."""
    settings = server.settings
    model = ModelConfig(
        provider=LOCAL_PROVIDER,
        name=settings.name,
        structured=settings.structured,
        input_usd_per_mtok=settings.input_usd_per_mtok,
        output_usd_per_mtok=settings.output_usd_per_mtok,
        max_output_tokens=settings.max_output_tokens,
        strict=False,
        system_role=False,
        tools=False,
        prompt=settings.prompt,
        grammar=True,  # numbers' digits bounded in the grammar: no runaway digits
    )
    provider = ProviderConfig(
        kind="openai", base_url=server.base_url, max_attempts=2, batch_api=False
    )
    return config.with_provider(LOCAL_PROVIDER, provider, {settings.name: model}, default=True)
