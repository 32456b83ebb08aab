"""What each Lua script is sent: its KEYS and ARGV as typed structures, built by keyword.

    reply = await scripts.run(
        HEARTBEAT,
        HeartbeatKeys(job=shard.job(job_id), leases=shard.leases),
        HeartbeatArgs(id=job_id, token=token, lease_ms=30_000),
    )

Each script opens by naming what it reads, in the order sent (``local job, leases =
unpack(KEYS)``); tests/store/test_protocol.py checks those names against these fields.
A field left ``None`` is not sent: only the last fields are optional. Values go as the
scripts read them ('' for "none", '1'/'' for flags).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from dataclasses import dataclass
from operator import attrgetter
from typing import Any, Final, Generic, TypeVar

Value = str | int | float


class Sent:
    """A script's KEYS or ARGV: the fields of a dataclass, sent in their order."""

    __slots__ = ()

    def values(self) -> tuple[Value, ...]:
        """The fields' values in order, without the trailing ones left ``None``."""
        getter = _GETTERS.get(type(self)) or _getter(type(self))
        values: tuple[Any, ...] = getter(self)
        while values and values[-1] is None:
            values = values[:-1]
        return values


_GETTERS: dict[type[Sent], Callable[[Sent], tuple[Any, ...]]] = {}


def _getter(cls: type[Sent]) -> Callable[[Sent], tuple[Any, ...]]:
    names = [field.name for field in dataclasses.fields(cls)]  # type: ignore[arg-type]
    if len(names) == 1:
        (name,) = names
        getter: Callable[[Sent], tuple[Any, ...]] = lambda sent: (getattr(sent, name),)  # noqa: E731
    else:
        getter = attrgetter(*names)
    _GETTERS[cls] = getter
    return getter


K = TypeVar("K", bound=Sent)
A = TypeVar("A", bound=Sent)


@dataclass(frozen=True, slots=True)
class Script(Generic[K, A]):
    """A Lua script (``lua/<name>.lua``) and the types of what it is sent."""

    name: str
    keys: type[K]
    args: type[A]
    # What ARGV holds past ``args``, read by the script in a loop ('' = nothing).
    tail: str = ""


# -- the API's scripts -----------------------------------------------------------------


@dataclass(frozen=True, slots=True, kw_only=True)
class SubmitKeys(Sent):
    job: str
    tenant_queue: str
    ring: str
    tenant_index: str
    tenant_bytes: str  # this byte-cap window's count
    idle: str  # the idle workers (lua/claim.lua)
    leases: str  # a job handed to an idle worker is leased in the script
    running: str
    idempotency: str | None = None  # the Idempotency-Key's key; None: no key given


@dataclass(frozen=True, slots=True, kw_only=True)
class SubmitArgs(Sent):
    id: str
    tenant: str
    digest: str  # the body's, checked against an Idempotency-Key's ('' without one)
    spec: str
    metadata: str
    model: str
    idempotency_key: str
    queued_result: str
    max_queued: int  # per tenant and shard
    idempotency_ttl_s: int
    job_bytes: int
    max_tenant_bytes: int  # per tenant, shard and window; 0: no cap
    window_ttl_s: int
    work_channel: str
    shard: int
    created_ms: int
    job_prefix: str
    queued_event: str
    index_expires_ms: int  # when the tenant index expires, covering this index window
    id_floor: str  # the smallest id a stored job can have
    callback: str  # '' = none (lua/outbox.lua)
    trace: str  # the client's trace context ('' = none; app/tracecontext.py)
    index_mark: str  # this index window's mark: a member below every id
    stale_ms: int  # how old an idle worker's registration may be
    exact_publish: str  # '1' when PUBLISH counts every subscriber (one Redis, no cluster)
    no_handoff: str  # '1': try no hand-off, wake one worker
    server_ms: int | str  # Redis-now as estimated (app/store/clock.py); '': read TIME
    handoff_head: str  # the hand-off message's claim values but the spec ('' = no hand-off)


@dataclass(frozen=True, slots=True, kw_only=True)
class CancelKeys(Sent):
    job: str
    tenant_queue: str
    ring: str
    leases: str
    running: str
    actions: str


@dataclass(frozen=True, slots=True, kw_only=True)
class CancelArgs(Sent):
    id: str
    tenant: str
    result: str
    job_end: str
    retention_s: int
    done_channel: str
    cancel_channel: str
    finished_ms: int


@dataclass(frozen=True, slots=True, kw_only=True)
class OutputsKeys(Sent):
    job: str
    tenant_queue: str
    ring: str
    actions: str


@dataclass(frozen=True, slots=True, kw_only=True)
class OutputsArgs(Sent):
    id: str
    tenant: str
    outputs: str
    digest: str
    pause: int  # the pause the outputs answer
    outputs_event: str
    queued_result: str
    work_channel: str
    shard: int
    events_channel: str


@dataclass(frozen=True, slots=True, kw_only=True)
class StatsKeys(Sent):
    ring: str


@dataclass(frozen=True, slots=True, kw_only=True)
class StatsArgs(Sent):
    queue_prefix: str
    job_prefix: str
    max_tenants: int


# -- the workers' scripts --------------------------------------------------------------


@dataclass(frozen=True, slots=True, kw_only=True)
class ClaimKeys(Sent):
    ring: str
    leases: str
    running: str
    idle: str


@dataclass(frozen=True, slots=True, kw_only=True)
class ClaimArgs(Sent):
    job_prefix: str
    queue_prefix: str
    worker_id: str
    lease_ms: int
    wanted: int
    max_in_flight: int  # per tenant; 0: no cap
    listed_as: str  # "<token>/<lease ms>/<cap>/<worker id>"; '': not to be listed
    held_entry: str  # its entry on the idle list ('' = none)
    renew: str  # '1': renew the entry
    work_channel: str  # '': no hand-on of the wake-up
    shard: int
    stale_ms: int
    exact_publish: str
    max_copies: int  # the most copies of its entry a registration lists


@dataclass(frozen=True, slots=True, kw_only=True)
class WriteKeys(Sent):
    job: str


@dataclass(frozen=True, slots=True, kw_only=True)
class WriteArgs(Sent):
    token: int
    turn: str  # '' = none
    turn_spend: str
    events: str  # JSON objects, comma-separated ('' = none)
    result: str  # the in-progress envelope
    events_channel: str
    id: str


@dataclass(frozen=True, slots=True, kw_only=True)
class CompleteKeys(Sent):
    job: str
    leases: str
    running: str
    idle: str | None = None  # with ``relist_entry``


@dataclass(frozen=True, slots=True, kw_only=True)
class CompleteArgs(Sent):
    id: str
    token: int
    status: str
    result: str
    history: str
    transcript: str
    turn: str  # '' = none
    turn_spend: str
    events: str  # appended before job_end
    retention_s: int
    done_channel: str
    finished_ms: int
    view_max_bytes: int  # the most a done message carries of the view (0: only the id)
    relist_entry: str | None = None  # a copy of the worker's idle-list entry to list


@dataclass(frozen=True, slots=True, kw_only=True)
class PauseKeys(Sent):
    job: str
    leases: str
    running: str
    actions: str


@dataclass(frozen=True, slots=True, kw_only=True)
class PauseArgs(Sent):
    id: str
    token: int
    checkpoint: str
    action: str
    result: str
    turn: str
    turn_spend: str
    events: str  # ending with requires_action
    expires_ms: int
    done_channel: str
    events_channel: str


@dataclass(frozen=True, slots=True, kw_only=True)
class ReleaseKeys(Sent):
    job: str
    leases: str
    tenant_queue: str
    ring: str
    running: str


@dataclass(frozen=True, slots=True, kw_only=True)
class ReleaseArgs(Sent):
    id: str
    token: int
    queued_result: str
    work_channel: str
    shard: int


@dataclass(frozen=True, slots=True, kw_only=True)
class HeartbeatKeys(Sent):
    job: str
    leases: str


@dataclass(frozen=True, slots=True, kw_only=True)
class HeartbeatArgs(Sent):
    id: str
    token: int
    lease_ms: int


@dataclass(frozen=True, slots=True, kw_only=True)
class HeartbeatsKeys(Sent):
    leases: str


@dataclass(frozen=True, slots=True, kw_only=True)
class HeartbeatsArgs(Sent):
    job_prefix: str
    lease_ms: int


@dataclass(frozen=True, slots=True, kw_only=True)
class ReapKeys(Sent):
    leases: str
    ring: str
    running: str


@dataclass(frozen=True, slots=True, kw_only=True)
class ReapArgs(Sent):
    cutoff_ms: int | str  # '' = the server's clock
    max_attempts: int
    job_prefix: str
    queue_prefix: str
    failed_result: str
    failed_event: str
    retention_s: int
    queued_result: str
    batch: int
    done_channel: str
    work_channel: str
    shard: int


@dataclass(frozen=True, slots=True, kw_only=True)
class ExpireKeys(Sent):
    actions: str
    ring: str


@dataclass(frozen=True, slots=True, kw_only=True)
class ExpireArgs(Sent):
    job_prefix: str
    queue_prefix: str
    batch: int
    requeued_event: str
    queued_result: str
    work_channel: str
    shard: int
    events_channel: str


# -- the callback outbox's scripts -----------------------------------------------------


@dataclass(frozen=True, slots=True, kw_only=True)
class OutboxKeys(Sent):
    outbox: str


@dataclass(frozen=True, slots=True, kw_only=True)
class DeliveryLeaseArgs(Sent):
    job_prefix: str
    wanted: int
    lease_ms: int
    token: str
    slots: int  # the sender's: a tenant gets at most its share (#29)
    scan: int  # due deliveries looked at, to find other tenants' behind one tenant's
    inflight: str  # JSON tenant -> deliveries this sender holds
    hold_ms: int  # a tenant at its share: its other due deliveries pushed back this long


@dataclass(frozen=True, slots=True, kw_only=True)
class DeliveryRecordArgs(Sent):
    job: str
    member: str  # "<id> <event>"
    callback_event: str
    token: str
    outcome: str
    status: int | str  # '' = none
    error_text: str
    wait_ms: int
    window_ms: int


@dataclass(frozen=True, slots=True, kw_only=True)
class RedeliverKeys(Sent):
    job: str
    outbox: str


@dataclass(frozen=True, slots=True, kw_only=True)
class RedeliverArgs(Sent):
    id: str
    tenant: str
    notify_channel: str


# -- the per-tenant quotas every API replica shares (app/store/quotas.py) ---------------


@dataclass(frozen=True, slots=True, kw_only=True)
class RateKeys(Sent):
    bucket: str


@dataclass(frozen=True, slots=True, kw_only=True)
class RateArgs(Sent):
    interval_ms: float  # one token comes back every this long
    burst: int
    cost: int
    now: int | str  # '' = the server's clock


@dataclass(frozen=True, slots=True, kw_only=True)
class HoldKeys(Sent):
    waits: str


@dataclass(frozen=True, slots=True, kw_only=True)
class HoldArgs(Sent):
    id: str
    most: int
    lease_ms: int
    keep_ms: int  # the longest lease: how long the set outlives its last change
    renew: str  # '1': extend the lease of ``id``
    now: int | str  # '' = the server's clock


@dataclass(frozen=True, slots=True, kw_only=True)
class SpendKeys(Sent):
    job: str


@dataclass(frozen=True, slots=True, kw_only=True)
class SpendArgs(Sent):
    attempt: int  # the claim the run held
    result: str  # the cancelled envelope, counting the run's calls
    turns: str  # turn records, one a line
    spends: str  # each one's spend, one a line
    ids: str  # each one's "claim:index", one a line


SUBMIT: Final = Script("submit", SubmitKeys, SubmitArgs)
CLAIM: Final = Script("claim", ClaimKeys, ClaimArgs)
WRITE: Final = Script("write", WriteKeys, WriteArgs)
COMPLETE: Final = Script("complete", CompleteKeys, CompleteArgs)
HEARTBEAT: Final = Script("heartbeat", HeartbeatKeys, HeartbeatArgs)
HEARTBEATS: Final = Script("heartbeats", HeartbeatsKeys, HeartbeatsArgs, tail="id, token pairs")
RELEASE: Final = Script("release", ReleaseKeys, ReleaseArgs)
CANCEL: Final = Script("cancel", CancelKeys, CancelArgs)
REAP: Final = Script("reap", ReapKeys, ReapArgs)
STATS: Final = Script("stats", StatsKeys, StatsArgs)
PAUSE: Final = Script("pause", PauseKeys, PauseArgs)
OUTPUTS: Final = Script("outputs", OutputsKeys, OutputsArgs)
EXPIRE: Final = Script("expire", ExpireKeys, ExpireArgs)
DELIVERY_LEASE: Final = Script("delivery_lease", OutboxKeys, DeliveryLeaseArgs)
DELIVERY_RECORD: Final = Script("delivery_record", OutboxKeys, DeliveryRecordArgs)
DELIVERY_REDELIVER: Final = Script("delivery_redeliver", RedeliverKeys, RedeliverArgs)
RATE: Final = Script("rate", RateKeys, RateArgs)
HOLD: Final = Script("hold", HoldKeys, HoldArgs)
SPEND: Final = Script("spend", SpendKeys, SpendArgs)

SCRIPTS: Final[tuple[Script[Any, Any], ...]] = (
    SUBMIT,
    CLAIM,
    WRITE,
    COMPLETE,
    HEARTBEAT,
    HEARTBEATS,
    RELEASE,
    CANCEL,
    REAP,
    STATS,
    PAUSE,
    OUTPUTS,
    EXPIRE,
    DELIVERY_LEASE,
    DELIVERY_RECORD,
    DELIVERY_REDELIVER,
    RATE,
    HOLD,
    SPEND,
)
