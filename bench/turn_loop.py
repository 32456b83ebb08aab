"""The worker's own CPU per job, without Redis or HTTP: the turn loop and what wraps it.

    .venv/bin/python bench/turn_loop.py                # 3 rounds of 2000 jobs, 32 at a time
    .venv/bin/python bench/turn_loop.py --jobs 5000 --rounds 5
    .venv/bin/python bench/turn_loop.py --profile /tmp/turn.out   # cProfile one round

One real answer of the simulator to bench/common.py's single-turn job is taken through
the real router (the sim model of the split deployment, ``structured = "prompt"``); then
``Runner.process`` (app/worker/running.py) runs N jobs on it, ``concurrency`` at a time,
with a client that replays that answer and an in-memory store whose ``complete``
serialises what the real one sends to Redis. What is timed is the process's CPU
(``time.process_time``) for the whole round: the claim's spec parsed, the prompts built,
the answer checked, the events, the metrics, the log lines (to /dev/null, formatted as
``reprompt worker`` formats them) and the commit's payload. It prints the median µs/job
over the rounds.

A /tmp-style micro-timing: it ranks changes to that code path; bench/guard.py measures
the deployment.
"""

from __future__ import annotations

import argparse
import asyncio
import cProfile
import json
import logging
import statistics
import sys
import time
from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import httpx

from app import logs
from app.core.turn.model import LLMRequest, LLMResponse
from app.core.wire.base import Wire
from app.core.wire.record import Spend
from app.core.wire.spec import JobSpec
from app.providers.config import ProvidersConfig, load_providers
from app.providers.router import Router, build_router
from app.settings import Settings
from app.store import Claim, Written
from app.worker import Worker
from app.worker.job import Job
from bench.common import Stack, job_body


class _Replay:
    """The real router for everything but the call: the call answers ``answer``."""

    def __init__(self, router: Router, answer: LLMResponse) -> None:
        self._router = router
        self._answer = answer

    def __getattr__(self, name: str) -> Any:
        return getattr(self._router, name)

    async def complete(self, request: LLMRequest) -> LLMResponse:
        return self._answer


class _Store:
    """Takes the commit as the real store does (its payload serialised), keeps nothing."""

    woken = False

    async def complete(
        self,
        claim: Claim,
        *,
        envelope: Any,
        history: Sequence[Any],
        transcript: Sequence[Any],
        turn: Any = None,
        events: Sequence[tuple[str, Wire]] = (),
        room: int = 0,
    ) -> Written:
        payload = [
            envelope.model_dump_json(),
            json.dumps([h.model_dump(mode="json") for h in history]),
            json.dumps([m.model_dump(mode="json") for m in transcript]),
            "" if turn is None else turn.model_dump_json(),
            "" if turn is None else Spend.of(turn).model_dump_json(),
            *(data.model_dump_json() for _, data in events),
        ]
        assert payload
        return Written.OURS

    async def write(self, claim: Claim, **_: Any) -> Written:
        return Written.OURS


def _answer(config: ProvidersConfig) -> LLMResponse:
    """The simulator's answer to the bench job, through the real router (one call)."""

    async def ask() -> LLMResponse:
        http = httpx.AsyncClient(trust_env=False)
        router = build_router(config, http)
        spec = JobSpec.model_validate(job_body(0))
        captured: list[LLMRequest] = []

        class Capture:
            def __getattr__(self, name: str) -> Any:
                return getattr(router, name)

            async def complete(self, request: LLMRequest) -> LLMResponse:
                captured.append(request)
                return await router.complete(request)

        from app.core.turn.loop import Runtime, run_job

        result = await run_job(spec, Runtime(client=Capture()))
        assert result.envelope.status == "success", result.envelope
        answer = await router.complete(captured[0])
        await http.aclose()
        return answer

    return asyncio.run(ask())


def _claims(n: int) -> list[Claim]:
    now = int(time.time() * 1000)
    claims = []
    for i in range(n):
        spec = JobSpec.model_validate(job_body(i)).model_dump(mode="json", by_alias=True)
        # As the store hands it over: parsed from the JSON it keeps.
        spec = json.loads(json.dumps(spec))
        claims.append(Claim(f"j{i:07d}", 1, 1, spec, "bench", now))
    return claims


async def _round(worker: Worker, claims: list[Claim], concurrency: int) -> float:
    slots = asyncio.Semaphore(concurrency)

    async def one(claim: Claim) -> None:
        async with slots:
            await worker.runner.process(Job(claim))

    start = time.process_time()
    await asyncio.gather(*(one(c) for c in claims))
    return time.process_time() - start


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--jobs", type=int, default=2000)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--concurrency", type=int, default=32)
    parser.add_argument("--profile", help="cProfile the last round into this file")
    args = parser.parse_args(argv)

    logs.configure(logging.INFO, open("/dev/null", "w"))  # noqa: SIM115 (lives as long)
    logging.getLogger("httpx").setLevel(logging.WARNING)

    with Stack() as stack:
        sim = stack.sim(latency_ms=0, jitter_ms=0, seed=1)
        config = load_providers({}, str(stack.providers(sim.url)))
        answer = _answer(config)
    answer = replace(answer, latency_ms=0)
    print(f"answer: {answer.content!r} ({answer.model}, {answer.provider})")

    async def run() -> list[float]:
        http = httpx.AsyncClient(trust_env=False)  # never used: the replay answers
        router = build_router(config, http)
        worker = Worker(_Store(), _Replay(router, answer), Settings())  # type: ignore[arg-type]
        await _round(worker, _claims(200), args.concurrency)  # warm-up
        timings = []
        for index in range(args.rounds):
            claims = _claims(args.jobs)
            profiler = cProfile.Profile() if args.profile and index == args.rounds - 1 else None
            if profiler is not None:
                profiler.enable()
            seconds = await _round(worker, claims, args.concurrency)
            if profiler is not None:
                profiler.disable()
                profiler.dump_stats(args.profile)
            timings.append(seconds * 1e6 / args.jobs)
            print(f"round {index + 1}: {timings[-1]:.0f} µs/job")
        await http.aclose()
        return timings

    timings = asyncio.run(run())
    print(f"median {statistics.median(timings):.0f} µs CPU/job ({args.jobs} jobs x {args.rounds})")


if __name__ == "__main__":
    main()
