"""What the store hands out, typed: a job as stored, an event, a claim, a reap's result.

Records are kept in Redis as the JSON of their ``app.core`` models (the wire format), and
read back into those models here, so nothing above the store handles raw dicts.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, cast

from app.core.conversation import TranscriptEntry
from app.core.envelope import TERMINAL, Envelope, JobStatus
from app.core.turn import Rejection, TurnRecord


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
    last_event_id: str

    @property
    def terminal(self) -> bool:
        return self.status in TERMINAL


@dataclass(frozen=True, slots=True)
class Event:
    """One entry of a job's event stream: ``id`` is the stream id (SSE ``id:``), ``data``
    the event's JSON text as written (passed on to clients without re-encoding)."""

    id: str
    name: str
    data: str

    def decoded(self) -> Any:
        return json.loads(self.data)


@dataclass(frozen=True, slots=True)
class Claim:
    """A leased job: write with ``token``; ``attempt`` counts claims (1 = first)."""

    job_id: str
    token: int
    attempt: int
    spec: dict[str, Any]
    tenant: str
    created_at_ms: int
    model: str | None = None  # as given to ``submit``


@dataclass(frozen=True, slots=True)
class ReapResult:
    requeued: list[str]
    failed: list[str]


def text(value: object) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


def iso(ms: int) -> str:
    moment = datetime.fromtimestamp(ms / 1000, tz=UTC)
    return moment.strftime("%Y-%m-%dT%H:%M:%S.") + f"{ms % 1000:03d}Z"


def newest_id(entries: Sequence[Any]) -> str:
    return text(entries[0][0]) if entries else "0-0"


def job_view(raw: Mapping[Any, Any], turns: Sequence[Any], newest: Sequence[Any]) -> JobView | None:
    """A job from its hash, its turn list and its newest stream entry; None if it is gone."""
    if not raw:
        return None
    fields = {text(k): text(v) for k, v in raw.items()}

    def moment(name: str) -> str | None:
        value = fields.get(name)
        return iso(int(value)) if value else None

    return JobView(
        id=fields["id"],
        tenant=fields["tenant"],
        status=cast(JobStatus, fields["status"]),
        created_at=iso(int(fields["created_ms"])),
        started_at=moment("started_ms"),
        finished_at=moment("finished_ms"),
        attempts=int(fields.get("attempts", "0")),
        result=Envelope.model_validate_json(fields["result"]),
        turns=tuple(TurnRecord.model_validate_json(turn) for turn in turns),
        history=tuple(Rejection.model_validate(h) for h in json.loads(fields.get("history", "[]"))),
        transcript=tuple(
            TranscriptEntry.model_validate(m) for m in json.loads(fields.get("transcript", "[]"))
        ),
        metadata=json.loads(fields.get("metadata", "{}")),
        model=fields.get("model"),
        idempotency_key=fields.get("idem"),
        last_event_id=newest_id(newest),
    )


def stream_entries(reply: Any) -> list[Any]:
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


def event(entry: Sequence[Any]) -> Event:
    event_id, raw = entry[0], entry[1]
    fields = {text(k): text(v) for k, v in raw.items()}
    return Event(id=text(event_id), name=fields["name"], data=fields["data"])
