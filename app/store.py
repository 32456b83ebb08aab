"""The job store: jobs, the queue, leases and events, all in Redis — the service's only state.

The Redis client is injected (one pool per process, built in the lifespan or the worker's
start-up); this module is the only one that speaks Redis. Every state change that touches
more than one key runs as one Lua script (``app/lua/``), so a crash or a race between two
steps can never lose or duplicate a job::

    store = JobStore(redis, prefix=settings.key_prefix, lease_ms=settings.lease_ms)

    # API side
    job, created = await store.submit(tenant="acme", spec=body, idempotency_key=key)
    job = await store.wait(job.id, tenant="acme", wait_ms=30_000)   # long-poll, no polling
    events = await store.events(job.id, after=last_event_id, block_ms=15_000)

    # worker side
    claim = await store.claim("worker-1")            # None: queue empty
    if claim is None:
        await store.wait_for_work(timeout_s=5)
    ok = await store.record_turn(claim.job_id, claim.token, turn, progress)
    ok = await store.complete(claim.job_id, claim.token, envelope=..., history=..., transcript=...)
    # ok is False when the lease was lost (reaped, cancelled): nothing was written

Guarantees:

* A job is in exactly one place: the queue (``queued``), the lease set (``in_progress``) or
  nowhere (terminal). Claim, reap, release and cancel move it atomically.
* Fencing: every claim takes a new token from one counter; every worker write checks, in
  the same script, that the job is ``in_progress`` under that token. A paused worker that
  wakes after its lease was reaped (or the job cancelled) writes nothing.
* Terminal states never change. On the terminal transition the job hash, its turns and its
  event stream get ``retention_s`` to live; ``job_end`` is always the stream's last event.
* Time is the Redis server's clock (``TIME`` inside the scripts), so leases do not depend on
  the clocks of the hosts that run workers and reapers. Job ids carry the submitting host's
  clock only to make them sort by time.

Errors (both part of ``app.errors``' tree)::

    InvalidInput
    └── IdempotencyConflict   422  same Idempotency-Key, different body
    RepromptError
    └── QueueFull             503  the queue holds max_queued jobs; retry after retry_after_s
"""

from __future__ import annotations

import asyncio
import base64
import binascii
import contextlib
import functools
import hashlib
import inspect
import json
import re
import secrets
import threading
import time
from collections.abc import AsyncGenerator, Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from functools import cache
from importlib import resources
from typing import Any, ClassVar, Final, Literal, ParamSpec, TypeVar, cast

from redis.asyncio import Redis
from redis.commands.core import AsyncScript
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import RedisError
from redis.exceptions import TimeoutError as RedisTimeoutError
from redis.typing import KeyT, StreamIdT

from app.core import codes
from app.core.envelope import Envelope
from app.errors import InvalidInput, RepromptError
from app.keys import Keys

JobStatus = Literal["queued", "in_progress", "succeeded", "failed", "cancelled"]
STATUSES: Final[frozenset[str]] = frozenset(
    {"queued", "in_progress", "succeeded", "failed", "cancelled"}
)
TERMINAL: Final[frozenset[str]] = frozenset({"succeeded", "failed", "cancelled"})

JOB_ID_PATTERN: Final = re.compile(r"^job_[0-7][0-9a-hjkmnp-tv-z]{25}$")
_STREAM_ID: Final = re.compile(r"^\d{1,20}(-\d{1,20})?$")
# Crockford's base32, lower case: its characters sort in the order of their values.
_ALPHABET: Final = "0123456789abcdefghjkmnpqrstvwxyz"

_WAKE_CAP: Final = 1024  # wake tokens kept at most; more would only wake workers for nothing
_REAP_BATCH: Final = 100
_PUBSUB_POLL_S: Final = 10.0
# With a status filter, ids looked at per call before a (possibly short) page is returned.
_LIST_SCAN_CAP: Final = 1000
_MAX_LIST_LIMIT: Final = 1000


class StoreUnavailable(RepromptError):
    """Redis did not answer (connection refused, reset or timed out). Retry later."""

    code = "store-unavailable"
    status = 503
    retryable = True
    retry_after_s: ClassVar[int] = 5


_P = ParamSpec("_P")
_T = TypeVar("_T")


def _edge(method: Callable[_P, Awaitable[_T]]) -> Callable[_P, Awaitable[_T]]:
    """Map redis-py's transport failures to ``StoreUnavailable`` here, at the edge."""

    @functools.wraps(method)
    async def mapped(*args: _P.args, **kwargs: _P.kwargs) -> _T:
        try:
            return await method(*args, **kwargs)
        except (RedisConnectionError, RedisTimeoutError) as exc:
            raise StoreUnavailable(f"Redis is not reachable ({type(exc).__name__})") from exc

    return mapped


class IdempotencyConflict(InvalidInput):
    """The ``Idempotency-Key`` was already used by this tenant with a different body."""

    def __init__(self, detail: str | None = None) -> None:
        super().__init__(
            detail
            or "this Idempotency-Key was already used with a different request body; "
            "use a new key for a new job",
            field="Idempotency-Key",
        )


class QueueFull(RepromptError):
    """The queue holds ``max_queued`` jobs; the client should retry after ``retry_after_s``."""

    code: ClassVar[str] = "queue-full"
    status: ClassVar[int] = 503
    retryable: ClassVar[bool] = True

    def __init__(self, depth: int, *, retry_after_s: int = 5) -> None:
        super().__init__(f"the job queue is full ({depth} jobs waiting); retry later")
        self.depth = depth
        self.retry_after_s = retry_after_s


@dataclass(frozen=True)
class JobView:
    """A job as it is stored at one moment. ``to_dict()`` is the API's camelCase shape."""

    id: str
    tenant: str
    status: JobStatus
    created_at: str
    started_at: str | None
    finished_at: str | None
    attempts: int
    result: dict[str, Any]
    turns: list[dict[str, Any]]
    history: list[dict[str, Any]]
    transcript: list[dict[str, Any]]
    metadata: dict[str, str]
    model: str | None
    idempotency_key: str | None
    last_event_id: str

    @property
    def terminal(self) -> bool:
        return self.status in TERMINAL

    def to_dict(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "status": self.status,
            "createdAt": self.created_at,
            "startedAt": self.started_at,
            "finishedAt": self.finished_at,
            "attempts": self.attempts,
            "result": self.result,
            "turns": self.turns,
            "history": self.history,
            "transcript": self.transcript,
            "metadata": self.metadata,
            "model": self.model,
            "idempotencyKey": self.idempotency_key,
        }


@dataclass(frozen=True)
class Event:
    """One entry of a job's event stream; ``id`` is the stream id (SSE ``id:``)."""

    id: str
    name: str
    data: dict[str, Any]


@dataclass(frozen=True)
class Claim:
    """A leased job: write with ``token``; ``attempt`` counts claims (1 = first)."""

    job_id: str
    token: int
    attempt: int
    spec: dict[str, Any]
    tenant: str
    created_at_ms: int
    model: str | None = None  # as given to ``submit``


@dataclass(frozen=True)
class ReapResult:
    requeued: list[str]
    failed: list[str]


class _JobIds:
    """``job_`` + 26 base32 characters: 48 bits of ms time, then 80 random bits (ULID-like).

    Ids sort by creation time (the list index relies on it) and cannot be guessed. Within one
    millisecond of one process they still increase: the random part grows by a random step
    (up to 2**40) instead of being drawn afresh, so it stays unpredictable.
    """

    _RANDOM_BITS: Final = 80

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._last_ms = -1
        self._last_random = 0

    def __call__(self, now_ms: int | None = None) -> str:
        ms = (int(time.time() * 1000) if now_ms is None else now_ms) & (2**48 - 1)
        with self._lock:
            if ms <= self._last_ms:
                ms = self._last_ms
                random = self._last_random + 1 + secrets.randbits(40)
                if random >= 2**self._RANDOM_BITS:  # practically never: borrow the next ms
                    ms, random = ms + 1, secrets.randbits(self._RANDOM_BITS)
            else:
                random = secrets.randbits(self._RANDOM_BITS)
            self._last_ms, self._last_random = ms, random
        n = (ms << self._RANDOM_BITS) | random
        chars = []
        for _ in range(26):
            chars.append(_ALPHABET[n & 31])
            n >>= 5
        return "job_" + "".join(reversed(chars))


new_job_id = _JobIds()


def is_job_id(value: str) -> bool:
    return bool(JOB_ID_PATTERN.match(value))


def body_digest(spec: Mapping[str, Any], metadata: Mapping[str, str], model: str | None) -> str:
    """The identity of a request body for Idempotency-Key: SHA-256 of canonical JSON."""
    canonical = json.dumps(
        {"spec": spec, "metadata": metadata, "model": model},
        sort_keys=True,
        separators=(",", ":"),
        ensure_ascii=False,
    )
    return hashlib.sha256(canonical.encode()).hexdigest()


def connect(url: str, *, max_connections: int = 1_000, socket_timeout_s: float = 30.0) -> Redis:
    """The one Redis client (and pool) of a process, sized for the store's blocking calls.

    Every concurrent ``wait``, ``events`` and ``wait_for_work`` holds a connection while it
    blocks, so the pool must be larger than redis-py's default of 100. Close it with
    ``await redis.aclose()`` on shutdown.
    """
    return Redis.from_url(
        url,
        max_connections=max_connections,
        socket_timeout=socket_timeout_s,
        socket_connect_timeout=5.0,
        socket_keepalive=True,
        health_check_interval=30,
    )


class JobStore:
    """Jobs in Redis. ``redis`` is injected and owned by the caller (who closes it).

    The pool must allow a connection per concurrent blocking call (``wait``, ``events``,
    ``wait_for_work``): ``connect`` builds one that does. Blocking calls are cut to 80 % of
    the connections' ``socket_timeout`` (they return early, never time out).
    """

    def __init__(
        self,
        redis: Redis,
        *,
        prefix: str = "rp",
        lease_ms: int = 30_000,
        max_attempts: int = 3,
        retention_s: int = 604_800,
        idempotency_ttl_s: int = 86_400,
        max_queued: int = 10_000,
        events_maxlen: int = 10_000,
    ) -> None:
        if lease_ms <= 0 or max_attempts < 1 or retention_s < 1 or idempotency_ttl_s < 1:
            raise ValueError("lease_ms, max_attempts, retention_s, idempotency_ttl_s must be > 0")
        self._redis = redis
        self.keys = Keys(prefix)
        self.lease_ms = lease_ms
        self.max_attempts = max_attempts
        self.retention_s = retention_s
        self.idempotency_ttl_s = idempotency_ttl_s
        self.max_queued = max_queued
        self.events_maxlen = events_maxlen
        self._scripts = {name: redis.register_script(_script_source(name)) for name in _SCRIPTS}
        self._queued_result = _json(Envelope.in_progress().to_dict())

    # ---------------------------------------------------------------- API side

    @_edge
    async def submit(
        self,
        *,
        tenant: str,
        spec: dict[str, Any],
        idempotency_key: str | None = None,
        metadata: dict[str, str] | None = None,
        model: str | None = None,
    ) -> tuple[JobView, bool]:
        """Queue a job; ``(job, created)``. A replayed Idempotency-Key gives the first job."""
        metadata = dict(metadata or {})
        job_id = new_job_id()
        keys = [
            self.keys.job(job_id),
            self.keys.queue,
            self.keys.wake,
            self.keys.tenant(tenant),
            self.keys.events(job_id),
        ]
        if idempotency_key is not None:
            keys.append(self.keys.idempotency(tenant, idempotency_key))
        reply = await self._run(
            "submit",
            keys,
            [
                job_id,
                tenant,
                body_digest(spec, metadata, model),
                _json(spec),
                _json(metadata),
                model or "",
                idempotency_key or "",
                self._queued_result,
                self.max_queued,
                self.idempotency_ttl_s,
                self.events_maxlen,
                _WAKE_CAP,
                self.keys.job_prefix,
            ],
        )
        outcome, found = _text(reply[0]), _text(reply[1])
        if outcome == "full":
            raise QueueFull(int(found))
        if outcome == "conflict":
            raise IdempotencyConflict()
        if outcome == "existing":
            existing = await self.get(found, tenant=tenant)
            if existing is not None:
                return existing, False
            # Expired in the instant between the script and the read: submit afresh.
            return await self.submit(
                tenant=tenant,
                spec=spec,
                idempotency_key=idempotency_key,
                metadata=metadata,
                model=model,
            )
        created_ms = int(reply[2])
        return (
            JobView(
                id=job_id,
                tenant=tenant,
                status="queued",
                created_at=_iso(created_ms),
                started_at=None,
                finished_at=None,
                attempts=0,
                result=json.loads(self._queued_result),
                turns=[],
                history=[],
                transcript=[],
                metadata=metadata,
                model=model,
                idempotency_key=idempotency_key,
                last_event_id=_text(reply[3]),
            ),
            True,
        )

    @_edge
    async def get(self, job_id: str, *, tenant: str) -> JobView | None:
        """The job, or ``None`` when it does not exist or belongs to another tenant."""
        if not is_job_id(job_id):
            return None
        (view,) = await self._read([job_id])
        if view is None or view.tenant != tenant:
            return None
        return view

    @_edge
    async def wait(self, job_id: str, *, tenant: str, wait_ms: int) -> JobView | None:
        """The job once it is terminal, or as it is when ``wait_ms`` has passed.

        Blocks on the job's event stream (``XREAD BLOCK``) from the id read together with
        the status, so an end that happens in between is never missed and nothing polls.
        """
        loop = asyncio.get_running_loop()
        deadline = loop.time() + max(wait_ms, 0) / 1000
        peek = await self._peek(job_id)
        if peek is None or peek[1] != tenant:
            return None
        status, _, last_id = peek
        stream = self.keys.events(job_id)
        # Every terminal transition writes job_end as the stream's last event, so the
        # events read while waiting say when to stop: no re-read of the job per event.
        while status not in TERMINAL:
            remaining_ms = int((deadline - loop.time()) * 1000)
            if remaining_ms <= 0:
                break
            reply = await self._redis.xread(
                {stream: last_id}, count=100, block=self._block_ms(remaining_ms)
            )
            events = [_event(entry) for entry in _stream_entries(reply)]
            if events:
                last_id = events[-1].id
                if any(event.name == "job_end" for event in events):
                    break
        return await self.get(job_id, tenant=tenant)

    @_edge
    async def events(
        self, job_id: str, *, after: str | None, block_ms: int, count: int = 100
    ) -> list[Event]:
        """Events after the stream id ``after`` (``None``: from the start), oldest first.

        Blocks up to ``block_ms`` when there is nothing new (``0``: never blocks). The caller
        checks the tenant with ``get`` first. A malformed ``after`` is an ``InvalidInput``
        naming ``Last-Event-ID``.
        """
        if after is not None and not _STREAM_ID.match(after):
            raise InvalidInput("not an event id (like 1732000000000-0)", field="Last-Event-ID")
        if not is_job_id(job_id):
            return []
        streams: dict[KeyT, StreamIdT] = {self.keys.events(job_id): after or "0-0"}
        if block_ms > 0:
            reply = await self._redis.xread(streams, count=count, block=self._block_ms(block_ms))
        else:
            reply = await self._redis.xread(streams, count=count)
        return [_event(entry) for entry in _stream_entries(reply)]

    @_edge
    async def cancel(self, job_id: str, *, tenant: str) -> JobView | None:
        """Cancel a queued or running job (terminal at once); a finished job stays as it is.

        A running job's token is revoked (its worker's later writes are refused) and its id
        is published to the workers (``cancellations``) so the turn loop stops.
        """
        if not is_job_id(job_id):
            return None
        envelope = Envelope.failure(codes.CANCELLED, "the job was cancelled by the client")
        result = envelope.to_dict()
        outcome = await self._run(
            "cancel",
            [
                self.keys.job(job_id),
                self.keys.queue,
                self.keys.leases,
                self.keys.turns(job_id),
                self.keys.events(job_id),
            ],
            [
                job_id,
                tenant,
                _json(result),
                _json({"status": "cancelled", "result": result}),
                self.retention_s,
                self.events_maxlen,
                self.keys.cancel_channel,
            ],
        )
        if _text(outcome) == "missing":
            return None
        return await self.get(job_id, tenant=tenant)

    @_edge
    async def queue_stats(self) -> tuple[int, float]:
        """``(depth, age in seconds of the oldest queued job)``, in one round trip."""
        depth, age_ms = await self._run("queue_stats", [self.keys.queue], [self.keys.job_prefix])
        return int(depth), int(age_ms) / 1000

    async def ping(self) -> bool:
        try:
            return bool(await self._redis.ping())
        except (RedisError, OSError):
            return False

    # ------------------------------------------------------------- worker side

    @_edge
    async def claim(self, worker_id: str) -> Claim | None:
        """Lease the oldest queued job to ``worker_id``; ``None`` when the queue is empty."""
        reply = await self._run(
            "claim",
            [self.keys.queue, self.keys.leases, self.keys.fence],
            [
                self.keys.job_prefix,
                self.keys.events_prefix,
                worker_id,
                self.lease_ms,
                self.events_maxlen,
            ],
        )
        if not reply:
            return None
        job_id, token, attempt, spec, tenant, created_ms, model = list(reply)
        return Claim(
            job_id=_text(job_id),
            token=int(token),
            attempt=int(attempt),
            spec=json.loads(spec),
            tenant=_text(tenant),
            created_at_ms=int(created_ms),
            model=None if model is None else _text(model),
        )

    @_edge
    async def wait_for_work(self, timeout_s: float) -> None:
        """Sleep until a job is queued or requeued, or ``timeout_s`` passes (BLPOP, no polling)."""
        block_ms = self._block_ms(int(timeout_s * 1000))
        if block_ms <= 0:
            return
        await self._redis.blpop([self.keys.wake], timeout=block_ms / 1000)

    @_edge
    async def heartbeat(self, job_id: str, token: int) -> bool:
        """Extend the lease by ``lease_ms``; ``False``: the lease is lost, stop working."""
        reply = await self._run(
            "heartbeat",
            [self.keys.job(job_id), self.keys.leases],
            [job_id, token, self.lease_ms],
        )
        return bool(int(reply))

    @_edge
    async def record_event(
        self,
        job_id: str,
        token: int,
        name: str,
        data: dict[str, Any],
        *,
        progress: dict[str, Any] | None = None,
    ) -> bool:
        """Append an event to the job's stream (trimmed to about ``events_maxlen``), fenced;
        with ``progress``, the in-progress envelope shows it from now on."""
        result = "" if progress is None else _json(Envelope.in_progress(progress).to_dict())
        reply = await self._run(
            "event",
            [self.keys.job(job_id), self.keys.events(job_id)],
            [token, self.events_maxlen, name, _json(data), result],
        )
        return reply is not None

    @_edge
    async def record_turn(
        self, job_id: str, token: int, turn: dict[str, Any], progress: dict[str, Any]
    ) -> bool:
        """Append a turn record and set ``result`` to the in-progress envelope, fenced."""
        reply = await self._run(
            "turn",
            [self.keys.job(job_id), self.keys.turns(job_id)],
            [token, _json(turn), _json(Envelope.in_progress(progress).to_dict())],
        )
        return bool(int(reply))

    @_edge
    async def complete(
        self,
        job_id: str,
        token: int,
        *,
        envelope: dict[str, Any],
        history: list[dict[str, Any]],
        transcript: list[dict[str, Any]],
    ) -> bool:
        """Commit the final envelope, fenced; ``False``: stale, nothing was written.

        ``success`` → ``succeeded``, ``error`` → ``failed`` (``cancelled`` for the error
        ``cancelled``). Emits ``job_end`` and starts the retention clock on every key.
        """
        status = _final_status(envelope)
        reply = await self._run(
            "complete",
            [
                self.keys.job(job_id),
                self.keys.leases,
                self.keys.turns(job_id),
                self.keys.events(job_id),
            ],
            [
                job_id,
                token,
                status,
                _json(envelope),
                _json(history),
                _json(transcript),
                _json({"status": status, "result": envelope}),
                self.retention_s,
                self.events_maxlen,
            ],
        )
        return bool(int(reply))

    @_edge
    async def release(self, job_id: str, token: int) -> bool:
        """Give a running job back (graceful drain): front of the queue, attempt not counted."""
        reply = await self._run(
            "release",
            [
                self.keys.job(job_id),
                self.keys.leases,
                self.keys.queue,
                self.keys.wake,
                self.keys.events(job_id),
            ],
            [job_id, token, self._queued_result, self.events_maxlen, _WAKE_CAP],
        )
        return bool(int(reply))

    @_edge
    async def reap(self, now_ms: int | None = None) -> ReapResult:
        """Requeue (front, attempt counted) or fail (``worker-lost``) jobs whose lease expired.

        ``now_ms`` overrides the server clock for the expiry test only (tests). Each batch is
        one script, so any number of workers may reap at the same time.
        """
        result = Envelope.failure(
            codes.WORKER_LOST,
            f"the worker running this job was lost {self.max_attempts} times "
            "(its lease expired each time); the job is not tried again",
        ).to_dict()
        requeued: list[str] = []
        failed: list[str] = []
        while True:
            again, dead, scanned = await self._run(
                "reap",
                [self.keys.leases, self.keys.queue, self.keys.wake],
                [
                    "" if now_ms is None else now_ms,
                    self.max_attempts,
                    self.keys.job_prefix,
                    self.keys.turns_prefix,
                    self.keys.events_prefix,
                    _json(result),
                    _json({"status": "failed", "result": result}),
                    self.retention_s,
                    self.events_maxlen,
                    self._queued_result,
                    _REAP_BATCH,
                    _WAKE_CAP,
                ],
            )
            requeued.extend(_text(i) for i in again)
            failed.extend(_text(i) for i in dead)
            if int(scanned) < _REAP_BATCH:
                return ReapResult(requeued=requeued, failed=failed)

    async def cancellations(self) -> AsyncGenerator[str, None]:
        """Ids of running jobs as they are cancelled (pub/sub), for workers; runs forever.

        An async generator: close it (``contextlib.aclosing``) to unsubscribe. Pub/sub is the
        fast path only: an id published while this subscriber reconnects is missed, and the
        worker then learns of the cancel from its next fenced write (which returns False).
        """
        backoff = 0.1
        while True:
            pubsub = self._redis.pubsub(ignore_subscribe_messages=True)
            try:
                await pubsub.subscribe(self.keys.cancel_channel)
                backoff = 0.1
                while True:
                    # A bounded wait lets redis-py run its health check on an idle connection.
                    message = await pubsub.get_message(
                        ignore_subscribe_messages=True, timeout=_PUBSUB_POLL_S
                    )
                    if message is not None and message.get("type") == "message":
                        yield _text(message["data"])
            except (RedisConnectionError, RedisTimeoutError, OSError):
                await asyncio.sleep(backoff)
                backoff = min(backoff * 2, 5.0)
            finally:
                with contextlib.suppress(RedisError, OSError):
                    await pubsub.aclose()  # type: ignore[no-untyped-call]  # untyped in redis-py

    # --------------------------------------------------------------- internals

    async def _run(self, name: str, keys: Sequence[str], args: Sequence[str | int]) -> Any:
        script: AsyncScript = self._scripts[name]
        return await script(keys=keys, args=args)

    def _block_ms(self, wanted_ms: int) -> int:
        """``wanted_ms``, cut below the pool's socket timeout so a block never trips it."""
        timeout = _socket_timeout(self._redis)
        if timeout:
            return max(1, min(wanted_ms, int(timeout * 800)))
        return wanted_ms

    async def _peek(self, job_id: str) -> tuple[str, str, str] | None:
        """``(status, tenant, newest event id)``, read atomically."""
        if not is_job_id(job_id):
            return None
        async with self._redis.pipeline(transaction=True) as pipe:
            pipe.hmget(self.keys.job(job_id), ["status", "tenant"])
            pipe.xrevrange(self.keys.events(job_id), count=1)
            (status, tenant), newest = await pipe.execute()
        if status is None:
            return None
        return _text(status), _text(tenant), _newest_id(newest)

    async def _read(self, job_ids: Sequence[str]) -> list[JobView | None]:
        """Each job with its turns and newest event id, in one atomic round trip."""
        async with self._redis.pipeline(transaction=True) as pipe:
            for job_id in job_ids:
                pipe.hgetall(self.keys.job(job_id))
                pipe.lrange(self.keys.turns(job_id), 0, -1)
                pipe.xrevrange(self.keys.events(job_id), count=1)
            replies = await pipe.execute()
        return [
            _view(replies[i], replies[i + 1], replies[i + 2]) for i in range(0, len(replies), 3)
        ]

    # The last method: inside the class body below it, ``list`` would name this method.
    @_edge
    async def list(
        self,
        *,
        tenant: str,
        status: str | None = None,
        cursor: str | None = None,
        limit: int = 50,
    ) -> tuple[list[JobView], str | None]:
        """A page of the tenant's jobs, newest first, and the cursor of the next page.

        ``None`` as the cursor means there is no more. With a status filter a page may hold
        fewer than ``limit`` jobs and still have a cursor. Ids of expired jobs are dropped
        from the index on the way.
        """
        if status is not None and status not in STATUSES:
            raise InvalidInput(f"status must be one of {sorted(STATUSES)}", field="status")
        if not 1 <= limit <= _MAX_LIST_LIMIT:
            raise InvalidInput(f"limit must be 1..{_MAX_LIST_LIMIT}", field="limit")
        index = self.keys.tenant(tenant)
        upper = "+" if cursor is None else "(" + _decode_cursor(cursor)
        page: list[JobView] = []
        scanned = 0
        batch = limit + 1 if status is None else max(2 * limit, 50)
        while True:
            ids = [_text(i) for i in await self._redis.zrevrangebylex(index, upper, "-", 0, batch)]
            if not ids:
                return page, None
            views = await self._read(ids)
            gone = [job_id for job_id, view in zip(ids, views, strict=True) if view is None]
            if gone:
                await self._redis.zrem(index, *gone)
            for position, view in enumerate(views):
                if view is None or view.tenant != tenant:
                    continue
                if status is not None and view.status != status:
                    continue
                page.append(view)
                if len(page) == limit:
                    more = position < len(ids) - 1 or bool(
                        await self._redis.zrevrangebylex(index, "(" + ids[position], "-", 0, 1)
                    )
                    return page, _encode_cursor(ids[position]) if more else None
            scanned += len(ids)
            if len(ids) < batch:
                return page, None
            if scanned >= _LIST_SCAN_CAP:
                return page, _encode_cursor(ids[-1])
            upper = "(" + ids[-1]


# ------------------------------------------------------------------- helpers

_SCRIPTS: Final = (
    "submit",
    "claim",
    "heartbeat",
    "event",
    "turn",
    "complete",
    "release",
    "cancel",
    "reap",
    "queue_stats",
)


@cache
def _script_source(name: str) -> str:
    lua = resources.files("app") / "lua"
    return (lua / "common.lua").read_text() + "\n" + (lua / f"{name}.lua").read_text()


def _socket_timeout(redis: Redis) -> float | None:
    """The read timeout of the client's connections (redis-py 8 defaults it to 5 s)."""
    pool = getattr(redis, "connection_pool", None)
    options = getattr(pool, "connection_kwargs", {})
    if "socket_timeout" in options:
        timeout = options["socket_timeout"]
    else:
        # Not given: the default of whichever class in the connection's MRO declares it.
        timeout = None
        for klass in getattr(getattr(pool, "connection_class", None), "__mro__", ()):
            parameter = inspect.signature(klass.__init__).parameters.get("socket_timeout")
            if parameter is not None:
                timeout = parameter.default
                break
    return float(timeout) if isinstance(timeout, int | float) and timeout > 0 else None


def _json(value: Any) -> str:
    return json.dumps(value, separators=(",", ":"), ensure_ascii=False)


def _text(value: object) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


def _iso(ms: int) -> str:
    moment = datetime.fromtimestamp(ms / 1000, tz=UTC)
    return moment.strftime("%Y-%m-%dT%H:%M:%S.") + f"{ms % 1000:03d}Z"


def _final_status(envelope: Mapping[str, Any]) -> JobStatus:
    if envelope.get("status") == codes.RESULT_SUCCESS:
        return "succeeded"
    if envelope.get("status") == codes.RESULT_ERROR:
        return "cancelled" if envelope.get("error") == codes.CANCELLED else "failed"
    raise ValueError(f"complete() needs a final envelope, got status {envelope.get('status')!r}")


def _newest_id(entries: Sequence[Any]) -> str:
    return _text(entries[0][0]) if entries else "0-0"


def _view(raw: Mapping[Any, Any], turns: Sequence[Any], newest: Sequence[Any]) -> JobView | None:
    if not raw:
        return None
    fields = {_text(k): _text(v) for k, v in raw.items()}

    def moment(name: str) -> str | None:
        value = fields.get(name)
        return _iso(int(value)) if value else None

    return JobView(
        id=fields["id"],
        tenant=fields["tenant"],
        status=cast(JobStatus, fields["status"]),
        created_at=_iso(int(fields["created_ms"])),
        started_at=moment("started_ms"),
        finished_at=moment("finished_ms"),
        attempts=int(fields.get("attempts", "0")),
        result=json.loads(fields["result"]),
        turns=[json.loads(turn) for turn in turns],
        history=json.loads(fields.get("history", "[]")),
        transcript=json.loads(fields.get("transcript", "[]")),
        metadata=json.loads(fields.get("metadata", "{}")),
        model=fields.get("model"),
        idempotency_key=fields.get("idem"),
        last_event_id=_newest_id(newest),
    )


def _stream_entries(reply: Any) -> list[Any]:
    """The entries of a one-stream XREAD reply, in RESP2 or RESP3 shape."""
    if not reply:
        return []
    per_stream = list(reply.values()) if isinstance(reply, dict) else [item[1] for item in reply]
    entries: list[Any] = []
    for stream in per_stream:
        # redis-py's RESP3 parsing wraps the entry list in one more list.
        if (
            stream
            and isinstance(stream[0], list)
            and stream[0]
            and isinstance(stream[0][0], list | tuple)
        ):
            stream = stream[0]
        entries.extend(stream)
    return entries


def _event(entry: Sequence[Any]) -> Event:
    event_id, raw = entry[0], entry[1]
    fields = {_text(k): _text(v) for k, v in raw.items()}
    return Event(id=_text(event_id), name=fields["name"], data=json.loads(fields["data"]))


def _encode_cursor(job_id: str) -> str:
    return base64.urlsafe_b64encode(job_id.encode()).decode().rstrip("=")


def _decode_cursor(cursor: str) -> str:
    try:
        job_id = base64.urlsafe_b64decode(cursor + "=" * (-len(cursor) % 4)).decode()
    except (binascii.Error, UnicodeDecodeError, ValueError):
        job_id = ""
    if not is_job_id(job_id):
        raise InvalidInput("not a cursor returned by this API", field="cursor")
    return job_id
