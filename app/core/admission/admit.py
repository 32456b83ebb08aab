"""The one admission call: a job spec in, its compiled contract out, or every field's error.

    contract = admit(
        spec,
        caps=settings,                           # Caps: the REPROMPT_MAX_* sizes and depths
        models=router,                           # Models: which models and routes exist
        check_url=guard.check_url,               # the outbound guard: why not, or None
        check_headers=lambda h, url: secrets.check_headers(h, tenant, host=host_of(url)),
    )

Raises ``InvalidInput`` naming the field, ``InvalidFields`` when several are wrong (each
field's first error). A field over its size cap is not read further. Pure: what it needs
from outside comes in as arguments, so the API calls down into it and nothing calls back.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Protocol

from app.core.admission.caps import Caps, check_caps, check_output_schema, check_signature_schema
from app.core.answer.contract import Contract, compile_contract
from app.core.schema.validation import check_schema
from app.core.turn.model import StructuredMode, StructuredOutput
from app.core.wire.errors import FieldErrors, InvalidInput
from app.core.wire.spec import JobSpec

# Why the service may not call a URL (the outbound guard, no DNS yet), None when it may.
CheckUrl = Callable[[str], str | None]
# Why a tool's headers are refused for its URL (a secret the tenant does not have, or one
# the operator bound to other hosts), None when they pass.
CheckHeaders = Callable[[Mapping[str, str] | None, str], str | None]


class Models(Protocol):
    """The configured models and routes (the provider router is one)."""

    def resolve(self, model: str | None, /) -> tuple[str, ...]:
        """The models ``model`` tries; ``InvalidInput`` for an unknown one."""
        ...

    def structured_mode(self, model: str | None, requested: StructuredOutput, /) -> StructuredMode:
        """``InvalidInput`` (``structuredOutput``) when ``"native"`` cannot be had."""
        ...

    def without_tools(self, model: str | None, /) -> list[str]:
        """The models ``model`` tries that cannot call tools."""
        ...


def admit(
    spec: JobSpec,
    *,
    caps: Caps,
    models: Models,
    check_url: CheckUrl,
    check_headers: CheckHeaders,
) -> Contract:
    """The contract of a job fit to queue; else every field's error at once."""
    errors = FieldErrors()
    check_caps(spec, caps, errors)
    if spec.images:
        _check_images(spec, caps, errors)
    _check_tools(spec, caps, errors)
    _check_urls(spec, check_url, check_headers, errors)
    _check_models(spec, models, errors)
    contract = compile_contract(spec, errors)  # the budget plays no part in it
    if contract is not None and spec.signature is not None:
        with errors:
            check_signature_schema(spec.signature, contract.output_schema, caps)
    errors.raise_any()
    assert contract is not None  # no errors: compiled
    return contract


def _check_images(spec: JobSpec, caps: Caps, errors: FieldErrors) -> None:
    """The images' count, each one's bytes, and their bytes in all (#34)."""
    with errors:
        if len(spec.images) > caps.max_images:
            raise InvalidInput(f"at most {caps.max_images} images", field="images")
        for i, image in enumerate(spec.images):
            if image.size > caps.max_image_bytes:
                raise InvalidInput(
                    f"{image.size} bytes, over the cap of {caps.max_image_bytes} per image",
                    field=f"images[{i}]",
                )
        total = sum(image.size for image in spec.images)
        if total > caps.max_images_bytes:
            raise InvalidInput(
                f"{total} bytes of images, over the cap of {caps.max_images_bytes} in all",
                field="images",
            )


def _check_tools(spec: JobSpec, caps: Caps, errors: FieldErrors) -> None:
    """Each tool's ``parameters``: an object schema, held to the answer schema's caps."""
    for i, tool in enumerate(spec.tools):
        field = f"tools[{i}].parameters"
        with errors:
            check_output_schema(tool.parameters, caps, field=field)
            try:
                check_schema(tool.parameters, max_depth=caps.max_schema_depth)
            except InvalidInput as exc:
                detail = exc.detail.replace("schema", "parameters", 1)
                raise InvalidInput(detail, field=field) from None
            if tool.parameters.get("type") != "object":
                raise InvalidInput('parameters must be {"type": "object", ...}', field=field)


def _check_urls(
    spec: JobSpec, check_url: CheckUrl, check_headers: CheckHeaders, errors: FieldErrors
) -> None:
    """Every URL the service would call passes the outbound guard (no DNS yet).

    HTTP tools, webhook validators, the callback; a tool's headers name only the tenant's
    own secrets, each bound to (or not bound away from) the tool's host.
    """
    found: list[tuple[str, str | None]] = []
    for i, tool in enumerate(spec.tools):
        if tool.url is not None:
            found.append((f"tools[{i}].url", check_url(tool.url)))
            found.append((f"tools[{i}].headers", check_headers(tool.headers, tool.url)))
    for i, validator in enumerate(spec.validators):
        if validator.kind == "webhook" and validator.url is not None:
            found.append((f"validators[{i}].url", check_url(validator.url)))
    if spec.callback is not None:
        found.append(("callback.url", check_url(spec.callback.url)))
    for field, problem in found:
        if problem is not None:
            with errors:
                raise InvalidInput(problem, field=field)


def _check_models(spec: JobSpec, models: Models, errors: FieldErrors) -> None:
    """The job's models and its judges' exist, can call its tools, and can give its
    ``structuredOutput``."""
    for i, validator in enumerate(spec.validators):
        if validator.kind == "judge" and validator.model is not None:
            with errors:
                _resolve(models, validator.model, f"validators[{i}].model")
    if spec.tools and spec.budget.max_turns > 1:
        with errors:
            lacking = models.without_tools(spec.model)  # an unknown model: field "model"
            if lacking:
                raise InvalidInput(
                    f"{', '.join(lacking)} cannot call tools (no native tool calling, e.g. "
                    "the embedded local model); give another model, or no tools",
                    field="tools",
                )
    for field, name in (("model", spec.model), ("escalateModel", spec.escalate_model)):
        if field == "escalateModel" and name is None:
            continue
        with errors:
            _resolve(models, name, field)
            models.structured_mode(name, spec.structured_output)  # "native" needs every model


def _resolve(models: Models, name: str | None, field: str) -> None:
    try:
        models.resolve(name)
    except InvalidInput as exc:
        raise InvalidInput(exc.detail, field=field) from None
