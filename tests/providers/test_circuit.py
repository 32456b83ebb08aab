"""Circuit breakers: open after N transient failures, fail fast, one half-open probe."""

from __future__ import annotations

import httpx
import pytest

from app.core.turn.model import LLMRequest, Message
from app.core.wire.errors import ProviderConfigError, ProviderUnavailable
from app.providers.circuit import Breaker, Circuits
from app.providers.config import CircuitConfig
from app.providers.router import build_router
from tests.providers.upstream import Upstream, one_model, recorded


class FakeClock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def breaker(clock: FakeClock, threshold: int = 3, cooldown_s: float = 30.0) -> Breaker:
    return Circuits(failure_threshold=threshold, cooldown_s=cooldown_s, clock=clock).breaker(
        "p", "m"
    )


def test_opens_after_n_consecutive_failures_and_fails_fast() -> None:
    clock = FakeClock()
    b = breaker(clock)
    for _ in range(2):
        assert b.allow()
        b.record_failure()
    assert b.state == "closed"
    assert b.allow()
    b.record_failure()

    assert b.snapshot() == {"state": "open", "failures": 3, "opened_at": 100.0}
    assert not b.allow()
    clock.now += 29.9
    assert not b.allow()


def test_a_success_resets_the_count() -> None:
    b = breaker(FakeClock())
    b.record_failure()
    b.record_failure()
    b.record_success()
    b.record_failure()
    b.record_failure()
    assert b.state == "closed"


def test_half_open_lets_exactly_one_probe_through_and_its_success_closes() -> None:
    clock = FakeClock()
    b = breaker(clock, threshold=1)
    b.record_failure()
    clock.now += 30.0

    assert b.allow()
    assert b.state == "half_open"
    assert not b.allow()  # a second caller while the probe is out
    b.record_success()

    assert b.snapshot() == {"state": "closed", "failures": 0, "opened_at": None}
    assert b.allow()


def test_a_failed_probe_reopens_for_another_cooldown() -> None:
    clock = FakeClock()
    b = breaker(clock, threshold=1)
    b.record_failure()
    clock.now += 31.0
    assert b.allow()

    b.record_failure()

    assert b.state == "open"
    assert b.snapshot()["opened_at"] == 131.0
    clock.now += 29.0
    assert not b.allow()
    clock.now += 1.0
    assert b.allow()


def test_a_cancelled_probe_frees_the_slot() -> None:
    clock = FakeClock()
    b = breaker(clock, threshold=1)
    b.record_failure()
    clock.now += 30.0
    assert b.allow()

    b.release()

    assert b.allow()


def test_snapshot_keys_are_provider_slash_model() -> None:
    circuits = Circuits(clock=FakeClock())
    circuits.breaker("openai", "gpt-4o-mini")
    circuits.breaker("anthropic", "claude-haiku").record_failure()

    assert circuits.snapshot() == {
        "anthropic/claude-haiku": {"state": "closed", "failures": 1, "opened_at": None},
        "openai/gpt-4o-mini": {"state": "closed", "failures": 0, "opened_at": None},
    }


def test_threshold_must_be_positive() -> None:
    with pytest.raises(ValueError, match="failure_threshold"):
        Circuits(failure_threshold=0)


ASK = LLMRequest(messages=(Message("user", "hi"),))


async def test_router_fails_fast_while_open_then_probes_after_the_cooldown(
    upstream: Upstream, http: httpx.AsyncClient
) -> None:
    clock = FakeClock()
    config = one_model(upstream.url, max_attempts=1).model_copy(
        update={"circuit": CircuitConfig(failure_threshold=2, cooldown_s=30)}
    )
    router = build_router(config, http, clock=clock)
    upstream.script(recorded("openai_500"))
    for _ in range(2):
        with pytest.raises(ProviderUnavailable, match="is unavailable"):
            await router.complete(ASK)
    assert router.snapshot()["p/m"]["state"] == "open"

    with pytest.raises(ProviderUnavailable, match="circuit open for p/m"):
        await router.complete(ASK)
    assert len(upstream.seen) == 2  # failed fast: nothing sent

    clock.now += 30
    upstream.script(recorded("openai_success"))
    response = await router.complete(ASK)

    assert response.content
    assert len(upstream.seen) == 3
    assert router.snapshot()["p/m"] == {"state": "closed", "failures": 0, "opened_at": None}


async def test_router_reopens_when_the_probe_fails(
    upstream: Upstream, http: httpx.AsyncClient
) -> None:
    clock = FakeClock()
    config = one_model(upstream.url, max_attempts=1).model_copy(
        update={"circuit": CircuitConfig(failure_threshold=1, cooldown_s=10)}
    )
    router = build_router(config, http, clock=clock)
    upstream.script(recorded("openai_503"))
    with pytest.raises(ProviderUnavailable):
        await router.complete(ASK)

    clock.now += 10
    with pytest.raises(ProviderUnavailable, match="is unavailable"):
        await router.complete(ASK)  # the probe goes out and fails

    assert router.snapshot()["p/m"] == {"state": "open", "failures": 2, "opened_at": 110.0}
    with pytest.raises(ProviderUnavailable, match="circuit open"):
        await router.complete(ASK)
    assert len(upstream.seen) == 2


async def test_non_retryable_errors_do_not_open_the_circuit(
    upstream: Upstream, http: httpx.AsyncClient
) -> None:
    config = one_model(upstream.url).model_copy(
        update={"circuit": CircuitConfig(failure_threshold=1)}
    )
    router = build_router(config, http, clock=FakeClock())
    upstream.script(recorded("openai_401"))
    for _ in range(3):
        with pytest.raises(ProviderConfigError, match="credentials"):
            await router.complete(ASK)

    assert router.snapshot()["p/m"]["state"] == "closed"
    assert len(upstream.seen) == 3
