"""Completion callbacks at the API: the operators' redelivery (docs/callbacks.md).

A job's ``callback.url`` is checked at submit with the rest of the job
(``app.core.admission.admit``).

POST /v1/jobs/{id}/callback/redeliver    send the job's latest callback again
"""

from __future__ import annotations

from fastapi import APIRouter
from fastapi.responses import Response

from app.api.problems import NotFound
from app.api.resources import Authed
from app.api.schemas import problems, respond
from app.core.wire.job import Job
from app.store import public_job

router = APIRouter(tags=["jobs"])


@router.post(
    "/v1/jobs/{job_id}/callback/redeliver",
    response_model=Job,
    status_code=202,
    summary="Send a job's latest callback again",
    responses={
        202: {"description": "Queued: the delivery is pending and due now."},
        **problems(
            401,
            404,
            409,
            503,
            s409="The job has no callback, or none of its callback's events has happened yet.",
        ),
    },
)
async def redeliver_callback(job_id: str, caller: Authed) -> Response:
    """Queue the job's latest delivery again, whatever its state, with a new retry window.

    For any key of the job's tenant. The same ``webhook-id`` (a receiver that de-duplicates
    sees a repeat), the job as it is now; ``redeliveries`` counts how often.
    """
    res, tenant = caller.res, caller.tenant
    event = await res.store.outbox.redeliver(job_id, tenant=tenant)
    job = None if event is None else await res.store.get(job_id, tenant=tenant)
    if job is None:
        shown = job_id if len(job_id) <= 64 else job_id[:64] + "…"
        raise NotFound(f"no job {shown!r}")
    return respond(public_job(job), 202)
