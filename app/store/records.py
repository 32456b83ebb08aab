"""What the store hands out, typed: a job as stored, an event, a claim, a reap's result.

A job is one Redis hash: its spec, state, result, and its turns and events as JSON arrays.

Records are kept in Redis as the JSON of their ``app.core`` models (the wire format), and
read back into those models here, so nothing above the store handles raw dicts.
"""

from __future__ import annotations

import dataclasses
import inspect
import json
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from functools import lru_cache
from typing import Any, Final, cast

from pydantic import TypeAdapter
from pydantic_core import from_json, to_json

from app.core.turn.checkpoint import Checkpoint, RequiredAction, ToolOutput
from app.core.turn.conversation import TranscriptEntry
from app.core.wire.base import Wire, compact_json
from app.core.wire.callback import CallbackStatus, Delivery, message_id
from app.core.wire.envelope import TERMINAL, Envelope, JobStatus
from app.core.wire.job import Job
from app.core.wire.record import Rejection, Spend, TurnRecord
from app.core.wire.spec import CALLBACK_EVENTS, CallbackEvent
from app.store.ids import shard_of
from app.tracecontext import TraceContext


@dataclass(frozen=True, slots=True)
class JobView:
    """A job as it is stored at one moment."""

    id: str
    tenant: str
    status: JobStatus
    created_at: str
    started_at: str | None
    finished_at: str | None
    attempts: int
    result: Envelope
    turns: tuple[TurnRecord, ...]
    history: tuple[Rejection, ...]
    transcript: tuple[TranscriptEntry, ...]
    metadata: dict[str, str]
    model: str | None
    idempotency_key: str | None
    # While requires_action: the calls the client must answer, and until when.
    required_action: RequiredAction | None = None
    pauses: int = 0  # how many times the job waited for tool outputs (names the current one)
    callback: CallbackStatus | None = None  # its callback and how each delivery went
    # ``result``, ``turns``, ``history`` and ``transcript`` as the store holds them (each
    # written by its model's ``model_dump_json``, or its list's TypeAdapter's
    # ``dump_json``): ``public_job_json`` passes them on instead of writing them again.
    result_json: str | None = field(default=None, compare=False, repr=False)
    turns_json: str | None = field(default=None, compare=False, repr=False)
    history_json: str | None = field(default=None, compare=False, repr=False)
    transcript_json: str | None = field(default=None, compare=False, repr=False)

    @property
    def terminal(self) -> bool:
        return self.status in TERMINAL


@dataclass(frozen=True, slots=True)
class Event:
    """One of a job's events: ``id`` is its number (1 = the first; SSE ``id:``), ``data``
    the event's JSON text as written (passed on to clients without re-encoding)."""

    id: str
    name: str
    data: str

    def decoded(self) -> Any:
        return json.loads(self.data)


@dataclass(frozen=True, slots=True)
class Claim:
    """A leased job: write with ``token``; ``attempt`` counts claims (1 = first).

    ``earlier`` is what the calls of earlier attempts (workers that were lost) spent.
    """

    job_id: str
    token: int
    attempt: int
    spec: dict[str, Any]
    tenant: str
    created_at_ms: int
    model: str | None = None  # as given to ``submit``
    earlier: Spend | None = None
    # A job that paused for client tools resumes from its checkpoint with the outputs
    # (``None`` with a checkpoint: the wait timed out).
    checkpoint: Checkpoint | None = None
    outputs: Outputs | None = None
    trace: TraceContext | None = None  # the submitting client's (app.tracing parents on it)

    @property
    def shard(self) -> int:
        return shard_of(self.job_id)


@dataclass(frozen=True, slots=True)
class Outputs:
    """A client's answer to a requires_action: each call's output, and when it came."""

    by_call: dict[str, ToolOutput]
    received_ms: int


@dataclass(frozen=True, slots=True)
class ReapResult:
    requeued: list[str]
    failed: list[str]
    expired: list[str] = field(default_factory=list)  # requires_action past its expiry


def event_json(name: str, data: str) -> str:
    """An event as a job's ``events`` field holds it: ``{"name": …, "data": …}``."""
    return '{"name":' + compact_json(name) + ',"data":' + data + "}"


def text(value: object) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


def iso(ms: int) -> str:
    """An epoch-ms moment as ``2026-11-22T05:39:58.790Z``."""
    seconds, millis = divmod(ms, 1000)
    return f"{_second(seconds)}.{millis:03d}Z"


@lru_cache(maxsize=256)
def _second(seconds: int) -> str:
    # A job's moments (and a page of jobs') share their seconds: formatted once each.
    return datetime.fromtimestamp(seconds, tz=UTC).strftime("%Y-%m-%dT%H:%M:%S")


def job_view(raw: Mapping[Any, Any]) -> JobView | None:
    """A job from its hash's fields (missing ones are None); None if it is gone."""
    return text_view(
        {
            k if type(k) is str else text(k): (
                v if type(v) is str else v.decode() if type(v) is bytes else text(v)
            )
            for k, v in raw.items()
            if v is not None
        }
    )


def text_view(fields: Mapping[str, str]) -> JobView | None:
    """``job_view`` of fields that are all text already (a ``done`` message's)."""
    if "id" not in fields:
        return None
    get = fields.get
    started, finished = get("started_ms"), get("finished_ms")
    result = fields["result"]
    turns = get("turns") or "[]"
    # The common empty arrays and map (most jobs' history, transcript, metadata) without
    # a parser: what each would parse to.
    history, transcript, metadata = get("history"), get("transcript"), get("metadata")
    history = None if history == "[]" else history
    transcript = None if transcript == "[]" else transcript
    action = get("action")
    return lazy_view(
        id=fields["id"],
        tenant=fields["tenant"],
        status=cast(JobStatus, fields["status"]),
        created_at=iso(int(fields["created_ms"])),
        started_at=iso(int(started)) if started else None,
        finished_at=iso(int(finished)) if finished else None,
        attempts=int(get("attempts", "0")),
        result=None,  # parsed from result_json when read
        turns=() if turns == "[]" else None,  # likewise
        history=None if history else (),  # likewise
        transcript=None if transcript else (),  # likewise
        metadata={} if metadata is None or metadata == "{}" else from_json(metadata),
        model=get("model"),
        idempotency_key=get("idem"),
        required_action=RequiredAction.model_validate_json(action) if action else None,
        pauses=int(get("pauses") or 0),
        callback=_callback(fields) if get("callback") else None,
        result_json=result,
        turns_json=turns,
        history_json=history or None,
        transcript_json=transcript or None,
    )


_TURNS: Final = TypeAdapter(tuple[TurnRecord, ...])
_HISTORY: Final = TypeAdapter(tuple[Rejection, ...])
_TRANSCRIPT: Final = TypeAdapter(tuple[TranscriptEntry, ...])
# JobView's own slots (LazyView's properties shadow them).
_RESULT: Final = JobView.__dict__["result"]
_TURNS_SLOT: Final = JobView.__dict__["turns"]
_HISTORY_SLOT: Final = JobView.__dict__["history"]
_TRANSCRIPT_SLOT: Final = JobView.__dict__["transcript"]


def _parsed(slot: Any, source: str, parse: Callable[[str], Any]) -> Any:
    """A property of ``LazyView``: the value in ``slot`` (JobView's own), or, while that is
    None, ``parse`` of the JSON text in the attribute ``source``, kept in ``slot``. Set
    (by the dataclass's ``__init__`` only), it sets the slot."""

    def get(self: JobView) -> Any:
        value = slot.__get__(self)
        if value is None:
            json_text = getattr(self, source)
            assert json_text is not None
            value = parse(json_text)
            slot.__set__(self, value)
        return value

    def put(self: JobView, value: Any) -> None:
        slot.__set__(self, value)

    return property(get, put)


class LazyView(JobView):
    """A ``JobView`` made from the JSON the store holds: its ``result``, ``turns``,
    ``history`` and ``transcript``, given as None, are parsed from ``result_json``,
    ``turns_json``, ``history_json`` and ``transcript_json`` when first read. A job's
    answer (``public_job_json``) passes that JSON on and never reads them: the API's
    submit and long-poll parse none of them."""

    __slots__ = ()
    __hash__ = JobView.__hash__

    def __eq__(self, other: object) -> bool:
        # As JobView's: the compared fields equal (a JobView and a LazyView alike).
        if not isinstance(other, JobView):
            return NotImplemented
        return all(getattr(self, name) == getattr(other, name) for name in _COMPARED)

    # Each parsed from its JSON when first read, then kept in JobView's own slot.
    result = _parsed(_RESULT, "result_json", Envelope.model_validate_json)
    turns = _parsed(_TURNS_SLOT, "turns_json", _TURNS.validate_json)
    history = _parsed(_HISTORY_SLOT, "history_json", _HISTORY.validate_json)
    transcript = _parsed(_TRANSCRIPT_SLOT, "transcript_json", _TRANSCRIPT.validate_json)


_COMPARED: Final = tuple(f.name for f in dataclasses.fields(JobView) if f.compare)
# Each field's slot, in the fields' order: ``lazy_view`` sets them as the dataclass's __init__
# would, in half its time (no ``object.__setattr__`` per field, no property setter).
_SLOTS: Final = tuple(JobView.__dict__[f.name].__set__ for f in dataclasses.fields(JobView))


def lazy_view(
    *,
    id: str,
    tenant: str,
    status: JobStatus,
    created_at: str,
    started_at: str | None,
    finished_at: str | None,
    attempts: int,
    result: Envelope | None,
    turns: tuple[TurnRecord, ...] | None,
    history: tuple[Rejection, ...] | None,
    transcript: tuple[TranscriptEntry, ...] | None,
    metadata: dict[str, str],
    model: str | None,
    idempotency_key: str | None,
    required_action: RequiredAction | None,
    pauses: int,
    callback: CallbackStatus | None,
    result_json: str | None,
    turns_json: str | None,
    history_json: str | None,
    transcript_json: str | None,
) -> LazyView:
    """A ``LazyView`` of these fields (None for a parsed one: parsed from its JSON)."""
    view = object.__new__(LazyView)
    values = (
        id,
        tenant,
        status,
        created_at,
        started_at,
        finished_at,
        attempts,
        result,
        turns,
        history,
        transcript,
        metadata,
        model,
        idempotency_key,
        required_action,
        pauses,
        callback,
        result_json,
        turns_json,
        history_json,
        transcript_json,
    )
    for put, value in zip(_SLOTS, values, strict=True):
        put(view, value)
    return view


# ``lazy_view`` sets the slots in JobView's field order: its parameters must be that order.
if tuple(inspect.signature(lazy_view).parameters) != tuple(
    f.name for f in dataclasses.fields(JobView)
):  # pragma: no cover - a change to JobView
    raise RuntimeError("lazy_view's parameters must be JobView's fields, in their order")


def public_job(view: JobView) -> Job:
    """The job as clients read it (``GET /v1/jobs/{id}``, and a callback's body): its
    tenant and stream position stay inside."""
    return Job(
        id=view.id,
        status=view.status,
        created_at=view.created_at,
        started_at=view.started_at,
        finished_at=view.finished_at,
        attempts=view.attempts,
        result=view.result,
        turns=view.turns,
        history=view.history,
        transcript=view.transcript,
        metadata=view.metadata,
        model=view.model,
        idempotency_key=view.idempotency_key,
        required_action=view.required_action if view.status == "requires_action" else None,
        callback=view.callback,
    )


def public_job_json(view: JobView) -> bytes:
    """``public_job(view).model_dump_json()``, byte for byte, and cheaper: the envelope
    (whose serializer runs in Python, the costliest part of a job to write), the turn
    records, the history and the transcript go out as the store holds them, written once
    by the same models; the other
    fields are written here in ``Job``'s order (``_JOB_FIELDS``, checked at import)."""
    result = view.result_json
    if result is None:
        result = view.result.model_dump_json()
    turns = view.turns_json
    if turns is None:
        turns = _TURNS.dump_json(view.turns).decode()
    history = view.history_json
    if history is None:
        history = _HISTORY.dump_json(view.history).decode() if view.history else "[]"
    transcript = view.transcript_json
    if transcript is None:
        transcript = _TRANSCRIPT.dump_json(view.transcript).decode() if view.transcript else "[]"
    action = view.required_action if view.status == "requires_action" else None
    # The plain fields in two writes (a dict's members are written as each alone is).
    head = to_json(
        {
            "id": view.id,
            "status": view.status,
            "createdAt": view.created_at,
            "startedAt": view.started_at,
            "finishedAt": view.finished_at,
            "attempts": view.attempts,
        }
    )
    tail = to_json(
        {
            "metadata": view.metadata,
            "model": view.model,
            "idempotencyKey": view.idempotency_key,
        }
    )
    return b"".join(
        (
            head[:-1],
            b',"result":',
            result.encode(),
            b',"turns":',
            turns.encode(),
            b',"history":',
            history.encode(),
            b',"transcript":',
            transcript.encode(),
            b",",
            tail[1:-1],
            b',"requiredAction":',
            b"null" if action is None else action.model_dump_json().encode(),
            b',"callback":',
            b"null" if view.callback is None else view.callback.model_dump_json().encode(),
            b"}",
        )
    )


def _callback(fields: Mapping[str, str]) -> CallbackStatus | None:
    """The callback and its deliveries (``lua/outbox.lua`` keeps each as ``cb:<event>``)."""
    spec = fields.get("callback")
    if not spec:
        return None
    stored = json.loads(spec)
    deliveries: list[Delivery] = []
    for event in CALLBACK_EVENTS:
        raw = fields.get(f"cb:{event}")
        if raw:
            deliveries.append(_delivery(fields["id"], event, json.loads(raw)))
    deliveries.sort(key=lambda d: d.created_at)
    return callback_status(stored, deliveries)


def callback_status(
    stored: Mapping[str, Any] | None, deliveries: Sequence[Delivery] = ()
) -> CallbackStatus | None:
    """A job's callback (as submitted: ``{url, events}``) with its deliveries so far."""
    if not stored:
        return None
    return CallbackStatus(
        url=stored["url"], events=tuple(stored["events"]), deliveries=tuple(deliveries)
    )


def _delivery(job_id: str, event: CallbackEvent, d: dict[str, Any]) -> Delivery:
    def moment(name: str) -> str | None:
        value = d.get(name)
        return iso(int(value)) if value is not None else None

    pending = d["state"] == "pending"
    return Delivery(
        event=event,
        state=d["state"],
        webhook_id=message_id(job_id, event, int(d.get("pause") or 0)),
        attempts=int(d.get("attempts") or 0),
        created_at=iso(int(d["created"])),
        last_attempt_at=moment("last"),
        last_status=None if d.get("status") is None else int(d["status"]),
        last_error=d.get("error"),
        next_attempt_at=moment("due") if pending else None,
        delivered_at=moment("delivered"),
        redeliveries=int(d.get("again") or 0),
    )


def events_of(raw: str | bytes | None, *, after: int) -> list[Event]:
    """The events of a job's ``events`` field after number ``after``, oldest first."""
    if not raw:
        return []
    entries = json.loads(raw)
    return [
        Event(id=str(number), name=entry["name"], data=compact_json(entry["data"]))
        for number, entry in enumerate(entries, start=1)
        if number > after
    ]


def spend(raw: str | bytes | None) -> Spend | None:
    return None if not raw else Spend.model_validate_json(raw)


def checkpoint(raw: str | bytes | None) -> Checkpoint | None:
    return None if not raw else Checkpoint.model_validate_json(raw)


def outputs(raw: str | bytes | None) -> Outputs | None:
    """The stored outputs; None for none yet or for ``timeout`` (the wait expired)."""
    if not raw or raw in (b"timeout", "timeout"):
        return None
    stored = _OUTPUTS.validate_json(raw)
    return Outputs({o.tool_call_id: o for o in stored.outputs}, stored.received_ms)


class StoredOutputs(Wire):
    outputs: tuple[ToolOutput, ...]
    received_ms: int


_OUTPUTS: Final = TypeAdapter(StoredOutputs)
# The fields public_job_json writes, in order: a field added to Job must be added there too.
_JOB_FIELDS: Final = (
    "id",
    "status",
    "created_at",
    "started_at",
    "finished_at",
    "attempts",
    "result",
    "turns",
    "history",
    "transcript",
    "metadata",
    "model",
    "idempotency_key",
    "required_action",
    "callback",
)
if tuple(Job.model_fields) != _JOB_FIELDS:  # pragma: no cover - a change to Job
    raise RuntimeError(f"public_job_json writes {_JOB_FIELDS}, Job has {tuple(Job.model_fields)}")


def claim_of(values: Sequence[Any]) -> Claim:
    """A claimed job from the 10 values a claim gives for it (``claim_reply``, lua/common.lua)."""
    job_id, attempt, spec, tenant, created, model, earlier, state, answer, trace = values
    return Claim(
        job_id=text(job_id),
        token=int(attempt),
        attempt=int(attempt),
        spec=json.loads(spec),
        tenant=text(tenant),
        created_at_ms=int(created),
        model=text(model) or None,
        earlier=spend(earlier),
        checkpoint=checkpoint(state),
        outputs=outputs(answer),
        trace=TraceContext.loads(trace),
    )
