"""A job's metrics and log lines, owed on its way to the model and paid once it waits.

    books.owe(job.id, functools.partial(started, claim, time.time()))
    ...
    books.catch_up()   # before anything else the worker logs or counts for the job

Paying once the job's task waits (for the model, for Redis) keeps them off the job's way
to its model call and its commit; one payment covers every job of a pass of the loop.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable

from app import logs, metrics
from app.core.wire.envelope import Envelope
from app.core.wire.events import TurnEnded
from app.store import Claim

# Every part of the worker logs as "app.worker", as it always has (docs/worker.md).
log = logging.getLogger("app.worker")


class Bookkeeping:
    """The bookkeeping owed by every job of this worker, in order."""

    def __init__(self) -> None:
        self._owed: list[tuple[str, Callable[[], None]]] = []  # (job id, work)

    def owe(self, job_id: str, work: Callable[[], None]) -> None:
        """Do ``work`` once the running task waits, after everything owed before it."""
        owed = self._owed
        owed.append((job_id, work))
        if len(owed) == 1:
            asyncio.get_running_loop().call_soon(self.catch_up)

    def catch_up(self) -> None:
        """Do everything owed, in order, now. A failure is logged, and the rest done."""
        owed = self._owed
        if not owed:
            return
        self._owed = []
        for job_id, work in owed:
            try:
                work()
            except Exception:
                log.exception("job %s: its bookkeeping failed", job_id)


def started(claim: Claim, now: float) -> None:
    """Count a job started at ``now`` (``time.time()``), and log its line, stamped then.

        job j_… started: attempt 1, tenant acme, queued 0.002s

    Logged as it starts: a worker killed mid-job leaves this line to say it held the job.
    """
    waited_s = max(0.0, now - claim.created_at_ms / 1000)
    metrics.job_started(waited_s)
    if log.isEnabledFor(logging.INFO):
        logs.info(
            log,
            f"job {claim.job_id} started: attempt {claim.attempt}, tenant {claim.tenant}, "
            f"queued {waited_s:.3f}s",
            now,
        )


def count_turn(event: TurnEnded) -> None:
    """Count a model call from its turn's end, and its tool calls whose outcome is known.

    A client's call is counted when it is answered.
    """
    record = event.record
    metrics.record_turn(record, calls_left=event.calls_left)
    metrics.record_tool_calls(c for c in record.tool_call_details if c.outcome != "requires_action")


def ended(job_id: str, envelope: Envelope, duration_s: float) -> None:
    """Count a committed job and log its line (made whole here: no arguments to format).

        job j_… succeeded: 1 calls, 152 tokens, $0.00012, 0.031s

    ``failed (budget-exhausted): …``; ``$?`` when a price is unknown.
    """
    metrics.record_job(envelope, duration_s=duration_s)
    if not log.isEnabledFor(logging.INFO):  # else nothing of the line is worked out
        return
    execution = envelope.execution
    error = f" ({envelope.error})" if envelope.error else ""
    if execution is None:
        spent = "0 calls"
    else:
        cost = "?" if execution.cost is None else f"{execution.cost:.6g}"
        spent = f"{execution.llm_calls} calls, {execution.tokens_used} tokens, ${cost}"
    logs.info(log, f"job {job_id} {envelope.job_status}{error}: {spent}, {duration_s:.3f}s")
