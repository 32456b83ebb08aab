"""The job store: jobs, the queue, leases and events, all in Redis — the service's only state.

Two roles over one Redis client (injected: one pool per process role): ``JobStore`` is
what the API uses (``jobs.py``: ``submitting.py``, ``reading.py``, ``listing.py``),
``Leases`` what workers use (``leases.py``: ``claiming.py``, ``idle.py``, ``writes.py``,
``expiry.py``). Each Lua script's arguments are typed in ``protocol.py``. This package
is the only one that speaks Redis; every key is built in ``keys.py``; every state change
runs as one Lua script (``lua/``) on one shard, so a crash or a race between two steps can
never lose or duplicate a job. Guarantees:

* A job is one hash on one shard, and in exactly one place: its tenant's queue
  (``queued``), the shard's lease set (``in_progress``) or nowhere (terminal). Claim, reap,
  release and cancel move it atomically.
* Fairness: a shard's queue is one list per tenant and a ring of the tenants with queued
  jobs; claims take tenants in turn, so one tenant's backlog never starves another's.
* Fencing: the attempt number of a claim is its token; every worker write checks, in the
  same script, that the job is ``in_progress`` under that token.
* Terminal states never change. On the terminal transition the job gets ``retention_s``
  to live; ``job_end`` is always its last event.
* Nothing waits on a Redis connection: long-polls, event streams, idle workers and
  cancellations watch one pub/sub subscription per role (``hub.py``), to the channels
  that role waits on only (``Role.HEARS``): a publish wakes only the processes that use it.
* Completion callbacks: the script that moves a job to an event its callback asks for
  writes the delivery too (``outbox.py``, ``lua/outbox.lua``), so none is lost in a crash.
* Time is the Redis server's clock (``TIME`` inside the scripts), so leases do not depend on
  the clocks of the hosts that run workers and reapers. Job ids carry the submitting host's
  clock only to make them sort by time.

Records are the ``app.core`` models (envelope, turn records, events) as JSON; what comes
back out is typed (``records.py``).
"""

from app.store.connection import StoreOptions, connect
from app.store.errors import (
    IdempotencyConflict,
    NoDelivery,
    NotWaiting,
    QueueFull,
    StoreFull,
    StoreUnavailable,
    TenantQuota,
)
from app.store.ids import is_job_id, new_job_id, shard_of
from app.store.jobs import STATUSES, JobStore, body_digest
from app.store.leases import MAX_CLAIM, Leases, Written
from app.store.outbox import Leased, Outbox
from app.store.records import Claim, Event, JobView, ReapResult, public_job, public_job_json

__all__ = [
    "MAX_CLAIM",
    "STATUSES",
    "Claim",
    "Event",
    "IdempotencyConflict",
    "JobStore",
    "JobView",
    "Leased",
    "Leases",
    "NoDelivery",
    "NotWaiting",
    "Outbox",
    "QueueFull",
    "ReapResult",
    "StoreFull",
    "StoreOptions",
    "StoreUnavailable",
    "TenantQuota",
    "Written",
    "body_digest",
    "connect",
    "is_job_id",
    "new_job_id",
    "public_job",
    "public_job_json",
    "shard_of",
]
