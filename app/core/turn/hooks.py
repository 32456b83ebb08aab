"""The validators that call out, as a run provides them (``app.core.answer.validators.Hooks``).

A webhook goes through the runtime's ``webhook``; a judge is a model call of the job's own,
within its budgets and deadline, its spend counted apart in the envelope.
"""

from __future__ import annotations

import asyncio
from typing import Any

from app.core.answer.finding import Finding
from app.core.answer.judge import JUDGE_OUTPUT_TOKENS, JUDGE_SCHEMA, judge_finding, judge_messages
from app.core.answer.quote import quoted, url_host
from app.core.turn.budget import Limits, estimate_tokens
from app.core.turn.model import LLMRequest, LLMResponse, Message, ModelClient
from app.core.turn.runtime import Runtime
from app.core.turn.state import RunState
from app.core.turn.stop import Ended
from app.core.wire import codes
from app.core.wire.errors import ProviderError, ValidatorUnavailable
from app.core.wire.spec import JobSpec, ValidatorSpec


class ValidatorHooks:
    """Built before the contract (whose validators hold it), used by them during a run."""

    def __init__(self, spec: JobSpec, runtime: Runtime, limits: Limits, state: RunState) -> None:
        self.spec = spec
        self.runtime = runtime
        self.limits = limits
        self.state = state

    async def webhook(self, spec: ValidatorSpec, value: Any) -> Finding:
        if self.runtime.webhook is None:
            raise ValidatorUnavailable("webhook validators are not available here")
        ok, said = await self.runtime.webhook(spec, value, self.state.rejected + 1)
        if ok:
            return True, None
        source = f"the webhook validator at {url_host(spec.url)}"
        if not said:
            return False, f"{source} rejected the answer without giving a reason"
        return False, quoted(source, said)

    async def judge(self, spec: ValidatorSpec, value: Any) -> Finding:
        """A configured model grades the candidate against the rubric."""
        messages = judge_messages(self.spec, spec, value)
        request = self._request(spec, messages)
        client, ledger = self.runtime.client, self.state.ledger
        try:
            response = await _complete(client, request)
        except ProviderError as exc:
            ledger.spend.transport_retries += exc.transport_retries
            raise ValidatorUnavailable(
                f"the judge model {spec.model!r} failed ({exc.code})"
            ) from None
        except TimeoutError:
            raise Ended(
                codes.DEADLINE_EXCEEDED, "the job's deadline passed while a judge graded"
            ) from None
        ledger.account(response, messages, validator=True)
        return judge_finding(spec, response)

    def _request(self, spec: ValidatorSpec, messages: tuple[Message, ...]) -> LLMRequest:
        """The judge's call, if the job's budgets allow it (else the job ends)."""
        spend = self.state.ledger.spend
        allowance = self.limits.check(
            prompt_tokens=sum(estimate_tokens(m.content) + 4 for m in messages),
            max_output_tokens=JUDGE_OUTPUT_TOKENS,
            tokens_spent=spend.tokens,
            cost_spent=spend.cost,
            estimate_cost=lambda i, o: self.runtime.client.estimate_cost(spec.model, i, o),
        )
        if not allowance.ok:
            raise Ended(allowance.error or codes.INTERNAL_ERROR, f"judge: {allowance.detail or ''}")
        return LLMRequest(
            messages=messages,
            model=spec.model,
            max_output_tokens=allowance.max_output_tokens,
            temperature=0.0,
            output_schema=JUDGE_SCHEMA,
            timeout_s=self.state.time_left(),
        )


async def _complete(client: ModelClient, request: LLMRequest) -> LLMResponse:
    if request.timeout_s is None:
        return await client.complete(request)
    async with asyncio.timeout(request.timeout_s):
        return await client.complete(request)
