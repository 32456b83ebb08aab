"""A provider's answer read as Server-Sent Events, each event handed on as it arrives.

    await post_events(http, url, headers=h, body=b, timeout_s=30.0, edge=edge,
                      max_bytes=reply_cap(request.max_output_tokens), on_event=reader.event)

The same POST as ``transport.post_json`` (its failures mapped the same way: an error
status is classified from its body, a transport failure or timeout as always), but the
2xx body is ``text/event-stream``: split into events as bytes arrive, bounded by
``max_bytes`` in all (``ProviderOversized`` past it: the connection is dropped and the
provider stops generating), each line scanned once. Closing the request (the job was
cancelled, its task with it) closes the connection at once.
"""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import Callable, Mapping
from typing import Any, Final

import httpx

from app.core.wire.errors import ProviderTimeout, ProviderUnavailable
from app.providers.transport import (
    MAX_ERROR_BYTES,
    Edge,
    classify_status,
    map_transport_errors,
    oversized,
    read_body,
    text_of,
)

logger = logging.getLogger(__name__)

# An event's name and its data (the ``data:`` lines joined by newlines).
OnEvent = Callable[[str | None, str], None]
_NEWLINE: Final = 10


async def post_events(
    http: httpx.AsyncClient,
    url: str | httpx.URL,
    *,
    headers: Mapping[str, str],
    body: Mapping[str, Any],
    timeout_s: float,
    edge: Edge,
    max_bytes: int,
    on_event: OnEvent,
) -> None:
    """POST ``body`` and hand each event of the streamed reply to ``on_event``, or raise."""
    if timeout_s <= 0:
        raise ProviderTimeout(
            f"{edge.provider}: no time left to call model {edge.model}",
            provider=edge.provider,
            model=edge.model,
        )
    content = json.dumps(body, ensure_ascii=False, separators=(",", ":"), allow_nan=False)
    with map_transport_errors(edge, timeout_s):
        request = http.build_request(
            "POST",
            url,
            content=content.encode(),
            headers={
                "content-type": "application/json",
                "accept": "text/event-stream",
                **headers,
            },
            timeout=None,
        )
        async with asyncio.timeout(timeout_s):
            response = await http.send(request, stream=True)
            try:
                if response.status_code >= 400:
                    cut = await read_body(response, MAX_ERROR_BYTES, edge, cut=True)
                    raise classify_status(
                        response.status_code, response.headers, text_of(response, cut), edge
                    )
                await _events(response, max_bytes, edge, on_event)
            finally:
                await response.aclose()


async def _events(response: httpx.Response, limit: int, edge: Edge, on_event: OnEvent) -> None:
    """Split the body into events as it arrives; ``on_event`` for each."""
    kind = response.headers.get("content-type", "")
    if "text/event-stream" not in kind:
        # A server that ignored ``stream``: one JSON body, handed on whole.
        whole = await read_body(response, limit, edge)
        on_event("whole", text_of(response, whole))
        return
    buffer = bytearray()
    seen = 0
    name: str | None = None
    data: list[str] = []
    async for chunk in response.aiter_bytes():
        seen += len(chunk)
        if seen > limit:
            raise oversized(edge, limit, "still sending")
        scan = len(buffer)
        buffer += chunk
        start = 0
        while (end := buffer.find(b"\n", max(scan, start))) >= 0:
            line = bytes(buffer[start:end]).rstrip(b"\r").decode("utf-8", errors="replace")
            start = end + 1
            if not line:
                if data:
                    on_event(name, "\n".join(data))
                name, data = None, []
            elif line.startswith("data:"):
                data.append(line[5:].removeprefix(" "))
            elif line.startswith("event:"):
                name = line[6:].strip()
            # ``id:``, ``retry:`` and ``:`` comments (keep-alives) say nothing here
        if start:
            del buffer[:start]
    if data:
        on_event(name, "\n".join(data))


def malformed(edge: Edge, what: str) -> ProviderUnavailable:
    return ProviderUnavailable(
        f"{edge.provider} sent a malformed stream for model {edge.model}: {what}",
        provider=edge.provider,
        model=edge.model,
    )
