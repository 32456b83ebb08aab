"""A worker's fenced writes to a job it holds: progress, commit, pause, release.

    ok = await leases.write(claim, turn=record, events=[...], progress=progress)
    ok = await leases.complete(claim, envelope=..., history=..., transcript=...)
    # ok is falsy when the claim is not ours any more (reaped, cancelled): nothing written
    added = await leases.spend(claim, envelope=cancelled, turns=records)  # a cancelled run's

Each script checks that the job is ``in_progress`` under the claim's token (its attempt
number): a worker that wakes after its lease was reaped changes nothing. One exception,
on purpose: a turn record is a paid call, kept whoever writes it until the job ends.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from enum import Enum
from typing import Final

from pydantic import TypeAdapter

from app.core.turn.checkpoint import Checkpoint, RequiredAction
from app.core.turn.conversation import TranscriptEntry
from app.core.wire.base import Wire
from app.core.wire.envelope import Envelope, Progress
from app.core.wire.record import Rejection, Spend, TurnRecord
from app.store.connection import DONE_VIEW_MAX_BYTES
from app.store.errors import edge
from app.store.idle import IdleLists
from app.store.protocol import (
    COMPLETE,
    PAUSE,
    RELEASE,
    SPEND,
    WRITE,
    CompleteArgs,
    CompleteKeys,
    PauseArgs,
    PauseKeys,
    ReleaseArgs,
    ReleaseKeys,
    SpendArgs,
    SpendKeys,
    WriteArgs,
    WriteKeys,
)
from app.store.records import Claim, event_json

# A commit's history and transcript as JSON in one call each (the same text as
# ``dumps`` of each item's ``model_dump``, in a third of the time).
HISTORY_JSON: Final = TypeAdapter(list[Rejection])
TRANSCRIPT_JSON: Final = TypeAdapter(list[TranscriptEntry])


class Written(Enum):
    """What a fenced write did."""

    OURS = 1  # written
    STALE = 0  # not ours any more (lease lost, or cancelled): only a turn record was kept
    ENDED = -1  # the job had already ended: nothing was written

    def __bool__(self) -> bool:
        return self is Written.OURS


class Writes(IdleLists):
    """The writes of ``Leases``."""

    @edge
    async def write(
        self,
        claim: Claim,
        *,
        progress: Progress,
        turn: TurnRecord | None = None,
        events: Sequence[tuple[str, Wire]] = (),
    ) -> Written:
        """Record a turn (paid: kept even if the claim is stale), append events and show
        ``progress`` in the in-progress envelope (fenced), in one script."""
        shard = self.shard_of(claim.job_id)
        reply = await self.scripts.run(
            WRITE,
            WriteKeys(job=shard.job(claim.job_id)),
            WriteArgs(
                token=claim.token,
                turn="" if turn is None else turn.model_dump_json(),
                turn_spend="" if turn is None else Spend.of(turn).model_dump_json(),
                events=_events(events),
                result=Envelope.in_progress(progress).model_dump_json(),
                events_channel=self.channels["events"],
                id=claim.job_id,
            ),
        )
        return Written(int(reply))

    @edge
    async def complete(
        self,
        claim: Claim,
        *,
        envelope: Envelope,
        history: Sequence[Rejection],
        transcript: Sequence[TranscriptEntry],
        turn: TurnRecord | None = None,
        events: Sequence[tuple[str, Wire]] = (),
        room: int = 0,
    ) -> Written:
        """Commit the final envelope, with the last turn and events not yet written, fenced.

        The job's state follows from the envelope (``Envelope.job_status``); ``job_end`` is
        appended, the lease freed, the waiters told. ``room``: the worker's free slots once
        this job's frees (its idle-list entry may be listed once more: ``IdleLists``).
        """
        status = envelope.job_status
        if status == "in_progress":
            raise ValueError("complete() needs a final envelope")
        shard = self.shard_of(claim.job_id)
        finished_ms = int(time.time() * 1000)
        relist = self._relist(shard.index, room, finished_ms)
        reply = await self.scripts.run(
            COMPLETE,
            CompleteKeys(
                job=shard.job(claim.job_id),
                leases=shard.leases,
                running=shard.running,
                idle=None if relist is None else shard.idle,
            ),
            CompleteArgs(
                id=claim.job_id,
                token=claim.token,
                status=status,
                result=envelope.model_dump_json(),
                history=HISTORY_JSON.dump_json(list(history)).decode() if history else "[]",
                transcript=TRANSCRIPT_JSON.dump_json(list(transcript)).decode(),
                turn="" if turn is None else turn.model_dump_json(),
                turn_spend="" if turn is None else Spend.of(turn).model_dump_json(),
                # job_end ({"status", "result"}: ``JobEnded``) is made by the script from the
                # result it stores: the envelope is serialised and sent once.
                events=_events(events),
                retention_s=self.options.retention_s,
                done_channel=self.channels["done"],
                finished_ms=finished_ms,
                view_max_bytes=DONE_VIEW_MAX_BYTES,
                relist_entry=relist,
            ),
        )
        return Written(int(reply))

    @edge
    async def pause(
        self,
        claim: Claim,
        *,
        state: Checkpoint,
        action: RequiredAction,
        expires_ms: int,
        progress: Progress,
        turn: TurnRecord | None = None,
        events: Sequence[tuple[str, Wire]] = (),
    ) -> Written:
        """Put a running job in ``requires_action`` (fenced), its lease freed.

        The checkpoint and the calls are kept with it, the waiters told. ``expires_ms``
        (epoch): when the reaper takes it back without outputs.
        """
        shard = self.shard_of(claim.job_id)
        appended = [event_json(name, data.model_dump_json()) for name, data in events]
        appended.append(event_json("requires_action", action.model_dump_json()))
        reply = await self.scripts.run(
            PAUSE,
            PauseKeys(
                job=shard.job(claim.job_id),
                leases=shard.leases,
                running=shard.running,
                actions=shard.actions,
            ),
            PauseArgs(
                id=claim.job_id,
                token=claim.token,
                checkpoint=state.model_dump_json(),
                action=action.model_dump_json(),
                result=Envelope.in_progress(progress).model_dump_json(),
                turn="" if turn is None else turn.model_dump_json(),
                turn_spend="" if turn is None else Spend.of(turn).model_dump_json(),
                events=",".join(appended),
                expires_ms=expires_ms,
                done_channel=self.channels["done"],
                events_channel=self.channels["events"],
            ),
        )
        return Written(int(reply))

    @edge
    async def spend(self, claim: Claim, *, envelope: Envelope, turns: Sequence[TurnRecord]) -> int:
        """Record a cancelled job's spend under ``claim`` (#31): the ``turns`` it does not
        hold yet join its turns and running total, and ``envelope`` (the cancelled result
        counting the run's calls) becomes its result if ``claim`` is its last. One script,
        once: a turn it holds is skipped. How many turns were added; -1: not cancelled."""
        shard = self.shard_of(claim.job_id)
        reply = await self.scripts.run(
            SPEND,
            SpendKeys(job=shard.job(claim.job_id)),
            SpendArgs(
                attempt=claim.attempt,
                result=envelope.model_dump_json(),
                turns="\n".join(turn.model_dump_json() for turn in turns),
                spends="\n".join(Spend.of(turn).model_dump_json() for turn in turns),
                ids="\n".join(f"{claim.attempt}:{turn.index}" for turn in turns),
            ),
        )
        return int(reply)

    @edge
    async def release(self, claim: Claim) -> bool:
        """Give a running job back (a drain): front of its tenant's queue, attempt uncounted."""
        shard = self.shard_of(claim.job_id)
        reply = await self.scripts.run(
            RELEASE,
            ReleaseKeys(
                job=shard.job(claim.job_id),
                leases=shard.leases,
                tenant_queue=shard.tenant_queue(claim.tenant),
                ring=shard.ring,
                running=shard.running,
            ),
            ReleaseArgs(
                id=claim.job_id,
                token=claim.token,
                queued_result=self._queued_result,
                work_channel=self.channels["work"],
                shard=shard.index,
            ),
        )
        return bool(int(reply))


def _events(events: Sequence[tuple[str, Wire]]) -> str:
    """Events as a script appends them: JSON objects, comma-separated."""
    return ",".join(event_json(name, data.model_dump_json()) for name, data in events)
