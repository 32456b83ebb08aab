"""The ``ModelClient`` the turn loop talks to: models, routes, fallback, circuits, cost.

A *route* is an ordered list of models; ``LLMRequest.model`` names a model or a route
(``None``: the configured default). Each model is called through its circuit breaker
and the transport retries; when it ends transient (unavailable, rate-limited, timed
out, or its circuit is open) and time is left, the next model of the route answers
and a warning says so. Anything else (bad credentials, token limit) is raised as is::

    router = build_router(load_providers(os.environ, path=providers_file), http)
    response = await router.complete(LLMRequest(messages=msgs, model="fast", timeout_s=30))
    response.model, response.provider, response.cost_usd, response.warnings
    router.snapshot()   # circuit states for the API and metrics
"""

from __future__ import annotations

import asyncio
import logging
import random
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace
from typing import Protocol
from urllib.parse import urlsplit

import httpx

from app.core.turn.clock import Monotonic
from app.core.turn.model import (
    Choice,
    LLMRequest,
    LLMResponse,
    PromptStyle,
    StructuredMode,
    StructuredOutput,
    Usage,
)
from app.core.wire.codes import is_retryable
from app.core.wire.errors import InvalidInput, ProviderError, ProviderUnavailable
from app.providers import structured
from app.providers.anthropic import AnthropicAdapter
from app.providers.catalog import catalog_price, catalog_source
from app.providers.circuit import Breaker, Circuits, CircuitState
from app.providers.config import ModelConfig, ProvidersConfig
from app.providers.http import ProviderClients
from app.providers.openai import OpenAIAdapter
from app.providers.pricing import Price, cost_of
from app.providers.retry import Deadline, OnRetry, Retrier, RetryPolicy, Sleep, Tally
from app.providers.structured import Capability
from app.tracing import Tracing

logger = logging.getLogger(__name__)


# A provider's readiness: ``None`` when it can answer, else why not.
Health = Callable[[], "str | None"]


class Adapter(Protocol):
    """One wire protocol: a single attempt, translated, failures already classified."""

    async def send(
        self,
        request: LLMRequest,
        *,
        model: str,
        spec: ModelConfig,
        mechanism: Capability,
        timeout_s: float,
    ) -> LLMResponse: ...


@dataclass(frozen=True, slots=True)
class Target:
    """A configured model, ready to call."""

    name: str
    provider: str
    spec: ModelConfig
    adapter: Adapter
    policy: RetryPolicy
    timeout_s: float
    breaker: Breaker
    # The providers file's price, else the catalog's (``price_source`` says which).
    price: Price | None = None
    price_source: str | None = None
    wire: str = "openai"  # the provider's kind: the wire protocol it speaks
    server: tuple[str, int] | None = None  # host and port of its base URL (for traces)
    # Batches (#30): the provider's batch API, if any, and its batch discount.
    batch_api: bool = False
    batch_discount: float | None = None

    @property
    def capability(self) -> Capability:
        return self.spec.structured or "prompt"


class Router:
    """Implements ``app.core.turn.model.ModelClient`` over the configured providers."""

    def __init__(
        self,
        targets: Mapping[str, Target],
        routes: Mapping[str, tuple[str, ...]],
        *,
        default: str | None,
        circuits: Circuits,
        retrier: Retrier,
        clock: Monotonic = time.monotonic,
        health: Mapping[str, Health] | None = None,
        tracing: Tracing | None = None,
    ) -> None:
        self._targets = dict(targets)
        self._tracing = tracing
        self._health = dict(health or {})
        self._routes = dict(routes)
        self._default = default
        self._circuits = circuits
        self._retrier = retrier
        self._clock = clock
        # Per (model or route, structured output asked): fixed by the configuration, asked
        # for every job. Only configured names get in, so these stay small.
        self._modes: dict[tuple[str | None, StructuredOutput], StructuredMode] = {}
        self._styles: dict[tuple[str | None, StructuredOutput], PromptStyle] = {}

    def __repr__(self) -> str:
        return (
            f"Router(models={sorted(self._targets)}, routes={sorted(self._routes)},"
            f" default={self._default!r})"
        )

    @property
    def default(self) -> str | None:
        return self._default

    def names(self) -> tuple[str, ...]:
        """Every model and route a request may name."""
        return (*self._targets, *self._routes)

    def resolve(self, model: str | None) -> tuple[str, ...]:
        """The models ``model`` (a model, a route or ``None``) tries, in order."""
        name = model or self._default
        if name is None:
            raise InvalidInput("no model is configured", field="model")
        if name in self._routes:
            return self._routes[name]
        if name in self._targets:
            return (name,)
        known = ", ".join(sorted(self.names())) or "none"
        raise InvalidInput(f"unknown model or route {name!r} (configured: {known})", field="model")

    def problem(self) -> str | None:
        """Why a provider cannot answer now (a crashed local model), ``None`` when all can."""
        problems = [text for check in self._health.values() if (text := check()) is not None]
        return "; ".join(problems) or None

    def target(self, model: str | None) -> Target:
        """The first configured model ``model`` (a model, a route or None) tries (batches)."""
        return self._targets[self.resolve(model)[0]]

    def price_of(self, model: str) -> tuple[Price | None, str | None]:
        """A configured model's price per million tokens and where it came from."""
        target = self._targets[model]
        return target.price, target.price_source

    def snapshot(self) -> dict[str, CircuitState]:
        """Circuit state per ``"provider/model"``."""
        return self._circuits.snapshot()

    def structured_mode(self, model: str | None, requested: StructuredOutput) -> StructuredMode:
        """How ``model`` honours an output schema; a route reports its weakest model.

        ``"native"`` raises ``InvalidInput`` unless every model can constrain decoding.
        """
        known = self._modes.get((model, requested))
        if known is not None:
            return known
        names = self.resolve(model)
        modes = [structured.mode_for(self._targets[n].capability, requested) for n in names]
        if requested == "native":
            lacking = [n for n, mode in zip(names, modes, strict=True) if mode == "prompt"]
            if lacking:
                raise InvalidInput(
                    f"native structured output was required, but {', '.join(lacking)} can"
                    " only be prompted for it",
                    field="structuredOutput",
                )
        mode = self._modes[model, requested] = structured.weakest(modes)
        return mode

    def prompt_style(self, model: str | None, requested: StructuredOutput) -> PromptStyle:
        """How to prompt ``model`` (the providers file's ``prompt``).

        The prompt is written once, whichever model of a route answers: a route is compact only
        if every model on it is, and its schema enforced only if every model enforces it.
        """
        known = self._styles.get((model, requested))
        if known is not None:
            return known
        targets = [self._targets[n] for n in self.resolve(model)]
        compact = all(t.spec.prompt == "compact" for t in targets)
        enforced = all(structured.enforces_schema(t.capability, requested) for t in targets)
        style = PromptStyle("compact" if compact else "full", schema_enforced=enforced)
        self._styles[model, requested] = style
        return style

    def without_tools(self, model: str | None) -> list[str]:
        """The models ``model`` (a model or a route) tries that cannot call tools."""
        return [n for n in self.resolve(model) if not self._targets[n].spec.tools]

    def estimate_cost(
        self, model: str | None, input_tokens: int, output_tokens: int
    ) -> float | None:
        """Upper-bound USD for a call of that size; ``None`` when a model has no price.

        A route is priced at its dearest model.
        """
        costs = []
        for name in self.resolve(model):
            price = self._targets[name].price
            if price is None:
                return None
            costs.append(price.estimate(input_tokens, output_tokens))
        return max(costs)

    async def complete(self, request: LLMRequest) -> LLMResponse:
        """Answer ``request`` from the first model of its route that can."""
        started = self._clock()
        deadline = Deadline(request.timeout_s, clock=self._clock)
        names = self.resolve(request.model)
        if request.output_schema is not None and request.structured_output == "native":
            self.structured_mode(request.model, "native")
        warnings: list[str] = []
        retries = wait_ms = 0
        for i, name in enumerate(names):
            target = self._targets[name]
            try:
                if self._tracing is None:
                    # One answer (the commonest): straight to the one call.
                    response = await (
                        self._one(target, request, deadline)
                        if request.n <= 1
                        else self._call(target, request, deadline)
                    )
                else:
                    response = await self._traced(self._tracing, target, request, deadline)
            except ProviderError as err:
                retries += err.transport_retries
                wait_ms += err.transport_wait_ms
                following = names[i + 1] if i + 1 < len(names) else None
                remaining = deadline.remaining()
                if (
                    following is None
                    or not err.retryable
                    or (remaining is not None and remaining <= 0)
                ):
                    raise _final(err, names[: i + 1], retries, wait_ms) from None
                note = f"fell back from {name} to {following}: {err.code}"
                logger.warning("%s (%s)", note, err.detail)
                warnings.append(note)
                continue
            cost, cost_warning = cost_of(target.price, response.usage, name)
            if cost_warning:
                warnings.append(cost_warning)
            return response.settled(
                cost_usd=cost,
                warnings=(*warnings, *response.warnings),
                transport_retries=retries + response.transport_retries,
                transport_wait_ms=wait_ms + response.transport_wait_ms,
                latency_ms=round((self._clock() - started) * 1000),
            )
        raise AssertionError("a route has at least one model")  # pragma: no cover

    async def _traced(
        self, tracing: Tracing, target: Target, request: LLMRequest, deadline: Deadline
    ) -> LLMResponse:
        """``_call`` in a ``chat {model}`` span, its transport retries as the span's events."""
        with tracing.model_call(
            request,
            provider=target.provider,
            model=target.name,
            upstream_model=target.spec.name or target.name,
            wire=target.wire,
            server=target.server,
        ) as span:
            response = await self._call(target, request, deadline, on_retry=span.retry)
            span.answered(response)
            return response

    async def _call(
        self,
        target: Target,
        request: LLMRequest,
        deadline: Deadline,
        *,
        on_retry: OnRetry | None = None,
    ) -> LLMResponse:
        if request.n <= 1:
            return await self._one(target, request, deadline, on_retry=on_retry)
        if not getattr(target.adapter, "supports_n", False):
            return await self._calls(target, request, deadline, on_retry=on_retry)
        response = await self._one(target, request, deadline, on_retry=on_retry)
        missing = request.n - len(response.choices)
        if missing <= 0:
            return response
        # A server that takes ``n`` but answers once (llama.cpp's OpenAI-compatible server
        # ignores it): the answers missing, as calls of their own, seeded apart.
        seed = None if request.seed is None else request.seed + len(response.choices)
        try:
            more = await self._calls(
                target, replace(request, n=missing, seed=seed), deadline, on_retry=on_retry
            )
        except ProviderError as err:
            note = f"candidates: the {missing} answer(s) asked for apart failed ({err.code})"
            return replace(response, warnings=(*response.warnings, note))
        return _together([response, more])

    async def _calls(
        self,
        target: Target,
        request: LLMRequest,
        deadline: Deadline,
        *,
        on_retry: OnRetry | None = None,
    ) -> LLMResponse:
        """Several answers from a wire without ``n``: that many calls at once, as one.

        Failed calls are left out (a half-open circuit lets one through) and a warning says
        so; when all failed, the first failure is raised.
        """
        # A seed each: the same seed would sample the same answer n times.
        singles = [
            replace(request, n=1, seed=None if request.seed is None else request.seed + k)
            for k in range(request.n)
        ]
        results = await asyncio.gather(
            *(self._one(target, single, deadline, on_retry=on_retry) for single in singles),
            return_exceptions=True,
        )
        answers = [r for r in results if isinstance(r, LLMResponse)]
        for result in results:
            if isinstance(result, BaseException) and not isinstance(result, Exception):
                raise result  # cancelled: not a provider's answer
        if not answers:
            failure = results[0]
            assert isinstance(failure, Exception)
            raise failure
        together = _together(answers)
        failed = [r for r in results if isinstance(r, Exception)]
        if not failed:
            return together
        kinds = ", ".join(dict.fromkeys(getattr(f, "code", type(f).__name__) for f in failed))
        note = (
            f"candidates: {len(failed)} of {request.n} calls failed ({kinds}); "
            f"kept the {len(answers)} answer(s) that came"
        )
        logger.warning("%s", note)
        return replace(
            together,
            warnings=(*together.warnings, note),
            transport_retries=together.transport_retries
            + sum(getattr(f, "transport_retries", 0) for f in failed),
        )

    async def _one(
        self,
        target: Target,
        request: LLMRequest,
        deadline: Deadline,
        *,
        on_retry: OnRetry | None = None,
    ) -> LLMResponse:
        breaker = target.breaker
        if not breaker.allow():
            raise ProviderUnavailable(
                f"circuit open for {breaker.key}", provider=target.provider, model=target.name
            )
        mechanism = structured.mechanism(target.capability, request)
        adapter, model, spec = target.adapter, target.name, target.spec
        try:
            # The first attempt made here (``Retrier.run``'s, without its two coroutines on
            # the way to the model); a failure goes on in ``Retrier.after``.
            try:
                response = await adapter.send(
                    request,
                    model=model,
                    spec=spec,
                    mechanism=mechanism,
                    timeout_s=deadline.cap(target.timeout_s),
                )
                tally = Tally()
            except ProviderError as first:

                async def send(timeout_s: float) -> LLMResponse:
                    return await adapter.send(
                        request, model=model, spec=spec, mechanism=mechanism, timeout_s=timeout_s
                    )

                response, tally = await self._retrier.after(
                    first,
                    send,
                    policy=target.policy,
                    deadline=deadline,
                    timeout_s=target.timeout_s,
                    on_retry=on_retry,
                )
        except ProviderError as err:
            # Only transient failures say the model is down; any other answer says it is up.
            if is_retryable(err.code):
                breaker.record_failure()
            else:
                breaker.record_success()
            raise
        except BaseException:
            breaker.release()
            raise
        breaker.record_success()
        if (
            response.transport_retries == tally.retries
            and response.transport_wait_ms == tally.wait_ms
        ):
            return response  # the commonest: no retry, and the adapter's zeros already
        return replace(response, transport_retries=tally.retries, transport_wait_ms=tally.wait_ms)


def _together(answers: list[LLMResponse]) -> LLMResponse:
    """Several calls' answers as one response, with the usage and transport counts of all."""
    first = answers[0]
    usages = [a.usage for a in answers]
    usage = (
        None
        if any(u is None for u in usages)
        else Usage(
            input_tokens=sum(u.input_tokens for u in usages if u is not None),
            output_tokens=sum(u.output_tokens for u in usages if u is not None),
            cached_input_tokens=sum(u.cached_input_tokens for u in usages if u is not None),
            cache_write_tokens=sum(u.cache_write_tokens for u in usages if u is not None),
        )
    )
    choices = [c for a in answers for c in a.choices][1:]
    return replace(
        first,
        usage=usage,
        alternatives=tuple(
            Choice(c.content, c.finish_reason, c.tool_calls, c.refusal) for c in choices
        ),
        transport_retries=sum(a.transport_retries for a in answers),
        transport_wait_ms=max(a.transport_wait_ms for a in answers),
        warnings=tuple(dict.fromkeys(w for a in answers for w in a.warnings)),
    )


def build_router(
    config: ProvidersConfig,
    http: httpx.AsyncClient | ProviderClients,
    *,
    clock: Monotonic = time.monotonic,
    sleep: Sleep = asyncio.sleep,
    on_retry: OnRetry | None = None,
    rng: random.Random | None = None,
    adapters: Mapping[str, Adapter] | None = None,
    health: Mapping[str, Health] | None = None,
    tracing: Tracing | None = None,
) -> Router:
    """A router over ``config``'s models, calling them through ``http``.

    ``http`` is one client, or each provider's from ``open_clients`` (a provider with a
    ``proxy`` needs its own). ``clock`` drives deadlines and circuit cool-downs, ``sleep``
    the retry waits; ``on_retry(code, attempt, wait_s)`` observes every transport retry.
    ``adapters`` replaces a provider's adapter (the supervised local model), ``health``
    adds a provider's readiness check to ``problem()``; with ``tracing`` every model
    called gets a span.
    """
    circuits = Circuits(
        failure_threshold=config.circuit.failure_threshold,
        cooldown_s=config.circuit.cooldown_s,
        clock=clock,
    )
    clients = http if isinstance(http, ProviderClients) else ProviderClients(http)
    wire = _adapters(config, clients, adapters or {})
    targets = {
        name: _target(config, name, spec, wire[spec.provider], circuits)
        for name, spec in config.models.items()
    }
    return Router(
        targets,
        {name: tuple(route.models) for name, route in config.routes.items()},
        default=config.default_target(),
        circuits=circuits,
        retrier=Retrier(sleep=sleep, on_retry=on_retry, rng=rng),
        clock=clock,
        health=health,
        tracing=tracing,
    )


def _adapters(
    config: ProvidersConfig, clients: ProviderClients, given: Mapping[str, Adapter]
) -> dict[str, Adapter]:
    """Each provider's adapter: the one ``given`` for it, else one for its wire protocol."""
    wire: dict[str, Adapter] = dict(given)
    for name, provider in config.providers.items():
        if name in wire:
            continue
        client = clients.of(provider)
        if provider.kind == "anthropic":
            wire[name] = AnthropicAdapter(client, provider=name, config=provider)
        else:
            wire[name] = OpenAIAdapter(client, provider=name, config=provider)
    return wire


def _target(
    config: ProvidersConfig, name: str, spec: ModelConfig, adapter: Adapter, circuits: Circuits
) -> Target:
    """One configured model, priced by the providers file or else the catalog."""
    provider = config.providers[spec.provider]
    price, source = spec.price, "providers file"
    if price is None:
        price = catalog_price(provider.kind, spec.name or name)
        source = catalog_source()
    return Target(
        name=name,
        provider=spec.provider,
        spec=spec,
        adapter=adapter,
        policy=RetryPolicy(max_attempts=provider.max_attempts),
        timeout_s=provider.timeout_s,
        breaker=circuits.breaker(spec.provider, name),
        price=price,
        price_source=None if price is None else source,
        wire=provider.kind,
        server=_server(provider.url),
        batch_api=provider.batch_api and provider.kind in ("openai", "anthropic"),
        batch_discount=provider.batch_discount,
    )


def _server(url: str) -> tuple[str, int] | None:
    """Host and port of a provider's base URL."""
    parts = urlsplit(url)
    if not parts.hostname:
        return None
    try:
        port = parts.port
    except ValueError:
        return None
    return parts.hostname, port or (443 if parts.scheme == "https" else 80)


def _final(err: ProviderError, tried: tuple[str, ...], retries: int, wait_ms: int) -> ProviderError:
    """The error the caller sees: the last one, with the totals of the whole route."""
    detail = err.detail
    if len(tried) > 1:
        detail = f"{detail} (after trying {', '.join(tried)})"
    return type(err)(
        detail,
        provider=err.provider,
        model=err.model,
        retry_after_s=err.retry_after_s,
        transport_retries=retries,
        transport_wait_ms=wait_ms,
    )
