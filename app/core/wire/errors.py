"""reprompt's one error tree.

Every error carries its stable code (the envelope's error constant where one applies),
whether it is transient, the HTTP status it is rendered with and, for some, how long to
wait before trying again (``retry_after_s``, rendered as ``Retry-After``). One handler in
``app.api.problems`` renders them all as problem+json from these attributes::

    RepromptError              500 internal-error
    ├── InvalidInput           422 invalid-input    bad job, signature, schema, option
    │   ├── SignatureError     422                  with position and what was expected
    │   ├── InvalidFields      422                  several fields at once (``FieldErrors``)
    │   └── (store) IdempotencyConflict             same Idempotency-Key, different body
    ├── (store) QueueFull      503 queue-full       retry after retry_after_s
    ├── (store) StoreUnavailable 503 store-unavailable  Redis did not answer; Retry-After
    ├── (store) EvictingRedis                       start-up only: maxmemory-policy allkeys-*
    ├── (store) NotWaiting     409 conflict         tool outputs for a job not waiting for them
    ├── (store) NoDelivery     409 conflict         a callback redelivery with none to send
    ├── (outbound) OutboundRefused 422, OutboundFailed  a call where a tenant points (tools)
    ├── (api) NotFound, Unauthorized, UnsupportedMediaType, ContentTooLarge, NotReady
    ├── ValidatorUnavailable   502 validator-unavailable  a webhook or judge gave no verdict
    └── ProviderError          502                  a model call failed, classified at the edge
        ├── ProviderTimeout        llm-timeout      retryable
        ├── ProviderRateLimited    llm-rate-limit   retryable, carries Retry-After
        ├── ProviderUnavailable    llm-unavailable  retryable (5xx, connection, open circuit)
        │   └── ProviderCrashed                     the local model died during the call: not
        │                                           retried (the request may be what killed it)
        ├── ProviderTokenLimit     llm-token-limit  the prompt does not fit the context window
        ├── ProviderOversized      llm-invalid-output  the reply passed its byte cap (sized
        │                                           from the output-token limit): not retried
        ├── ProviderRefusal        llm-refusal      refusal or content filter
        └── ProviderConfigError    llm-config       401/403/404: names the provider, not the key

Provider error text is for operators; it is never shown to the model.
"""

from __future__ import annotations

from collections.abc import Sequence
from types import TracebackType

from app.core.wire import codes


class RepromptError(Exception):
    """Base of every error reprompt raises on purpose. Subclasses set the class attributes;
    an instance may narrow ``code`` (``NotReady`` says which dependency is missing)."""

    code: str = codes.INTERNAL_ERROR
    status: int = 500
    retryable: bool = False
    retry_after_s: float | None = None

    def __init__(self, detail: str) -> None:
        super().__init__(detail)
        self.detail = detail


class InvalidInput(RepromptError):
    """The job (or a part of it) is malformed. ``field`` names the offending part."""

    code = codes.INVALID_INPUT
    status = 422

    def __init__(self, detail: str, *, field: str | None = None) -> None:
        super().__init__(detail)
        self.field = field

    @property
    def errors(self) -> tuple[InvalidInput, ...]:
        """Each field's error: this one (``InvalidFields`` has several)."""
        return (self,)


class InvalidFields(InvalidInput):
    """Several parts of a job are malformed: ``errors`` has one error per field."""

    def __init__(self, errors: Sequence[InvalidInput]) -> None:
        fields = ", ".join(error.field or "body" for error in errors)
        super().__init__(f"{len(errors)} fields are invalid: {fields}", field=errors[0].field)
        self._errors = tuple(errors)

    @property
    def errors(self) -> tuple[InvalidInput, ...]:
        return self._errors


class FieldErrors:
    """Every field's error of a check, not only the first: one ``with`` block per check.

        errors = FieldErrors()
        with errors:
            check_task(spec)            # an InvalidInput here is kept; the next check runs
        if "input" not in errors:       # a field over its cap is not read further
            ...
        errors.raise_any()              # the one error, or InvalidFields with them all

    The first error of a field is kept, as FastAPI keeps one per field.
    """

    def __init__(self) -> None:
        self.found: list[InvalidInput] = []

    def __enter__(self) -> None:
        return None

    def __exit__(
        self,
        kind: type[BaseException] | None,
        error: BaseException | None,
        traceback: TracebackType | None,
    ) -> bool:
        if not isinstance(error, InvalidInput):
            return False
        for each in error.errors:
            if each.field not in self:
                self.found.append(each)
        return True

    def __contains__(self, field: object) -> bool:
        return any(error.field == field for error in self.found)

    def __bool__(self) -> bool:
        return bool(self.found)

    def raise_any(self) -> None:
        if len(self.found) == 1:
            raise self.found[0]
        if self.found:
            raise InvalidFields(self.found)


class SignatureError(InvalidInput):
    """A signature failed to parse: ``position`` is the 0-based offset, ``expected`` what fits."""

    def __init__(self, detail: str, *, position: int, expected: str, source: str) -> None:
        super().__init__(detail, field="signature")
        self.position = position
        self.expected = expected
        self.source = source


class ValidatorUnavailable(RepromptError):
    """A validator that calls out (webhook, LLM judge) could not say whether the answer
    passes: timed out, failed, or answered nonsense. Not the model's fault: never re-asked."""

    code = codes.VALIDATOR_UNAVAILABLE
    status = 502
    retryable = True


class ProviderError(RepromptError):
    """A model call failed after transport retries. Raised by provider adapters only."""

    status = 502

    def __init__(
        self,
        detail: str,
        *,
        provider: str,
        model: str | None = None,
        retry_after_s: float | None = None,
        transport_retries: int = 0,
        transport_wait_ms: int = 0,
    ) -> None:
        super().__init__(detail)
        self.provider = provider
        self.model = model
        self.retry_after_s = retry_after_s
        self.transport_retries = transport_retries
        self.transport_wait_ms = transport_wait_ms


class ProviderTimeout(ProviderError):
    code = codes.LLM_TIMEOUT
    status = 504
    retryable = True


class ProviderRateLimited(ProviderError):
    code = codes.LLM_RATE_LIMIT
    status = 429
    retryable = True


class ProviderUnavailable(ProviderError):
    code = codes.LLM_UNAVAILABLE
    status = 503
    retryable = True


class ProviderCrashed(ProviderUnavailable):
    """The managed local model process died while answering. Not retried inside the call:
    a request that crashes the server would crash its restart too."""

    retryable = False


class ProviderTokenLimit(ProviderError):
    code = codes.LLM_TOKEN_LIMIT
    status = 422


class ProviderOversized(ProviderError):
    """The provider's reply was larger than any answer within the request's output-token
    limit could be; reading stopped at the cap and nothing of it is kept."""

    code = codes.LLM_INVALID_OUTPUT
    status = 502


class ProviderRefusal(ProviderError):
    code = codes.LLM_REFUSAL
    status = 422


class ProviderConfigError(ProviderError):
    code = codes.LLM_CONFIG
    status = 502
