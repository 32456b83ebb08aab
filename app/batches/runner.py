"""The batch runner: in each worker process, the loop that takes due batches (leased, like
a job) and moves each one step: submit a round, poll it, take its results in.

    runner = BatchRunner(store, router, settings)
    await runner.run(stop)                 # until ``stop`` is set

A batch's step is one of its ``phase``s:

* ``submit``: every pending item is replayed (``app.core.batch.replay``): an item that
  ended gets its result; the others give the call their loop asks for next. Those calls
  go as one provider batch (round N), or, by the re-ask policy, live on this worker.
  Before the provider is called, the round's number and token are stored
  (``submitting``); the provider batch id is stored as soon as it comes back, before
  anything else. A worker that dies between the two leaves ``submitting``: the next one
  rebuilds the same lines and creates with the same token (``Idempotency-Key``), so the
  provider gives back the batch it made: a round is never submitted twice.
* ``poll``: is the provider batch over? (A cancel asked for is passed on here.)
* ``ingest``: its result lines are read as a stream and each taken in once
  (``BatchStore.ingest``); expired or cancelled lines are simply missing, so the next
  round sends exactly those again.

A step holds the batch's lease (``batch_lease_ms``, renewed while it runs); a worker
SIGKILLed mid-step loses it and another worker takes the batch up where it was.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import secrets
import tempfile
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final, cast

from app import metrics
from app.core.batch.replay import Answer, Deferred, LineFailure, ReplayClient, answer_of, stored
from app.core.turn.loop import JobResult, Runtime, run_job
from app.core.turn.model import LLMRequest, LLMResponse
from app.core.wire import codes
from app.core.wire.base import compact_json
from app.core.wire.batch import BatchEvent, BatchItem, item_spec
from app.core.wire.envelope import Envelope
from app.core.wire.errors import RepromptError
from app.providers.batch import BatchApi, batch_api, parse_custom_id
from app.providers.router import Router
from app.settings import Settings
from app.store.batches import BatchStore, Pending, now_ms

log = logging.getLogger(__name__)

# How many due batches one look takes; how often the runner looks at most.
DUE_LIMIT: Final = 16
LOOK_MS: Final = 1_000
LIVE_CONCURRENCY: Final = 8
# How often a low-priority batch call looks whether the worker's interactive jobs are done.
IDLE_LOOK_S: Final = 0.01


@dataclass(slots=True)
class Outcome:
    """An item's replay: its result (it ended) or the request for the next round."""

    index: int
    custom_id: str
    result: JobResult | None = None
    request: LLMRequest | None = None
    fresh: tuple[Answer, ...] = ()


class BatchRunner:
    def __init__(
        self,
        store: BatchStore,
        router: Router,
        settings: Settings,
        *,
        busy: Callable[[], bool] | None = None,
    ) -> None:
        self.store = store
        self.router = router
        self.settings = settings
        # Whether this process's worker runs interactive jobs (they go first).
        self.busy = busy or (lambda: False)
        self._pool = asyncio.Semaphore(settings.batch_pool_slots)
        self.token = secrets.token_hex(8)
        self._running: dict[str, asyncio.Task[None]] = {}
        self._slots = asyncio.Semaphore(max(settings.batch_concurrency, 1))
        self.live_slots = asyncio.Semaphore(LIVE_CONCURRENCY)

    async def run(self, stop: asyncio.Event) -> None:
        if self.settings.batch_concurrency == 0:
            return
        look_s = min(self.settings.batch_poll_ms, LOOK_MS) / 1000
        while not stop.is_set():
            try:
                await self._look()
            except Exception:
                log.exception("batch runner: looking for due batches failed")
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(stop.wait(), look_s)
        for task in list(self._running.values()):
            task.cancel()
        await asyncio.gather(*self._running.values(), return_exceptions=True)

    async def _look(self) -> None:
        for batch_id in await self.store.due(DUE_LIMIT):
            if batch_id in self._running or self._slots.locked():
                continue
            if not await self.store.lease(batch_id, self.token, self.settings.batch_lease_ms):
                continue
            task = asyncio.create_task(self._leased(batch_id), name=f"batch-{batch_id}")
            self._running[batch_id] = task
            task.add_done_callback(self._forget)

    def _forget(self, task: asyncio.Task[None]) -> None:
        self._running.pop(task.get_name().removeprefix("batch-"), None)

    async def _leased(self, batch_id: str) -> None:
        """One step of ``batch_id`` under its lease, renewed while it runs."""
        async with self._slots:
            step = asyncio.create_task(self.step(batch_id))
            renewer = asyncio.create_task(self._renew(batch_id, step))
            try:
                await step
            except asyncio.CancelledError:
                if not step.cancelled():
                    raise
                log.warning("batch %s: lease lost, step stopped", batch_id)
            except Exception:
                log.exception("batch %s: step failed; tried again later", batch_id)
                await self.store.schedule(batch_id, now_ms() + self.settings.batch_poll_ms)
            finally:
                renewer.cancel()
                with contextlib.suppress(Exception):
                    await self.store.release(batch_id, self.token)

    async def _renew(self, batch_id: str, step: asyncio.Task[None]) -> None:
        every = self.settings.batch_lease_ms / 3000
        while True:
            await asyncio.sleep(every)
            if not await self.store.renew(batch_id, self.token, self.settings.batch_lease_ms):
                step.cancel()
                return

    # -- one step ---------------------------------------------------------------------

    async def step(self, batch_id: str) -> None:
        meta = await self.store.meta(batch_id)
        if meta is None or meta.get("status") != "running":
            if meta is not None:  # ended: its callback queued, if a worker died before
                await self._call_back(_Batch(meta), meta.get("status", ""))
            await self.store.unschedule(batch_id)
            return
        batch = _Batch(meta)
        api = self._api(batch)
        if batch.phase == "poll" and api is not None:
            await self._poll(batch, api)
        elif batch.phase == "ingest" and api is not None:
            await self._ingest(batch, api)
        else:
            await self._submit(batch, api)

    def _api(self, batch: _Batch) -> BatchApi | None:
        try:
            target = self.router.target(batch.template.get("model"))
        except RepromptError:
            return None
        return batch_api(target, discount=self.settings.batch_discount)

    async def _submit(self, batch: _Batch, api: BatchApi | None) -> None:
        """Replay every pending item; end the ones that ended; send the rest's calls."""
        store, batch_id = self.store, batch.id
        resumed = batch.phase == "submitting"
        round_no = batch.round if resumed else batch.round + 1
        stopping = self._stop_reason(batch)
        with tempfile.TemporaryDirectory(prefix="reprompt-batch-") as folder:
            path = Path(folder) / "round.jsonl"
            lines = 0
            with path.open("w", encoding="utf-8") as file:
                async for chunk in store.pending(batch_id, batch.total):
                    outcomes = await asyncio.gather(*(self._replay(batch, p) for p in chunk))
                    await self._finalize(batch, [o for o in outcomes if o.result is not None])
                    if stopping is not None:
                        continue
                    for outcome in outcomes:
                        if outcome.request is None:
                            continue
                        lines += 1
                        if api is not None:
                            file.write(api.line(outcome.index, round_no, outcome.request) + "\n")
            if stopping is not None:
                await self._fail_pending(batch, *stopping)
                return
            if lines == 0:
                await self._end(batch)
                return
            if api is None or batch.live(lines):
                via = "worker_pool" if api is None else "live"
                await store.update(batch_id, {"phase": "live", "round": str(round_no)})
                metrics.record_batch_round(via)
                await self._live(batch, via)
                await store.schedule(batch_id, now_ms())
                await store.update(batch_id, {"phase": "submit"})
                return
            token = f"{batch_id}-r{round_no}"
            if not resumed:
                await store.update(
                    batch_id,
                    {"phase": "submitting", "round": str(round_no), "roundToken": token},
                )
            log.info("batch %s: round %d submitting (%d lines)", batch_id, round_no, lines)
            provider_id = await api.submit(path, token=token)
        # Stored first, before anything else: a lost worker's successor polls this batch.
        await store.update(batch_id, {"providerBatchId": provider_id, "phase": "poll"})
        metrics.record_batch_round("provider_batch")
        log.info("batch %s: round %d sent (%d lines) as %s", batch_id, round_no, lines, provider_id)
        await store.schedule(batch_id, now_ms() + self.settings.batch_poll_ms)

    async def _poll(self, batch: _Batch, api: BatchApi) -> None:
        # Cancelled, or past its deadline: the round out at the provider is stopped too.
        stopping = batch.cancel_requested or now_ms() >= batch.deadline_at
        if stopping and not batch.meta.get("providerCancelled"):
            with contextlib.suppress(RepromptError):
                await api.cancel(batch.provider_batch_id)
            await self.store.update(batch.id, {"providerCancelled": "1"})
        state = await api.poll(batch.provider_batch_id)
        if not state.ended:
            await self.store.update(batch.id, {"providerStatus": state.status})
            await self.store.schedule(batch.id, now_ms() + self.settings.batch_poll_ms)
            return
        await self.store.update(batch.id, {"phase": "ingest", "providerStatus": state.status})
        batch.meta["providerStatus"] = state.status
        await self._ingest(batch, api)

    async def _ingest(self, batch: _Batch, api: BatchApi) -> None:
        """The round's result lines, taken in once each, in chunks."""
        state = await api.poll(batch.provider_batch_id)
        buffer: list[tuple[int, Answer | None]] = []
        cost = 0.0
        async for cid, answer in api.results(state, batch.provider_batch_id):
            parts = parse_custom_id(cid)
            if parts is None or parts[1] != batch.round or not 0 <= parts[0] < batch.total:
                continue
            buffer.append((parts[0], answer))
            if len(buffer) >= 500:
                cost += await self._take(batch, buffer)
                buffer = []
        cost += await self._take(batch, buffer)
        metrics.record_batch_cost("provider_batch", cost)
        await self.store.update(batch.id, {"phase": "submit"})
        await self.store.schedule(batch.id, now_ms())

    async def _take(self, batch: _Batch, buffer: list[tuple[int, Answer | None]]) -> float:
        lines = [(i, a) for i, a in buffer if a is not None]
        if not lines:
            return 0.0
        failing = [i for i, a in lines if isinstance(a, LineFailure)]
        errors = dict(zip(failing, await self.store.errors_of(batch.id, failing), strict=True))
        rows: list[tuple[int, str, str, float, int, int]] = []
        cost = 0.0
        for index, answer in lines:
            if isinstance(answer, LineFailure):
                # A provider error on the line: sent again next round, up to the attempts.
                if errors[index] + 1 < self.settings.batch_line_attempts:
                    rows.append((index, "e", "", 0.0, 0, 0))
                    continue
                rows.append((index, "a", compact_json(stored(answer)), 0.0, 0, 0))
                continue
            usd = answer.cost_usd or 0.0
            usage = answer.usage
            rows.append(
                (
                    index,
                    "a",
                    compact_json(stored(answer)),
                    usd,
                    0 if usage is None else usage.input_tokens,
                    0 if usage is None else usage.output_tokens,
                )
            )
            cost += usd
        await self.store.ingest(batch.id, batch.round, rows)
        return cost

    async def _live(self, batch: _Batch, via: str) -> None:
        """The pending items' calls made now, on this worker, a few at a time."""

        gate = self._low_priority if via == "worker_pool" else None

        async def one(pending: Pending) -> Outcome:
            async with self.live_slots:
                outcome = await self._replay(batch, pending, live=True, gate=gate)
            fresh = list(outcome.fresh)
            if fresh:
                usd = sum(a.cost_usd or 0.0 for a in fresh if isinstance(a, LLMResponse))
                tin = sum(
                    a.usage.input_tokens for a in fresh if isinstance(a, LLMResponse) and a.usage
                )
                tout = sum(
                    a.usage.output_tokens for a in fresh if isinstance(a, LLMResponse) and a.usage
                )
                answers = [compact_json(a) for a in pending.answers]
                answers += [compact_json(stored(a)) for a in fresh]
                await self.store.append_live(batch.id, pending.index, answers, usd, tin, tout)
                metrics.record_batch_cost(via, usd)
            if outcome.result is not None:  # each item's result as soon as it has one
                await self._finalize(batch, [outcome])
            return outcome

        async for chunk in self.store.pending(batch.id, batch.total):
            await asyncio.gather(*(one(p) for p in chunk))

    @contextlib.asynccontextmanager
    async def _low_priority(self) -> AsyncIterator[None]:
        """A batch item's call on the worker pool: one of ``batch_pool_slots``, started only
        while this worker runs no interactive job, so such a job waits at most for the
        calls already in flight."""
        async with self._pool:
            # The worker signals no "idle" event; a 10 ms look bounds the wait it adds.
            while self.busy():  # noqa: ASYNC110
                await asyncio.sleep(IDLE_LOOK_S)
            yield

    async def _replay(
        self,
        batch: _Batch,
        pending: Pending,
        *,
        live: bool = False,
        gate: Callable[[], contextlib.AbstractAsyncContextManager[None]] | None = None,
    ) -> Outcome:
        """Run the item's loop over its answers: its result, or its next call."""
        cid = str(pending.item.get("customId", ""))
        try:
            spec = item_spec(batch.template, BatchItem.model_validate(pending.item))
        except ValueError as exc:
            envelope = Envelope.failure(codes.INVALID_INPUT, str(exc)[:500])
            return Outcome(pending.index, cid, JobResult(envelope, (), (), ()))
        answers = [answer_of(a) for a in pending.answers]
        client = ReplayClient(self.router, answers, live=live, gate=gate)
        try:
            result = await run_job(spec, Runtime(client=client))
        except Deferred as more:
            return Outcome(pending.index, cid, request=more.request, fresh=tuple(client.fresh))
        return Outcome(pending.index, cid, result=result, fresh=tuple(client.fresh))

    async def _finalize(self, batch: _Batch, done: list[Outcome]) -> None:
        rows = []
        counts = {"succeeded": 0, "failed": 0}
        for outcome in done:
            assert outcome.result is not None
            envelope = outcome.result.envelope
            status = "succeeded" if envelope.status == codes.RESULT_SUCCESS else "failed"
            line = {
                "customId": outcome.custom_id,
                "status": status,
                "result": envelope.model_dump(mode="json"),
                "turns": [t.model_dump(mode="json") for t in outcome.result.turns],
            }
            wasted = 0.0
            if envelope.execution is not None:
                wasted = envelope.execution.wasted_cost or 0.0
            rows.append((outcome.index, status, compact_json(line), wasted))
            counts[status] += 1
        written = await self.store.finalize(batch.id, rows)
        if written == len(rows):
            for outcome_name, count in counts.items():
                metrics.record_batch_items(outcome_name, count)

    def _stop_reason(self, batch: _Batch) -> tuple[str, str] | None:
        if batch.cancel_requested:
            return codes.CANCELLED, "the batch was cancelled"
        if now_ms() >= batch.deadline_at:
            return codes.DEADLINE_EXCEEDED, "the batch's deadline passed"
        cap = batch.options.get("maxCostUsd")
        if cap is not None and batch.cost_usd >= float(cap):
            return codes.BUDGET_EXHAUSTED, f"the batch's cost cap ({cap} USD) was reached"
        return None

    async def _fail_pending(self, batch: _Batch, code: str, detail: str) -> None:
        async for chunk in self.store.pending(batch.id, batch.total):
            done = [
                Outcome(
                    p.index,
                    str(p.item.get("customId", "")),
                    JobResult(Envelope.failure(code, detail), (), (), ()),
                )
                for p in chunk
            ]
            await self._finalize(batch, done)
        await self._end(batch, "cancelled" if code == codes.CANCELLED else "completed")

    async def _end(self, batch: _Batch, status: str = "completed") -> None:
        # The status first, then the callback (its body is the batch as it ended); the
        # batch stays due between the two, so a worker lost there leaves the callback to
        # the next one (step).
        callback = batch.options.get("callback")
        await self.store.end(
            batch.id,
            batch.tenant,
            {"status": status, "phase": "ended"},
            keep_due=callback is not None,
        )
        log.info("batch %s %s after %d round(s)", batch.id, status, batch.round)
        await self._call_back(batch, status)
        await self.store.unschedule(batch.id)
        if self.on_end is not None:
            await self.on_end(batch.id)

    async def _call_back(self, batch: _Batch, status: str) -> None:
        """Queue the batch's callback for ``status``, if it asks for it (once)."""
        callback = batch.options.get("callback")
        if callback is None or status not in callback.get("events", ()):
            return
        event = cast(BatchEvent, status)
        if await self.store.callbacks.queue(
            batch.id, tenant=batch.tenant, callback=callback, event=event
        ):
            log.info("batch %s: its %s callback is queued", batch.id, status)

    on_end: Callable[[str], Awaitable[None]] | None = None


class _Batch:
    """A batch's fields as a step reads them."""

    def __init__(self, meta: dict[str, str]) -> None:
        self.meta = meta
        self.id = meta["id"]
        self.tenant = meta["tenant"]
        self.options: dict[str, Any] = json.loads(meta["options"])
        self.template: dict[str, Any] = self.options["template"]
        self.phase = meta.get("phase", "submit")
        self.round = int(meta.get("round", "0"))
        self.total = int(meta["total"])
        self.deadline_at = int(meta["deadlineAt"])
        self.cost_usd = float(meta.get("costUsd", "0"))
        self.cancel_requested = meta.get("cancelRequested") == "1"
        self.provider_batch_id = meta.get("providerBatchId", "")

    def live(self, pending: int) -> bool:
        """Whether this round's calls go live (the re-ask policy); round 1 never does
        unless asked."""
        policy = self.options.get("reask", "auto")
        if policy == "live":
            return True
        if policy == "batch" or self.round == 0:
            return False
        return pending <= int(self.options.get("liveBelow", 20))
