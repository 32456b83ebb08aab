"""The closed set of error constants a result envelope can carry (spec 001).

Import the constants, never spell the strings::

    from app.core.wire.codes import LLM_RATE_LIMIT, RETRYABLE_ERRORS, backoff_delay_ms

    if envelope.error in RETRYABLE_ERRORS:
        await sleep(backoff_delay_ms(envelope.error, attempt) / 1000)
"""

from __future__ import annotations

from typing import Final, Literal

# Result statuses.
RESULT_SUCCESS: Final = "success"
RESULT_ERROR: Final = "error"
RESULT_IN_PROGRESS: Final = "in-progress"
ResultStatus = Literal["success", "error", "in-progress"]

# LLM errors (spec 001).
LLM_REFUSAL: Final = "llm-refusal"
LLM_INVALID_OUTPUT: Final = "llm-invalid-output"
LLM_TIMEOUT: Final = "llm-timeout"
LLM_RATE_LIMIT: Final = "llm-rate-limit"
LLM_TOKEN_LIMIT: Final = "llm-token-limit"
LLM_UNAVAILABLE: Final = "llm-unavailable"
# A provider rejected our credentials or does not know the model: retrying never helps.
LLM_CONFIG: Final = "llm-config"

# External event errors (spec 001): validators that call out (webhooks) report these.
EVENT_TIMEOUT: Final = "event-timeout"
EVENT_UNAVAILABLE: Final = "event-unavailable"
EVENT_REJECTED: Final = "event-rejected"
EVENT_INVALID_RESPONSE: Final = "event-invalid-response"

# Validation errors (spec 001).
INVALID_INPUT: Final = "invalid-input"
# A validator that calls out (a webhook, an LLM judge) could not give a verdict: not the
# model's fault, so nothing is re-asked; the answer it could not check is in the record.
VALIDATOR_UNAVAILABLE: Final = "validator-unavailable"

# The turn loop's own ends (spec 000 and the budgets beyond turns).
BUDGET_EXHAUSTED: Final = "budget-exhausted"
EXPLICIT_FAIL: Final = "explicit-fail"
COST_LIMIT: Final = "cost-limit"
TOKEN_BUDGET: Final = "token-budget"
DEADLINE_EXCEEDED: Final = "deadline-exceeded"
CANCELLED: Final = "cancelled"
INTERNAL_ERROR: Final = "internal-error"
# The service's own end: the job's worker vanished (lease expired) too many times.
WORKER_LOST: Final = "worker-lost"
# A job waiting in requires_action got no tool outputs within its toolTimeoutMs.
TOOL_TIMEOUT: Final = "tool-timeout"

ErrorCode = Literal[
    "llm-refusal",
    "llm-invalid-output",
    "llm-timeout",
    "llm-rate-limit",
    "llm-token-limit",
    "llm-unavailable",
    "llm-config",
    "event-timeout",
    "event-unavailable",
    "event-rejected",
    "event-invalid-response",
    "invalid-input",
    "validator-unavailable",
    "budget-exhausted",
    "explicit-fail",
    "cost-limit",
    "token-budget",
    "deadline-exceeded",
    "cancelled",
    "internal-error",
    "worker-lost",
    "tool-timeout",
]

LLM_ERRORS: Final = frozenset(
    {
        LLM_REFUSAL,
        LLM_INVALID_OUTPUT,
        LLM_TIMEOUT,
        LLM_RATE_LIMIT,
        LLM_TOKEN_LIMIT,
        LLM_UNAVAILABLE,
        LLM_CONFIG,
    }
)
EVENT_ERRORS: Final = frozenset(
    {EVENT_TIMEOUT, EVENT_UNAVAILABLE, EVENT_REJECTED, EVENT_INVALID_RESPONSE}
)
LOOP_ERRORS: Final = frozenset(
    {
        BUDGET_EXHAUSTED,
        EXPLICIT_FAIL,
        COST_LIMIT,
        TOKEN_BUDGET,
        DEADLINE_EXCEEDED,
        CANCELLED,
        INTERNAL_ERROR,
        WORKER_LOST,
        TOOL_TIMEOUT,
    }
)
VALIDATOR_ERRORS: Final = frozenset({VALIDATOR_UNAVAILABLE})
ALL_ERRORS: Final = LLM_ERRORS | EVENT_ERRORS | LOOP_ERRORS | VALIDATOR_ERRORS | {INVALID_INPUT}

# Retryability for orchestrators (spec 001): transient conditions only.
RETRYABLE_LLM_ERRORS: Final = frozenset({LLM_TIMEOUT, LLM_RATE_LIMIT, LLM_UNAVAILABLE})
NON_RETRYABLE_LLM_ERRORS: Final = LLM_ERRORS - RETRYABLE_LLM_ERRORS
RETRYABLE_EVENT_ERRORS: Final = frozenset({EVENT_TIMEOUT, EVENT_UNAVAILABLE})
NON_RETRYABLE_EVENT_ERRORS: Final = EVENT_ERRORS - RETRYABLE_EVENT_ERRORS
RETRYABLE_ERRORS: Final = RETRYABLE_LLM_ERRORS | RETRYABLE_EVENT_ERRORS | VALIDATOR_ERRORS
NON_RETRYABLE_ERRORS: Final = ALL_ERRORS - RETRYABLE_ERRORS

# Per-error base delays in milliseconds (spec 001), doubled per attempt, capped.
BACKOFF_DELAYS_MS: Final[dict[str, int]] = {
    LLM_RATE_LIMIT: 5000,
    LLM_TIMEOUT: 1000,
    LLM_UNAVAILABLE: 10000,
    EVENT_TIMEOUT: 2000,
    EVENT_UNAVAILABLE: 5000,
    VALIDATOR_UNAVAILABLE: 5000,
}
DEFAULT_BACKOFF_MS: Final = 2000
MAX_BACKOFF_MS: Final = 30000


def is_retryable(code: str) -> bool:
    """True for the transient errors an orchestrator may retry."""
    return code in RETRYABLE_ERRORS


def backoff_delay_ms(code: str, attempt: int) -> int:
    """Spec 001's schedule: base delay for ``code`` doubled per ``attempt`` (0-based), capped."""
    base = BACKOFF_DELAYS_MS.get(code, DEFAULT_BACKOFF_MS)
    return int(min(base * (2 ** max(attempt, 0)), MAX_BACKOFF_MS))
