"""The worker: claims jobs from Redis, runs the turn loop on each, commits the result.

    from app.worker import Worker
    worker = Worker(leases, router, settings)
    await worker.run(stop)          # until ``stop`` is set; then drains

Up to ``settings.worker_concurrency`` jobs run at once. Each claim carries a fencing token
and a lease that a heartbeat renews; every write is fenced by that token, so a worker that
lost its lease can never overwrite the job's new owner. ``reprompt worker`` runs one in a
process of its own (``app.assembly.run_worker``). The parts, in a job's order:

- ``claims.py``: the claim loop (slots, idle waits, hand-offs started);
- ``running.py``: one job, the turn loop in its trace span, with its tools and webhooks;
- ``progress.py``: the loop's events written once a phase has lasted;
- ``bookkeeping.py``: metrics and log lines, paid once the job waits;
- ``pause.py``: pauses for client tools, and resumes;
- ``commit.py``: the commit through a Redis blip, or the release;
- ``upkeep.py``: heartbeats, cancellations, the reaper;
- ``drain.py``: stopping; ``callbacks.py``: the completion callbacks' sender;
- ``worker.py``: ``Worker``, the parts joined; ``job.py``, ``waits.py``: what they share.

Every part logs as ``app.worker``.
"""

from app.worker.callbacks import CallbackSender
from app.worker.claims import IDLE_WAIT_S
from app.worker.progress import FLUSH_AFTER_S
from app.worker.worker import Worker, default_worker_id

__all__ = ["FLUSH_AFTER_S", "IDLE_WAIT_S", "CallbackSender", "Worker", "default_worker_id"]
