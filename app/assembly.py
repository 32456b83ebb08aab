"""The one place that assembles a process from ``Settings``: Redis, the store's two roles,
the httpx client, the providers and their router, the worker, the API.

    app = api_app(settings)                          # reprompt api: workers run elsewhere
    app = api_app(settings, embedded_worker=True)    # reprompt serve: one process does all
    exit_code = run_worker(settings)                 # reprompt worker

Start-up, in order: the embedded redis-server when no Redis URL is set (``serve`` only; AOF
in the data dir, so queued jobs survive a restart); one Redis pool and the store (a Redis
whose ``maxmemory-policy`` may evict live jobs stops the process here); the providers
configuration, read once (``REPROMPT_PROVIDERS`` and the provider variables); one
``httpx.AsyncClient`` per proxy the providers go through; the router (the configured
providers, else the supervised local model); the worker. Shutdown runs the same list
backwards: the worker drains first, Redis stops last.

When no provider can be configured an API still starts, so operators can see why:
``/readyz`` answers 503 naming what to configure, and submissions get the same 503. A
worker without a provider exits with status 2. A providers file that is present but wrong
stops either: a typo should not turn into a running service that refuses every job.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import math
import os
import signal
from collections.abc import AsyncIterator, Coroutine, Mapping
from contextlib import AsyncExitStack, asynccontextmanager
from dataclasses import dataclass
from typing import Any

from fastapi import FastAPI
from pydantic import ValidationError

from app import logs, metrics
from app.api.app import create_app
from app.api.fairness import Fairness
from app.api.resources import Resources
from app.batches.runner import BatchRunner
from app.core.wire.errors import ProviderConfigError, RepromptError
from app.outbound import (
    Allowlist,
    Guard,
    OutboundClient,
    OutboundPolicy,
    Signer,
    ToolSecrets,
    load_signing_key,
)
from app.outbound.kit import Outbound
from app.outbound.webhooks import parse_tenant_secrets
from app.providers.config import ProvidersConfig, load_providers
from app.providers.embedded import LOCAL_PROVIDER, open_router
from app.providers.http import DEFAULT_MAX_CONNECTIONS, open_clients
from app.providers.router import Router
from app.redis_server import EmbeddedRedis
from app.settings import Settings, invalid_settings, is_loopback
from app.store import JobStore, Leases, StoreOptions, connect
from app.store.batches import BatchStore
from app.store.connection import RedisClient
from app.store.eviction import eviction_policy, judge
from app.store.quotas import Quotas
from app.tracing import Tracing, open_tracing
from app.worker import Worker

log = logging.getLogger(__name__)

# A worker's metrics port is the first free one of REPROMPT_WORKER_METRICS_PORT and the
# next 31, so up to 32 workers on one host get predictable ports; more get any free one.
METRICS_PORT_SPAN = 32
# How long a worker's Redis command may wait for a free connection of its pool.
WORKER_REDIS_QUEUE_S = 30.0
# How often a worker copies its circuit breakers' states into its /metrics gauges.
CIRCUIT_GAUGES_S = 5.0


@dataclass(frozen=True, slots=True)
class Parts:
    """What one process runs on, built once and closed on exit."""

    settings: Settings
    redis: RedisClient  # the API's pool (the worker has its own)
    jobs: JobStore
    leases: Leases
    router: Router | None  # None: no provider could be configured (``provider_problem``)
    provider_problem: str | None
    model_providers: Mapping[str, str]  # model name → provider name
    outbound: Outbound  # HTTP tools and callbacks: the guard, its client, the signer
    tracing: Tracing | None  # None: traces off (no OTEL_* variables ask for them)


def store_options(settings: Settings) -> StoreOptions:
    """The store's options these settings imply (API and workers alike).

    Per-tenant caps are kept per shard (a tenant's jobs spread evenly): each gets its share.
    """
    shards = settings.shards
    return StoreOptions(
        prefix=settings.key_prefix,
        shards=shards,
        lease_ms=settings.lease_ms,
        max_attempts=settings.max_attempts,
        retention_s=settings.retention_s,
        idempotency_ttl_s=settings.idempotency_ttl_s,
        max_queued=math.ceil(settings.max_queued / shards),
        max_tenant_bytes=math.ceil(settings.max_tenant_bytes / shards),
        max_in_flight=math.ceil(settings.max_in_flight_per_tenant / shards),
        max_job_s=math.ceil(settings.max_deadline_ms / 1000),
        callback_window_s=settings.callback_retry_window_s,
    )


def providers_config(
    settings: Settings, environ: Mapping[str, str] = os.environ, *, keys: bool = True
) -> ProvidersConfig:
    """The providers file and the provider variables, read once for the process.

    Without ``keys`` the providers' keys are not read (``load_providers``).
    """
    path = None if settings.providers_file is None else str(settings.providers_file)
    return load_providers(environ, path=path, keys=keys)


@asynccontextmanager
async def open_parts(
    settings: Settings,
    *,
    providers: ProvidersConfig | None = None,
    embedded_redis: bool = False,
    provider_required: bool = False,
    tracing: Tracing | None = None,
    keys: bool = True,
) -> AsyncIterator[Parts]:
    """Build every resource of a process, closed in reverse order on exit.

    ``providers`` replaces the configuration and ``tracing`` the one the ``OTEL_*``
    variables configure (its owner closes it): tests and embedding processes.
    ``embedded_redis``: start a managed redis-server when no Redis URL is set (the API
    does; a worker must be given a URL). ``provider_required``: a missing provider raises
    instead of being reported. ``keys=False``: the process makes no model call, so the
    providers' keys are not read (an API without a worker).
    """
    async with AsyncExitStack() as stack:
        if tracing is None:
            tracing = open_tracing()
            if tracing is not None:  # the last to close: every span of the process ended
                stack.push_async_callback(tracing.shutdown)
        url = await _redis_url(stack, settings, embedded=embedded_redis)
        api_redis, jobs, leases = await _open_store(stack, url, settings)
        outbound = await stack.enter_async_context(open_outbound(settings))
        config = providers_config(settings, keys=keys) if providers is None else providers
        router, problem = await _open_router(
            stack, settings, config, tracing=tracing, required=provider_required
        )
        yield Parts(
            settings=settings,
            redis=api_redis,
            jobs=jobs,
            leases=leases,
            router=router,
            provider_problem=problem,
            model_providers=_model_providers(config, router),
            outbound=outbound,
            tracing=tracing,
        )


async def _redis_url(stack: AsyncExitStack, settings: Settings, *, embedded: bool) -> str:
    """The configured Redis URL, else an embedded redis-server's (stopped with ``stack``)."""
    if settings.redis_url is not None:
        return settings.redis_url.get_secret_value()
    if not embedded:
        raise ValueError("no Redis URL and no embedded redis-server")
    server = EmbeddedRedis(
        settings.data_dir,
        maxmemory_bytes=settings.embedded_redis_maxmemory_mb * 1024 * 1024,
    )
    await server.astart()
    stack.push_async_callback(server.astop)
    log.info("embedded redis-server on %s (data in %s)", server.redacted_url, server.dir)
    return server.url


async def _open_store(
    stack: AsyncExitStack, url: str, settings: Settings
) -> tuple[RedisClient, JobStore, Leases]:
    """The API's pool, and the store's two roles on their own pools."""
    options = store_options(settings)
    # Separate pools: however many requests the API serves, the worker's claims,
    # heartbeats and commits always find a connection; and however many writes and
    # commits the worker's jobs send, its claims, heartbeats and reaps have a few
    # connections of their own (the lane). The worker's commands queue for a connection
    # when all are busy (thousands of held jobs commit in bursts); the API's fail at once.
    api_redis = _connect(url, settings)
    worker_redis = _connect(url, settings, queue_s=WORKER_REDIS_QUEUE_S)
    lane = _connect(url, settings, queue_s=WORKER_REDIS_QUEUE_S, max_connections=4)
    for client in (api_redis, worker_redis, lane):
        stack.push_async_callback(client.aclose)
    # An evicting Redis would drop jobs silently: refuse it now (EvictingRedis).
    warning = judge(await eviction_policy(api_redis))
    if warning is not None:
        log.warning("%s", warning)
    jobs, leases = JobStore(api_redis, options), Leases(worker_redis, options, lane=lane)
    stack.push_async_callback(jobs.aclose)
    stack.push_async_callback(leases.aclose)
    return api_redis, jobs, leases


async def _open_router(
    stack: AsyncExitStack,
    settings: Settings,
    config: ProvidersConfig,
    *,
    tracing: Tracing | None,
    required: bool,
) -> tuple[Router | None, str | None]:
    """The router and the HTTP clients under it, or ``(None, why)`` when no provider can
    be configured and ``required`` is false."""
    # One connection per job a worker may hold: a smaller pool queues model calls.
    # One client per proxy the providers go through (the environment's, their own).
    pool = max(DEFAULT_MAX_CONNECTIONS, settings.worker_concurrency)
    http = await stack.enter_async_context(
        open_clients(config, max_connections=pool, tracing=tracing)
    )
    try:
        router = await stack.enter_async_context(
            open_router(
                http,
                data_dir=settings.data_dir,
                config=config,
                on_retry=metrics.record_transport_retry,
                tracing=tracing,
            )
        )
    except ProviderConfigError as exc:
        if required:
            raise
        log.error("no model provider: %s", exc.detail)
        return None, exc.detail
    return router, None


@asynccontextmanager
async def open_outbound(settings: Settings) -> AsyncIterator[Outbound]:
    """The outbound guard, its client, the signer and the tenant secrets of a process."""
    policy = OutboundPolicy(
        allow=Allowlist.parse(settings.outbound_allow),
        timeout_s=settings.outbound_timeout_ms / 1000,
        max_response_bytes=settings.outbound_max_response_bytes,
        max_request_bytes=settings.outbound_max_request_bytes,
        retries=settings.outbound_retries,
    )
    guard = Guard(policy)
    key = settings.webhook_signing_key
    previous = settings.webhook_signing_key_previous
    own = settings.webhook_secrets
    own_file = settings.webhook_secrets_file
    signer = Signer(
        load_signing_key(key.get_secret_value() if key else None, settings.data_dir),
        previous=previous.get_secret_value().encode() if previous else None,
        configured=parse_tenant_secrets(
            own.get_secret_value() if own else None,
            own_file.read_bytes() if own_file else None,
        ),
    )
    secrets = (
        ToolSecrets.load(settings.tool_secrets_file)
        if settings.tool_secrets_file
        else ToolSecrets.none()
    )
    async with OutboundClient(guard) as client:
        yield Outbound(guard, client, signer, secrets, settings.outbound_timeout_ms)


def api_app(
    settings: Settings,
    *,
    embedded_worker: bool = False,
    providers: ProvidersConfig | None = None,
    tracing: Tracing | None = None,
) -> FastAPI:
    """The API; with ``embedded_worker``, a worker in the same process (``reprompt serve``).

    ``providers`` and ``tracing`` replace what the environment configures (tests, or an
    embedding process with its own span exporter).
    """

    @asynccontextmanager
    async def resources() -> AsyncIterator[Resources]:
        async with (
            open_parts(
                settings,
                providers=providers,
                embedded_redis=True,
                tracing=tracing,
                keys=embedded_worker,  # an API alone calls no model: no keys needed
            ) as parts,
            AsyncExitStack() as stack,
        ):
            if embedded_worker:
                if parts.router is None:
                    log.warning("no model provider: the in-process worker is not started")
                else:
                    worker = Worker(
                        parts.leases,
                        parts.router,
                        settings,
                        outbound=parts.outbound,
                        tracing=parts.tracing,
                    )
                    await stack.enter_async_context(_running(worker))
                    await stack.enter_async_context(_batch_runner(parts, worker))
            yield Resources(
                settings=settings,
                keys=settings.keys,
                store=parts.jobs,
                router=parts.router,
                provider_problem=parts.provider_problem,
                model_providers=parts.model_providers,
                fairness=_fairness(settings, parts.jobs),
                outbound=parts.outbound,
                batches=BatchStore(parts.redis, prefix=settings.key_prefix),
            )

    return create_app(settings, resources)


def run_api(settings: Settings, *, embedded_worker: bool) -> int:
    """``reprompt api`` / ``reprompt serve``: uvicorn until SIGTERM or SIGINT.

    Returns 2 when an API without keys would listen on a non-loopback address.
    """
    import uvicorn

    refusal = settings.exposed_without_auth()
    if refusal is not None:
        log.error("%s", refusal)
        return 2
    if not settings.api_keys and not is_loopback(settings.host):
        log.warning(
            "serving on %s WITHOUT authentication (--insecure-no-auth): every caller is "
            "tenant 'default' and sees every job",
            settings.host,
        )
    app = api_app(settings, embedded_worker=embedded_worker)
    uvicorn.run(
        app,
        host=settings.host,
        port=settings.port,
        log_level="info",
        access_log=False,
        # The API reads neither the client's address nor the scheme (Locations are paths):
        # no X-Forwarded-* layer in front of every request.
        proxy_headers=False,
        http="httptools",
        loop="uvloop",
    )
    return 0


def run_worker(settings: Settings | None = None) -> int:
    """``reprompt worker``: one worker process until SIGTERM or SIGINT; 0 after a clean drain.

    The first signal stops claiming and drains (``drain_timeout_s``); a second one
    releases whatever is still running at once.
    """
    logs.configure(logging.INFO)  # unless configured already (reprompt worker's CLI)
    # One line per model call at INFO (with its URL) is noise here: the job lines say it.
    logging.getLogger("httpx").setLevel(logging.WARNING)
    if settings is None:
        try:
            settings = Settings()
        except ValidationError as exc:
            log.error("invalid configuration: %s", invalid_settings(exc))
            return 2
    if settings.redis_url is None or not settings.redis_url.get_secret_value():
        log.error(
            "REPROMPT_REDIS_URL is not set: a worker joins an existing Redis "
            "(only `reprompt serve` starts an embedded one)"
        )
        return 2
    try:
        return _run_loop(_worker_process(settings))
    except RepromptError as exc:  # a configuration problem, e.g. no provider
        log.error("%s", exc.detail)
        return 2


async def _worker_process(settings: Settings) -> int:
    stop = asyncio.Event()
    worker: Worker | None = None

    def on_signal(sig: signal.Signals) -> None:
        if not stop.is_set():
            log.info("%s: stopping, draining running jobs", sig.name)
            stop.set()
        elif worker is not None:
            log.info("%s again: releasing running jobs now", sig.name)
            worker.hurry()

    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, on_signal, sig)
    async with (
        open_parts(settings, provider_required=True) as parts,
        AsyncExitStack() as stack,
    ):
        if settings.worker_metrics_port:
            wanted = settings.worker_metrics_port
            try:
                port, stop_metrics = metrics.serve(settings.host, wanted, span=METRICS_PORT_SPAN)
            except OSError as exc:
                log.error("cannot serve metrics on %s:%d: %s", settings.host, wanted, exc)
                return 2
            stack.callback(stop_metrics)
            # Several workers on one host: the first has the configured port, the next ones
            # the following free ports; each says where Prometheus finds it.
            taken = "" if port == wanted else f" ({wanted} was taken)"
            log.info("metrics on http://%s:%d/metrics%s", settings.host, port, taken)
        assert parts.router is not None  # provider_required
        if settings.worker_metrics_port:
            gauges = asyncio.create_task(_circuit_gauges(parts.router), name="circuit-gauges")
            stack.callback(gauges.cancel)
        worker = Worker(
            parts.leases, parts.router, settings, outbound=parts.outbound, tracing=parts.tracing
        )
        await stack.enter_async_context(_batch_runner(parts, worker))
        await worker.run(stop)
    return 0


@asynccontextmanager
async def _batch_runner(parts: Parts, worker: Worker) -> AsyncIterator[None]:
    """Batches (#30): the batch runner beside the worker, stopped before it; batch calls
    on the worker pool wait while the worker runs interactive jobs."""
    assert parts.router is not None
    runner = BatchRunner(
        BatchStore(parts.redis, prefix=parts.settings.key_prefix),
        parts.router,
        parts.settings,
        busy=lambda: worker.running > 0,
    )
    stop = asyncio.Event()
    task = asyncio.create_task(runner.run(stop), name="batch-runner")
    try:
        yield
    finally:
        stop.set()
        with contextlib.suppress(Exception):
            await task


async def _circuit_gauges(router: Router) -> None:
    """``reprompt_circuit_state`` on a worker's /metrics.

    The workers make the model calls, so their breakers are the ones that open.
    """
    while True:
        metrics.record_state(queue=None, circuits=router.snapshot())
        await asyncio.sleep(CIRCUIT_GAUGES_S)


@asynccontextmanager
async def _running(worker: Worker) -> AsyncIterator[None]:
    """Run ``worker`` in a task for the block.

    On exit it stops claiming and lets running jobs finish (``drain_timeout_s``) or go back
    to the queue.
    """
    stop = asyncio.Event()
    task = asyncio.create_task(worker.run(stop), name="worker")
    task.add_done_callback(_worker_ended)
    try:
        yield
    finally:
        stop.set()
        with contextlib.suppress(Exception):  # already logged by _worker_ended
            await task


def _run_loop(main: Coroutine[Any, Any, int]) -> int:
    """``asyncio.run`` on uvloop when it is installed (it is, with uvicorn[standard]).

    The worker spends much of its CPU in the event loop's own bookkeeping.
    """
    try:
        import uvloop
    except ImportError:  # pragma: no cover - uvloop does not build on every platform
        return asyncio.run(main)
    return uvloop.run(main)


def _fairness(settings: Settings, store: JobStore) -> Fairness:
    """Per-tenant limits, when there are tenants (counted in Redis, shared by the replicas).

    Without API keys every caller is the one tenant ``default``: limiting it would only
    throttle the one user.
    """
    if not settings.api_keys:
        return Fairness(None, rate_per_s=0, burst=1, max_waits=0)
    quotas = Quotas(
        store.scripts,
        store.keys,
        now_ms=store.server_now_ms,
        keep_ms=Fairness.longest_lease_ms(settings.max_wait_ms),
    )
    return Fairness(
        quotas,
        rate_per_s=settings.rate_per_tenant,
        burst=settings.burst_per_tenant,
        max_waits=settings.max_waits_per_tenant,
    )


def _connect(
    url: str, settings: Settings, *, queue_s: float | None = None, max_connections: int = 200
) -> RedisClient:
    return connect(
        url, cluster=settings.redis_cluster, queue_s=queue_s, max_connections=max_connections
    )


def _worker_ended(task: asyncio.Task[None]) -> None:
    # Said at once: a worker that died would otherwise go unnoticed until shutdown.
    if not task.cancelled() and task.exception() is not None:
        log.error("the in-process worker stopped", exc_info=task.exception())


def _model_providers(config: ProvidersConfig, router: Router | None) -> dict[str, str]:
    out = {name: model.provider for name, model in config.models.items()}
    if router is not None:
        # Whatever the router has beyond the configuration is the embedded local model.
        for name in router.names():
            if router.resolve(name) == (name,):
                out.setdefault(name, LOCAL_PROVIDER)
    return out
