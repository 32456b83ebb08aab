"""Transport retries: spec 001's schedule, Retry-After, the deadline, hooks, the testing switch."""

from __future__ import annotations

import random
from collections.abc import Awaitable, Callable

import httpx
import pytest

from app.core.turn.model import LLMRequest, Message, Usage
from app.core.wire.errors import (
    ProviderConfigError,
    ProviderError,
    ProviderRateLimited,
    ProviderTimeout,
    ProviderUnavailable,
)
from app.providers.retry import Deadline, Retrier, RetryPolicy, set_testing
from app.providers.router import build_router
from tests.providers.upstream import Upstream, one_model, recorded


class FakeClock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def failing(
    *errors: ProviderError, then: str = "ok"
) -> tuple[Callable[[float], Awaitable[str]], list[float]]:
    """A call that raises ``errors`` in turn, then returns ``then``; records its timeouts."""
    pending = list(errors)
    timeouts: list[float] = []

    async def call(timeout_s: float) -> str:
        timeouts.append(timeout_s)
        if pending:
            raise pending.pop(0)
        return then

    return call, timeouts


def unavailable() -> ProviderUnavailable:
    return ProviderUnavailable("down", provider="p", model="m")


def timeout() -> ProviderTimeout:
    return ProviderTimeout("slow", provider="p", model="m")


def limited(after: float | None = None) -> ProviderRateLimited:
    return ProviderRateLimited("429", provider="p", model="m", retry_after_s=after)


async def test_transient_errors_are_retried_and_counted() -> None:
    call, timeouts = failing(timeout(), unavailable())
    value, tally = await Retrier().run(
        call, policy=RetryPolicy(max_attempts=3), deadline=Deadline(None), timeout_s=9.0
    )

    assert value == "ok"
    assert tally.retries == 2
    assert timeouts == [9.0, 9.0, 9.0]


async def test_non_retryable_errors_are_raised_at_once() -> None:
    call, timeouts = failing(ProviderConfigError("401", provider="p", model="m"))

    with pytest.raises(ProviderConfigError) as caught:
        await Retrier().run(call, policy=RetryPolicy(), deadline=Deadline(None), timeout_s=1.0)

    assert len(timeouts) == 1
    assert caught.value.transport_retries == 0


async def test_exhausted_attempts_raise_the_last_error_with_the_tally() -> None:
    call, timeouts = failing(timeout(), timeout(), unavailable(), unavailable())
    policy = RetryPolicy(max_attempts=3, jitter="none")

    with pytest.raises(ProviderUnavailable) as caught:
        await Retrier().run(call, policy=policy, deadline=Deadline(None), timeout_s=1.0)

    assert len(timeouts) == 3
    assert caught.value.transport_retries == 2
    # Spec 001 without jitter: timeout 1 s, then timeout 1 s doubled.
    assert caught.value.transport_wait_ms == 1000 + 2000


@pytest.mark.parametrize(
    ("code", "attempt", "base_s"),
    [
        ("llm-rate-limit", 1, 5.0),
        ("llm-rate-limit", 2, 10.0),
        ("llm-timeout", 1, 1.0),
        ("llm-timeout", 3, 4.0),
        ("llm-unavailable", 1, 10.0),
        ("llm-unavailable", 3, 30.0),
        ("llm-unavailable", 9, 30.0),
        ("something-else", 1, 2.0),
    ],
)
def test_waits_follow_spec_001_with_equal_jitter(code: str, attempt: int, base_s: float) -> None:
    rng = random.Random(3)
    assert RetryPolicy(jitter="none").wait_s(code, attempt, None, rng) == base_s
    for _ in range(50):
        wait = RetryPolicy().wait_s(code, attempt, None, rng)
        assert base_s / 2 <= wait <= base_s


def test_retry_after_is_a_floor_but_still_capped() -> None:
    rng = random.Random(0)
    assert RetryPolicy().wait_s("llm-rate-limit", 1, 7.0, rng) == 7.0
    assert RetryPolicy().wait_s("llm-rate-limit", 1, 120.0, rng) == 30.0
    assert RetryPolicy().wait_s("llm-rate-limit", 1, 0.5, rng) >= 2.5


async def test_testing_switch_records_the_retry_after_wait_without_sleeping() -> None:
    slept: list[float] = []

    async def sleep(seconds: float) -> None:
        slept.append(seconds)

    call, _ = failing(limited(after=7.0))
    _, tally = await Retrier(sleep=sleep).run(
        call, policy=RetryPolicy(), deadline=Deadline(None), timeout_s=1.0
    )

    assert tally.wait_ms == 7000
    assert slept == []


async def test_without_the_testing_switch_the_injected_sleep_waits() -> None:
    set_testing(False)
    slept: list[float] = []

    async def sleep(seconds: float) -> None:
        slept.append(seconds)

    call, _ = failing(limited(after=7.0), limited(after=8.0))
    _, tally = await Retrier(sleep=sleep).run(
        call, policy=RetryPolicy(), deadline=Deadline(None), timeout_s=1.0
    )

    assert slept == [7.0, pytest.approx(tally.wait_s - 7.0)]
    assert tally.retries == 2


async def test_a_wait_that_would_pass_the_deadline_gives_up_at_once() -> None:
    # Unavailable waits at least 5 s; only 3 s are left.
    call, timeouts = failing(unavailable(), unavailable())

    with pytest.raises(ProviderUnavailable) as caught:
        await Retrier().run(
            call, policy=RetryPolicy(max_attempts=5), deadline=Deadline(3.0), timeout_s=60.0
        )

    assert len(timeouts) == 1
    assert caught.value.transport_retries == 0
    assert caught.value.transport_wait_ms == 0


async def test_the_per_attempt_timeout_never_exceeds_what_is_left_of_the_deadline() -> None:
    clock = FakeClock()
    deadline = Deadline(10.0, clock=clock)
    clock.now += 4.0
    call, timeouts = failing(timeout(), timeout())

    _, tally = await Retrier(rng=random.Random(1)).run(
        call, policy=RetryPolicy(max_attempts=5), deadline=deadline, timeout_s=60.0
    )

    # 6 s left at first; the skipped waits count against it.
    assert timeouts[0] == 6.0
    assert 6.0 - 1.0 <= timeouts[1] <= 6.0 - 0.5  # timeout's first wait: 0.5..1 s
    assert timeouts[2] == pytest.approx(6.0 - tally.wait_s)


async def test_on_retry_sees_code_attempt_and_wait() -> None:
    events: list[tuple[str, int, float]] = []
    call, _ = failing(limited(after=6.0), timeout())
    retrier = Retrier(on_retry=lambda *event: events.append(event), rng=random.Random(2))

    _, tally = await retrier.run(call, policy=RetryPolicy(), deadline=Deadline(None), timeout_s=1.0)

    assert [(code, attempt) for code, attempt, _ in events] == [
        ("llm-rate-limit", 1),
        ("llm-timeout", 2),
    ]
    assert events[0][2] == 6.0
    assert sum(wait for *_, wait in events) == pytest.approx(tally.wait_s)


async def test_a_failing_hook_does_not_fail_the_call(caplog: pytest.LogCaptureFixture) -> None:
    def broken(code: str, attempt: int, wait_s: float) -> None:
        raise RuntimeError("metrics are down")

    call, _ = failing(timeout())
    value, _ = await Retrier(on_retry=broken).run(
        call, policy=RetryPolicy(), deadline=Deadline(None), timeout_s=1.0
    )

    assert value == "ok"
    assert "on_retry hook failed" in caplog.text


async def test_retry_after_over_http_is_honoured_and_counted_only_as_transport_retries(
    upstream: Upstream, http: httpx.AsyncClient
) -> None:
    upstream.script(recorded("openai_429"), recorded("openai_success"))
    config = one_model(upstream.url, input_usd_per_mtok=1.0, output_usd_per_mtok=2.0)
    request = LLMRequest(messages=(Message("user", "hi"),))

    response = await build_router(config, http).complete(request)

    assert response.transport_retries == 1
    assert response.transport_wait_ms == 7000
    # The failed attempt costs nothing and leaves no other trace.
    assert response.usage == Usage(19, 10)
    assert response.cost_usd == pytest.approx((19 * 1.0 + 10 * 2.0) / 1e6)
    assert response.warnings == ()
    assert len(upstream.seen) == 2


async def test_deadline_over_http_gives_up_before_a_wait_it_cannot_afford(
    upstream: Upstream, http: httpx.AsyncClient
) -> None:
    upstream.script(recorded("openai_503"))
    request = LLMRequest(messages=(Message("user", "hi"),), timeout_s=4.0)

    with pytest.raises(ProviderUnavailable) as caught:
        await build_router(one_model(upstream.url, max_attempts=3), http).complete(request)

    assert len(upstream.seen) == 1
    assert caught.value.transport_retries == 0


async def test_injected_clock_and_sleep_drive_real_waits_through_the_router(
    upstream: Upstream, http: httpx.AsyncClient
) -> None:
    set_testing(False)
    clock = FakeClock()
    slept: list[float] = []

    async def sleep(seconds: float) -> None:
        slept.append(seconds)
        clock.now += seconds

    upstream.script(recorded("openai_429"), recorded("openai_429"), recorded("openai_success"))
    router = build_router(one_model(upstream.url), http, clock=clock, sleep=sleep)

    response = await router.complete(LLMRequest(messages=(Message("user", "hi"),)))

    assert slept[0] == 7.0
    assert response.transport_retries == 2
    assert response.transport_wait_ms == round(sum(slept) * 1000)
