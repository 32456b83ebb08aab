"""The job store: jobs, the queue, leases and events, all in Redis — the service's only state.

Two roles over one Redis client (injected: one pool per process): ``JobStore`` is what the
API uses (``jobs.py``), ``Leases`` what workers use (``leases.py``). This package is the
only one that speaks Redis; every key is built in ``keys.py``; every state change that
touches more than one key runs as one Lua script (``lua/``), so a crash or a race between
two steps can never lose or duplicate a job. Guarantees:

* A job is in exactly one place: the queue (``queued``), the lease set (``in_progress``) or
  nowhere (terminal). Claim, reap, release and cancel move it atomically.
* Fencing: every claim takes a new token from one counter; every worker write checks, in
  the same script, that the job is ``in_progress`` under that token.
* Terminal states never change. On the terminal transition the job hash, its turns and its
  event stream get ``retention_s`` to live; ``job_end`` is always the stream's last event.
* Time is the Redis server's clock (``TIME`` inside the scripts), so leases do not depend on
  the clocks of the hosts that run workers and reapers. Job ids carry the submitting host's
  clock only to make them sort by time.

Records are the ``app.core`` models (envelope, turn records, events) as JSON; what comes
back out is typed (``records.py``).
"""

from app.store.connection import StoreOptions, connect
from app.store.errors import IdempotencyConflict, QueueFull, StoreUnavailable
from app.store.ids import is_job_id, new_job_id
from app.store.jobs import STATUSES, JobStore, body_digest
from app.store.leases import Leases
from app.store.records import Claim, Event, JobView, ReapResult

__all__ = [
    "STATUSES",
    "Claim",
    "Event",
    "IdempotencyConflict",
    "JobStore",
    "JobView",
    "Leases",
    "QueueFull",
    "ReapResult",
    "StoreOptions",
    "StoreUnavailable",
    "body_digest",
    "connect",
    "is_job_id",
    "new_job_id",
]
