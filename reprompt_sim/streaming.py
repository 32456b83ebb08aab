"""Token-by-token answers: a finished reply sent as the provider's Server-Sent Events.

The simulated model writes its answer as before; with ``"stream": true`` it goes out a
token at a time, ``SimConfig.token_delay_ms`` apart, in OpenAI's ``chat.completion.chunk``
events (``data: [DONE]`` last, usage in a last chunk when ``stream_options.include_usage``)
or Anthropic's ``message_start`` … ``message_stop`` (usage in ``message_delta``). Each
stream is logged (``GET /sim/streams``): how many tokens it had, how many went out, and
whether the client closed the connection before the end (a cancel mid-stream stops the
"model": nothing more is generated)::

    chunks = openai_chunks(payload)            # the events of a chat completion body
    log.entries()   # [{"seq": 1, "api": "openai", "tokens": 40, "sent": 12, "clientClosed": true}]
"""

from __future__ import annotations

import asyncio
import json
import re
from collections import deque
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass
from typing import Any, Final

JOURNAL_SIZE: Final = 1000
# How a text is cut into tokens: runs of spaces, pieces of words, single signs.
_TOKEN: Final = re.compile(r"\s+|\w{1,4}|[^\w\s]")


def tokens(text: str) -> list[str]:
    """``text`` in the pieces a model would send (they join back to ``text``)."""
    return _TOKEN.findall(text)


@dataclass(slots=True)
class Stream:
    """One streamed reply, as the log keeps it."""

    api: str
    tokens: int
    sent: int = 0
    finished: bool = False
    client_closed: bool = False


class StreamLog:
    """The last ``size`` streams, numbered in arrival order (``seq``, from 1)."""

    def __init__(self, size: int = JOURNAL_SIZE) -> None:
        self._streams: deque[tuple[int, Stream]] = deque(maxlen=size)
        self._seq = 0

    def add(self, stream: Stream) -> None:
        self._seq += 1
        self._streams.append((self._seq, stream))

    def entries(self) -> list[dict[str, Any]]:
        return [
            {
                "seq": seq,
                "api": s.api,
                "tokens": s.tokens,
                "sent": s.sent,
                "finished": s.finished,
                "clientClosed": s.client_closed,
            }
            for seq, s in self._streams
        ]

    def clear(self) -> None:
        self._streams.clear()


# A piece of a stream: (event name or None, JSON data or the raw ``[DONE]``, is a token).
Piece = tuple[str | None, str, bool]


def openai_chunks(payload: dict[str, Any], *, include_usage: bool) -> Iterator[Piece]:
    """A chat completion body as ``chat.completion.chunk`` events, a token per content or
    arguments delta."""
    head = {
        "id": payload["id"],
        "object": "chat.completion.chunk",
        "created": payload["created"],
        "model": payload["model"],
        "system_fingerprint": payload.get("system_fingerprint"),
    }

    def chunk(index: int, delta: dict[str, Any], finish: str | None = None) -> str:
        choice = {"index": index, "delta": delta, "logprobs": None, "finish_reason": finish}
        return json.dumps({**head, "choices": [choice]})

    for choice in payload["choices"]:
        index, message = choice["index"], choice["message"]
        yield None, chunk(index, {"role": "assistant", "content": ""}), False
        for token in tokens(message.get("content") or ""):
            yield None, chunk(index, {"content": token}), True
        if message.get("refusal"):
            for token in tokens(message["refusal"]):
                yield None, chunk(index, {"refusal": token}), True
        for k, call in enumerate(message.get("tool_calls") or []):
            function = call["function"]
            opening = {
                "index": k,
                "id": call["id"],
                "type": "function",
                "function": {"name": function["name"], "arguments": ""},
            }
            yield None, chunk(index, {"tool_calls": [opening]}), False
            for token in tokens(function["arguments"]):
                delta = {"tool_calls": [{"index": k, "function": {"arguments": token}}]}
                yield None, chunk(index, delta), True
        yield None, chunk(index, {}, choice["finish_reason"]), False
    if include_usage:
        yield None, json.dumps({**head, "choices": [], "usage": payload["usage"]}), False
    yield None, "[DONE]", False


def anthropic_events(payload: dict[str, Any]) -> Iterator[Piece]:
    """A messages body as Anthropic's stream: ``message_start``, a block's start, deltas
    and stop per content block, ``message_delta`` (stop reason, output tokens),
    ``message_stop``; a ``ping`` after the start, as Anthropic sends."""
    usage = payload["usage"]
    start_usage = {**usage, "output_tokens": 1}
    message = {**payload, "content": [], "stop_reason": None, "stop_sequence": None}
    message["usage"] = start_usage
    yield "message_start", json.dumps({"type": "message_start", "message": message}), False
    yield "ping", json.dumps({"type": "ping"}), False
    for index, block in enumerate(payload["content"]):
        opening: dict[str, Any]
        if block["type"] == "text":
            opening = {"type": "text", "text": ""}
            pieces: list[dict[str, Any]] = [
                {"type": "text_delta", "text": t} for t in tokens(block["text"])
            ]
        else:  # tool_use: its input as JSON text, a token at a time
            opening = {**block, "input": {}}
            text = json.dumps(block["input"])
            pieces = [{"type": "input_json_delta", "partial_json": t} for t in tokens(text)]
        start = {"type": "content_block_start", "index": index, "content_block": opening}
        yield "content_block_start", json.dumps(start), False
        for delta in pieces:
            event = {"type": "content_block_delta", "index": index, "delta": delta}
            yield "content_block_delta", json.dumps(event), True
        stop = {"type": "content_block_stop", "index": index}
        yield "content_block_stop", json.dumps(stop), False
    delta = {
        "type": "message_delta",
        "delta": {"stop_reason": payload["stop_reason"], "stop_sequence": None},
        "usage": {"output_tokens": usage["output_tokens"]},
    }
    yield "message_delta", json.dumps(delta), False
    yield "message_stop", json.dumps({"type": "message_stop"}), False


async def sse(
    pieces: Iterator[Piece], stream: Stream, delay_s: float, stall_after: int | None = None
) -> AsyncIterator[bytes]:
    """The pieces as SSE bytes, each token ``delay_s`` after the one before; ``stream``
    counts what went out and whether the client left first. After ``stall_after`` tokens
    nothing more is sent until the client leaves."""
    try:
        for name, data, is_token in pieces:
            if is_token:
                if stream.sent == stall_after:
                    await asyncio.Event().wait()  # until the client leaves
                if delay_s > 0:
                    await asyncio.sleep(delay_s)
                stream.sent += 1
            head = f"event: {name}\n" if name is not None else ""
            yield f"{head}data: {data}\n\n".encode()
        stream.finished = True
    finally:
        if not stream.finished:
            stream.client_closed = True


def count_tokens(pieces: list[Piece]) -> int:
    return sum(1 for _, _, is_token in pieces if is_token)
