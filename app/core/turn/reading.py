"""A turn's answers read into verdicts: the contract's checks, run for this job.

A field-level answer (a patch re-ask) is merged into the last candidate first and the
merged value checked whole; best-of-N keeps the first valid answer.
"""

from __future__ import annotations

import json
import logging
from dataclasses import replace
from decimal import Decimal
from typing import Any

from app.core.answer.contract import Contract
from app.core.answer.patch import Patch, merge
from app.core.answer.plausibility import Plausibility
from app.core.answer.validators import first_failing
from app.core.answer.verdict import (
    ANSWER_CHARS_PER_TOKEN,
    MAX_ANSWER_CHARS,
    Accepted,
    Rejected,
    Verdict,
    classify,
)
from app.core.schema.steps import TooMuchWork
from app.core.text.unicode import scrub
from app.core.turn.model import LLMRequest, LLMResponse
from app.core.turn.request import Call
from app.core.turn.setup import Setup
from app.core.turn.state import RunState
from app.core.turn.stop import Ended
from app.core.wire import codes
from app.core.wire.errors import ProviderError, ValidatorUnavailable

log = logging.getLogger(__name__)


class Reader:
    """``verdict, merged, chosen = await reader.pick(call, response.choices)``."""

    def __init__(self, setup: Setup, state: RunState) -> None:
        self.setup = setup
        self.state = state
        spec = setup.spec
        # The default checks (``app.core.answer.plausibility``): for jobs with an input.
        self.plausibility: Plausibility | None = None
        if spec.checks.plausibility and spec.input not in (None, "", [], {}):
            self.plausibility = Plausibility.of(
                job_input=spec.input, schema=setup.contract.output_schema, task=spec.task
            )
        self.implausible = 0  # answers the default checks rejected in this run
        # Numbers they rejected: the same one again is answered with the input's numbers.
        self.runaways: set[Decimal] = set()

    async def pick(
        self, call: Call, choices: tuple[LLMResponse, ...]
    ) -> tuple[Verdict, str | None, int]:
        """The verdict on the first valid answer (else the first), its merged text, its index.

        The merged text is a field-level answer's whole value, the next correction quotes it.
        """
        state = self.state
        verdict, merged = await self.verdict(call, choices[0])
        failed = state.failed_validator  # the first answer's, should it be the one kept
        chosen = 0
        for index, other in enumerate(choices[1:], start=1):
            if isinstance(verdict, Accepted):
                break
            candidate, candidate_merged = await self.verdict(call, other)
            if isinstance(candidate, Accepted):
                verdict, merged, chosen = candidate, candidate_merged, index
        state.failed_validator = failed
        return verdict, merged, chosen

    async def verdict(self, call: Call, response: LLMResponse) -> tuple[Verdict, str | None]:
        """What one answer means; a field-level answer's, once merged (with its text)."""
        self.state.failed_validator = None
        request = call.request
        prompt_text = "\n".join(m.content for m in request.messages)
        if call.patch is None:
            verdict = await self._classify(response, self.setup.contract, prompt_text, request)
            return self._noted(verdict), None
        verdict, merged = await self._merged(call.patch, response, prompt_text, request)
        return self._noted(verdict), merged

    def _noted(self, verdict: Verdict) -> Verdict:
        """An accepted answer says when the default checks rejected an earlier one."""
        if not isinstance(verdict, Accepted) or not self.implausible:
            return verdict
        note = (
            f"plausibility: rejected {self.implausible} earlier answer(s) "
            "(a number or text the input does not hold); the re-ask fixed it"
        )
        self.implausible = 0
        return replace(verdict, warnings=(*verdict.warnings, note))

    async def _merged(
        self, patch: Patch, response: LLMResponse, prompt_text: str, request: LLMRequest
    ) -> tuple[Verdict, str | None]:
        # The answer holds the parts asked for: read under the sub-schema, merged, and the
        # merged value checked whole (schema, then validators) as if the model had sent it.
        contract = self.setup.contract
        parts = await classify(
            response,
            contract=replace(contract, output_schema=patch.schema, validators=()),
            spec=self.setup.spec,
            prompt_text=prompt_text,
            tools_offered=bool(request.tools),
            max_output_tokens=request.max_output_tokens,
            validate=_passing,
        )
        if isinstance(parts, Accepted):
            answer: Any = parts.value
        elif isinstance(parts, Rejected) and parts.parsed:
            answer = parts.value  # not the shape asked for; merge reads what it can
        else:
            return parts, None
        merged = merge(patch, answer)
        text = json.dumps(merged.value, ensure_ascii=False)
        whole = replace(response, content=text, finish_reason="stop", tool_calls=())
        limit = MAX_ANSWER_CHARS // ANSWER_CHARS_PER_TOKEN
        verdict = await self._classify(
            whole, contract, "", replace(request, max_output_tokens=limit)
        )
        if isinstance(verdict, Accepted):
            notes = [f"patch: re-asked for {', '.join(patch.pointers)} only; merged the answer"]
            if merged.ignored:
                ignored = ", ".join(merged.ignored[:8])
                notes.append(f"patch: ignored parts that were not asked for: {ignored}")
            verdict = replace(verdict, warnings=(*verdict.warnings, *notes))
        return verdict, text

    async def _classify(
        self, response: LLMResponse, contract: Contract, prompt_text: str, request: LLMRequest
    ) -> Verdict:
        return await classify(
            response,
            contract=contract,
            spec=self.setup.spec,
            prompt_text=prompt_text,
            tools_offered=bool(request.tools),
            max_output_tokens=request.max_output_tokens,
            validate=self._validate,
            repair=None if self.plausibility is None else self.plausibility.repaired,
        )

    async def _validate(self, value: Any) -> str | None:
        """The first failing validator's diagnosis (its index kept), None when all pass.

        A validator is a black box: its crash ends the job, not the worker.
        """
        if self.plausibility is not None:
            found = self.plausibility.check(value, again=self.runaways)
            if found is not None:
                self.implausible += 1
                if found.number is not None:
                    self.runaways.add(found.number)
                return found.diagnosis
        try:
            failed = await first_failing(self.setup.contract.validators, value)
            if failed is None:
                return None
            self.state.failed_validator, diagnosis = failed
            return diagnosis
        except (ValidatorUnavailable, TooMuchWork, Ended):
            raise
        except ProviderError as exc:  # an in-process validator's own model call failed
            raise ValidatorUnavailable(
                f"a validator's model call failed ({exc.code}): {scrub(exc.detail)[:300]}"
            ) from None
        except Exception as exc:
            log.warning("validator raised", exc_info=True)
            raise Ended(
                codes.EVENT_INVALID_RESPONSE, f"a validator failed: {type(exc).__name__}"
            ) from None


async def _passing(value: Any) -> str | None:
    """No semantic checks: a field-level answer's parts are checked once merged."""
    return None
