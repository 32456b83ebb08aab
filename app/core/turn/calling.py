"""The model call of a turn: a failed call is recorded, and ends the job with its code.

Transport retries happen inside ``ModelClient.complete`` and never count as turns.
"""

from __future__ import annotations

import asyncio
import logging
from typing import Final

from app.core.text.unicode import scrub
from app.core.turn.model import LLMResponse, ModelClient
from app.core.turn.recorder import Recorder
from app.core.turn.request import Call
from app.core.turn.state import RunState
from app.core.turn.stop import Ended
from app.core.wire import codes
from app.core.wire.errors import ProviderError

log = logging.getLogger(__name__)

# What a tenant reads when the provider refused the service's credentials or configuration.
CONFIG_FAILURE: Final = (
    "the model provider rejected the service's credentials or configuration; "
    "the operator's logs have the details"
)
_DEADLINE_PASSED: Final = "the job's deadline passed during a model call"


async def call_model(
    client: ModelClient, state: RunState, record: Recorder, call: Call
) -> LLMResponse:
    """The answer to ``call``; raises ``Ended`` when there is none."""
    request = call.request
    try:
        if request.timeout_s is None:
            return await client.complete(request)
        async with asyncio.timeout(request.timeout_s):
            return await client.complete(request)
    except ProviderError as exc:
        state.ledger.spend.transport_retries += exc.transport_retries
        if exc.code == codes.LLM_TIMEOUT and state.past_deadline():
            # The provider's timeout was the job's deadline (the call is bounded by what
            # is left of it): which of the two timers fired first is a race, not news.
            await record(call, None, "error", codes.DEADLINE_EXCEEDED, _DEADLINE_PASSED)
            raise Ended(codes.DEADLINE_EXCEEDED, _DEADLINE_PASSED) from None
        detail = scrub(exc.detail)
        if exc.code == codes.LLM_CONFIG:
            detail = _config_failure(exc, call, detail)
        await record(call, None, "error", exc.code, detail)
        raise Ended(exc.code, f"{exc.provider}: {detail}") from None
    except TimeoutError:
        await record(call, None, "error", codes.DEADLINE_EXCEEDED, _DEADLINE_PASSED)
        raise Ended(codes.DEADLINE_EXCEEDED, _DEADLINE_PASSED) from None
    except Exception as exc:  # a client bug must end this job, not the worker
        log.exception("model client raised an unclassified error")
        why = f"the model client failed unexpectedly ({type(exc).__name__})"
        await record(call, None, "error", codes.INTERNAL_ERROR, why)
        raise Ended(codes.INTERNAL_ERROR, why) from None


def _config_failure(exc: ProviderError, call: Call, detail: str) -> str:
    """``CONFIG_FAILURE`` for the tenant; the provider's own words go to the operator's log.

    They may echo the service's key or name its account (scrubbed at the transport).
    """
    log.warning(
        "provider %s rejected the service's credentials or configuration (model %s): %s",
        exc.provider,
        exc.model or call.request.model or "default",
        detail,
    )
    return CONFIG_FAILURE
