"""What every wire adapter shares: one POST, failures classified at the edge, the reply
translated, a malformed reply turned into ``ProviderUnavailable``. Subclasses own only
their wire format: the path, the auth header, the request body and the reply parser."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, ClassVar, Final, Protocol

import httpx

from app.core.turn.model import LLMRequest, LLMResponse, StreamTally, TextSink
from app.core.wire.errors import ProviderUnavailable
from app.providers.config import ModelConfig, ProviderConfig
from app.providers.streaming import post_events
from app.providers.structured import Capability
from app.providers.transport import Edge, post_json, reply_cap

# The longest model name a reply may report that we keep (it goes on trace spans).
MAX_REPORTED_MODEL: Final = 200


def reported_model(body: Mapping[str, Any]) -> str | None:
    """The model a reply says answered (its ``model`` field), bounded; None without one."""
    model = body.get("model")
    return model[:MAX_REPORTED_MODEL] if isinstance(model, str) and model else None


class StreamReader(Protocol):
    """One streamed reply being read: its events in, the reply's body (as the provider
    would have sent it whole) out."""

    def event(self, name: str | None, data: str) -> None: ...

    def body(self) -> Mapping[str, Any]: ...


class ReaderClass(Protocol):
    """How an adapter makes the reader of one streamed reply."""

    def __call__(
        self,
        sink: TextSink,
        tally: StreamTally,
        *,
        mechanism: Capability,
        wrapped: bool,
        edge: Edge,
    ) -> StreamReader: ...


class HttpAdapter:
    path: ClassVar[str]
    noun: ClassVar[str]  # what a reply is called in error messages
    # Whether one call can give several answers (``LLMRequest.n``); else the router makes
    # that many calls.
    supports_n: ClassVar[bool] = False

    def __init__(self, http: httpx.AsyncClient, *, provider: str, config: ProviderConfig) -> None:
        self._http = http
        self._provider = provider
        self._base_url = config.url
        self._key = config.api_key
        self._extra_headers = self.fixed_headers(config)
        self._parsed: tuple[str, httpx.URL] | None = None  # url() and its parse, kept

    def __repr__(self) -> str:
        return f"{type(self).__name__}(provider={self._provider!r}, base_url={self._base_url!r})"

    def api_key(self) -> str | None:
        """The key requests carry, read per request (the local server's is per process)."""
        return self._key.get_secret_value() if self._key is not None else None

    # -- for the provider's batch API (app.providers.batch): same client, key and headers --

    @property
    def http(self) -> httpx.AsyncClient:
        return self._http

    @property
    def base_url(self) -> str:
        return self._base_url

    def headers(self) -> dict[str, str]:
        """The headers every request to the provider carries, its key included."""
        headers = dict(self._extra_headers)
        key = self.api_key()
        if key:
            headers.update(self.auth_headers(key))
        return headers

    def url(self) -> str:
        """Where requests go; read per request (a restarted local server may move)."""
        return self._base_url + self.path

    def _target(self) -> httpx.URL:
        """``url()`` parsed, once per value it takes (parsing is a good part of a call)."""
        url = self.url()
        parsed = self._parsed
        if parsed is None or parsed[0] != url:
            parsed = self._parsed = (url, httpx.URL(url))
        return parsed[1]

    async def send(
        self,
        request: LLMRequest,
        *,
        model: str,
        spec: ModelConfig,
        mechanism: Capability,
        timeout_s: float,
    ) -> LLMResponse:
        key = self.api_key()
        edge = Edge(self._provider, model, (key,) if key else ())
        body, wrapped = self.request_body(request, spec=spec, mechanism=mechanism)
        headers = dict(self._extra_headers)
        if key:
            headers.update(self.auth_headers(key))
        sink = request.stream
        try:
            if sink is not None and request.n <= 1 and self.stream_reader is not None:
                # A retry or a fallback model: the answer starts over, counted afresh.
                tally = sink.restart(self._provider, model)
                reader = self.stream_reader(
                    sink, tally, mechanism=mechanism, wrapped=wrapped, edge=edge
                )
                answer: Mapping[str, Any] = await self._streamed(
                    request, body, headers, timeout_s, edge, reader
                )
            else:
                answer, _ = await post_json(
                    self._http,
                    self._target(),
                    headers=headers,
                    body=body,
                    timeout_s=timeout_s,
                    edge=edge,
                    max_bytes=reply_cap(request.max_output_tokens),
                )
        except (KeyError, IndexError, TypeError, ValueError, AttributeError) as exc:
            raise ProviderUnavailable(
                f"{self._provider} sent a malformed stream for model {model}"
                f" ({type(exc).__name__}: {edge.scrub(str(exc))})",
                provider=self._provider,
                model=model,
            ) from None
        try:
            return self.parse_response(
                answer, model=model, provider=self._provider, mechanism=mechanism, wrapped=wrapped
            )
        except (KeyError, IndexError, TypeError, ValueError, AttributeError) as exc:
            raise ProviderUnavailable(
                f"{self._provider} sent a malformed {self.noun} for model {model}"
                f" ({type(exc).__name__}: {edge.scrub(str(exc))})",
                provider=self._provider,
                model=model,
            ) from None

    async def _streamed(
        self,
        request: LLMRequest,
        body: dict[str, Any],
        headers: dict[str, str],
        timeout_s: float,
        edge: Edge,
        reader: StreamReader,
    ) -> Mapping[str, Any]:
        """The reply read as it streams by ``reader``."""
        await post_events(
            self._http,
            self._target(),
            headers=headers,
            body=self.streaming_body(body),
            timeout_s=timeout_s,
            edge=edge,
            max_bytes=reply_cap(request.max_output_tokens),
            on_event=reader.event,
        )
        return reader.body()

    # -- the wire format ------------------------------------------------------------------

    # What reads this wire's streamed reply; ``None``: the wire cannot stream an answer.
    stream_reader: ClassVar[ReaderClass | None] = None

    def streaming_body(self, body: dict[str, Any]) -> dict[str, Any]:
        """``body`` asking for the answer as a stream."""
        raise NotImplementedError

    def fixed_headers(self, config: ProviderConfig) -> dict[str, str]:
        return dict(config.headers)

    def auth_headers(self, key: str) -> dict[str, str]:
        raise NotImplementedError

    def request_body(
        self, request: LLMRequest, *, spec: ModelConfig, mechanism: Capability
    ) -> tuple[dict[str, Any], bool]:
        raise NotImplementedError

    def parse_response(
        self,
        body: Mapping[str, Any],
        *,
        model: str,
        provider: str,
        mechanism: Capability,
        wrapped: bool,
    ) -> LLMResponse:
        raise NotImplementedError
