"""The providers' batch APIs: one round's calls sent as one provider batch, polled, its
results read back line by line, each line answered as the live call would have been.

    api = batch_api(target)                       # OpenAI's or Anthropic's, by wire
    line = api.line(index, round_no, request)     # one JSONL line of the round
    batch_id = await api.submit(path, token=...)  # upload + create, idempotent by token
    state = await api.poll(batch_id)              # ended? the provider's status
    async for custom_id, answer in api.results(batch_id): ...

OpenAI: the round's lines are a JSONL file uploaded to ``/files`` (purpose ``batch``),
then ``POST /batches`` (``completion_window`` 24h) with the round's token as
``Idempotency-Key`` and in ``metadata``; results are the output and error files.
Anthropic: ``POST /v1/messages/batches`` with ``requests: [{custom_id, params}]``
streamed from the same file, the token as ``Idempotency-Key``; results from its
``results_url``. A line's body is the live call's body (the adapters' own
``request_body``) and a result's body is parsed by the adapters' ``parse_response``, so a
batch answer is read exactly as a live one. Its cost is the live price times the batch
discount.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Mapping
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, Final, Protocol

import httpx

from app.core.batch.replay import Answer, LineFailure
from app.core.turn.model import LLMRequest, LLMResponse
from app.core.wire.errors import ProviderConfigError, ProviderUnavailable
from app.providers import anthropic, openai, structured
from app.providers.adapter import HttpAdapter
from app.providers.pricing import cost_of
from app.providers.router import Target
from app.providers.structured import Capability

# The mechanisms a custom id can name (the result is parsed with the one the line used).
MECHANISMS: Final[tuple[Capability, ...]] = (
    "prompt",
    "json_schema",
    "json_object",
    "json_object_schema",
    "tool",
)
DEFAULT_DISCOUNT: Final = 0.5
# Bounds on what a provider's batch endpoints may send back.
MAX_STATUS_BYTES: Final = 1_048_576
MAX_LINE_BYTES: Final = 16 * 1_048_576
TIMEOUT: Final = httpx.Timeout(60.0, connect=10.0)


@dataclass(frozen=True, slots=True)
class PollState:
    ended: bool
    status: str  # the provider's word
    output: tuple[str, ...] = ()  # OpenAI: the output and error file ids


class BatchApi(Protocol):
    wire: str

    def line(self, index: int, round_no: int, request: LLMRequest) -> str: ...

    async def submit(self, path: Path, *, token: str) -> str: ...

    async def poll(self, batch_id: str) -> PollState: ...

    async def cancel(self, batch_id: str) -> None: ...

    def results(self, state: PollState, batch_id: str) -> AsyncIterator[tuple[str, Answer | None]]:
        """Each line's custom id and answer; ``None`` for a line that did not run
        (expired, cancelled): it goes again next round."""
        ...


def custom_id(index: int, round_no: int, mechanism: Capability, wrapped: bool) -> str:
    """``i<index>-r<round>-m<mechanism><wrapped>``: within both providers' charsets."""
    return f"i{index}-r{round_no}-m{MECHANISMS.index(mechanism)}{int(wrapped)}"


def parse_custom_id(value: str) -> tuple[int, int, Capability, bool] | None:
    """The parts of a ``custom_id``, or None for one we did not write."""
    try:
        index, round_no, mech = value.split("-")
        if index[0] != "i" or round_no[0] != "r" or mech[0] != "m" or len(mech) != 3:
            return None
        return int(index[1:]), int(round_no[1:]), MECHANISMS[int(mech[1])], mech[2] == "1"
    except (ValueError, IndexError):
        return None


class _Base:
    wire: str

    def __init__(self, target: Target, adapter: HttpAdapter, discount: float) -> None:
        self.target = target
        self.adapter = adapter
        self.discount = discount

    def _body(self, request: LLMRequest) -> tuple[dict[str, Any], Capability, bool]:
        mechanism = structured.mechanism(self.target.capability, request)
        body, wrapped = self.adapter.request_body(
            request, spec=self.target.spec, mechanism=mechanism
        )
        return body, mechanism, wrapped

    def answer(self, cid: str, body: Mapping[str, Any]) -> Answer | None:
        """The answer in a result body, priced at the batch price."""
        parts = parse_custom_id(cid)
        if parts is None:
            return None
        _, _, mechanism, wrapped = parts
        target = self.target
        try:
            response = self.adapter.parse_response(
                body,
                model=target.name,
                provider=target.provider,
                mechanism=mechanism,
                wrapped=wrapped,
            )
        except (KeyError, IndexError, TypeError, ValueError, AttributeError) as exc:
            return LineFailure(
                target.provider, target.name, f"a malformed batch result ({type(exc).__name__})"
            )
        return priced(response, target, self.discount)

    async def _json(self, response: httpx.Response) -> dict[str, Any]:
        if response.status_code in (401, 403):
            raise ProviderConfigError(
                f"the batch API refused the service's key ({response.status_code})",
                provider=self.target.provider,
            )
        if response.status_code >= 400:
            raise ProviderUnavailable(
                f"the batch API answered {response.status_code}: {response.text[:300]}",
                provider=self.target.provider,
            )
        if len(response.content) > MAX_STATUS_BYTES:
            raise ProviderUnavailable("the batch API's answer is too large", provider="batch")
        body = response.json()
        if not isinstance(body, dict):
            raise ProviderUnavailable("the batch API's answer is not an object", provider="batch")
        return body

    def _url(self, path: str) -> str:
        return self.adapter.base_url + path

    async def _lines(self, url: str) -> AsyncIterator[dict[str, Any]]:
        """A JSONL resource line by line, never held whole."""
        async with self.adapter.http.stream(
            "GET", url, headers=self.adapter.headers(), timeout=TIMEOUT
        ) as response:
            if response.status_code >= 400:
                await response.aread()
                await self._json(response)
            async for text in response.aiter_lines():
                if not text.strip() or len(text) > MAX_LINE_BYTES:
                    continue
                try:
                    line = json.loads(text)
                except ValueError:
                    continue
                if isinstance(line, dict):
                    yield line


def priced(response: LLMResponse, target: Target, discount: float) -> LLMResponse:
    """``response`` with its cost at the batch price."""
    cost, warning = cost_of(target.price, response.usage, target.name)
    warnings = (*response.warnings, warning) if warning else response.warnings
    return replace(response, cost_usd=None if cost is None else cost * discount, warnings=warnings)


class OpenAIBatches(_Base):
    wire = "openai"

    def line(self, index: int, round_no: int, request: LLMRequest) -> str:
        body, mechanism, wrapped = self._body(request)
        cid = custom_id(index, round_no, mechanism, wrapped)
        return json.dumps(
            {"custom_id": cid, "method": "POST", "url": "/v1/chat/completions", "body": body}
        )

    async def submit(self, path: Path, *, token: str) -> str:
        http, headers = self.adapter.http, self.adapter.headers()
        with path.open("rb") as file:
            uploaded = await self._json(
                await http.post(
                    self._url("/files"),
                    headers=headers,
                    files={"file": (f"{token}.jsonl", file, "application/jsonl")},
                    data={"purpose": "batch"},
                    timeout=httpx.Timeout(600.0, connect=10.0),
                )
            )
        created = await self._json(
            await http.post(
                self._url("/batches"),
                headers={**headers, "Idempotency-Key": token},
                json={
                    "input_file_id": uploaded["id"],
                    "endpoint": "/v1/chat/completions",
                    "completion_window": "24h",
                    "metadata": {"reprompt_round": token},
                },
                timeout=TIMEOUT,
            )
        )
        return str(created["id"])

    async def poll(self, batch_id: str) -> PollState:
        body = await self._json(
            await self.adapter.http.get(
                self._url(f"/batches/{batch_id}"), headers=self.adapter.headers(), timeout=TIMEOUT
            )
        )
        status = str(body.get("status"))
        ended = status in ("completed", "failed", "expired", "cancelled")
        files = tuple(str(f) for f in (body.get("output_file_id"), body.get("error_file_id")) if f)
        return PollState(ended, status, files)

    async def cancel(self, batch_id: str) -> None:
        await self._json(
            await self.adapter.http.post(
                self._url(f"/batches/{batch_id}/cancel"),
                headers=self.adapter.headers(),
                timeout=TIMEOUT,
            )
        )

    async def results(
        self, state: PollState, batch_id: str
    ) -> AsyncIterator[tuple[str, Answer | None]]:
        for file_id in state.output:
            async for line in self._lines(self._url(f"/files/{file_id}/content")):
                cid = line.get("custom_id")
                if not isinstance(cid, str):
                    continue
                response = line.get("response")
                error = line.get("error")
                if isinstance(response, dict) and response.get("status_code") == 200:
                    body = response.get("body")
                    if isinstance(body, dict):
                        yield cid, self.answer(cid, body)
                        continue
                if isinstance(error, dict) and error.get("code") in (
                    "batch_expired",
                    "batch_cancelled",
                ):
                    yield cid, None
                    continue
                status = response.get("status_code") if isinstance(response, dict) else None
                yield (
                    cid,
                    LineFailure(
                        self.target.provider,
                        self.target.name,
                        f"the batch line failed (status {status})",
                    ),
                )


class AnthropicBatches(_Base):
    wire = "anthropic"

    def line(self, index: int, round_no: int, request: LLMRequest) -> str:
        body, mechanism, wrapped = self._body(request)
        cid = custom_id(index, round_no, mechanism, wrapped)
        return json.dumps({"custom_id": cid, "params": body})

    async def submit(self, path: Path, *, token: str) -> str:
        async def stream() -> AsyncIterator[bytes]:
            yield b'{"requests":['
            with path.open("rb") as file:
                first = True
                for raw in file:
                    raw = raw.strip()
                    if not raw:
                        continue
                    yield raw if first else b"," + raw
                    first = False
            yield b"]}"

        created = await self._json(
            await self.adapter.http.post(
                self._url("/v1/messages/batches"),
                headers={
                    **self.adapter.headers(),
                    "Idempotency-Key": token,
                    "content-type": "application/json",
                },
                content=stream(),
                timeout=httpx.Timeout(600.0, connect=10.0),
            )
        )
        return str(created["id"])

    async def poll(self, batch_id: str) -> PollState:
        body = await self._json(
            await self.adapter.http.get(
                self._url(f"/v1/messages/batches/{batch_id}"),
                headers=self.adapter.headers(),
                timeout=TIMEOUT,
            )
        )
        status = str(body.get("processing_status"))
        return PollState(status == "ended", status)

    async def cancel(self, batch_id: str) -> None:
        await self._json(
            await self.adapter.http.post(
                self._url(f"/v1/messages/batches/{batch_id}/cancel"),
                headers=self.adapter.headers(),
                timeout=TIMEOUT,
            )
        )

    async def results(
        self, state: PollState, batch_id: str
    ) -> AsyncIterator[tuple[str, Answer | None]]:
        # The results live at the batch's results_url; it is built here from the base URL
        # rather than followed, so a provider's answer cannot aim the service elsewhere.
        url = self._url(f"/v1/messages/batches/{batch_id}/results")
        async for line in self._lines(url):
            cid = line.get("custom_id")
            result = line.get("result")
            if not isinstance(cid, str) or not isinstance(result, dict):
                continue
            kind = result.get("type")
            if kind == "succeeded" and isinstance(result.get("message"), dict):
                yield cid, self.answer(cid, result["message"])
            elif kind in ("canceled", "expired"):
                yield cid, None
            else:
                yield (
                    cid,
                    LineFailure(
                        self.target.provider, self.target.name, f"the batch line {kind or 'failed'}"
                    ),
                )


def batch_api(target: Target, *, discount: float = DEFAULT_DISCOUNT) -> BatchApi | None:
    """The batch API of ``target``'s provider, or None when it has none."""
    adapter = target.adapter
    if not target.batch_api or not isinstance(adapter, HttpAdapter):
        return None
    share = target.batch_discount if target.batch_discount is not None else discount
    if isinstance(adapter, anthropic.AnthropicAdapter):
        return AnthropicBatches(target, adapter, share)
    if isinstance(adapter, openai.OpenAIAdapter):
        return OpenAIBatches(target, adapter, share)
    return None
