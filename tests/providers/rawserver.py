"""A raw asyncio HTTP/1.1 server on loopback whose replies are scripted byte by byte, to
misbehave as a hostile or broken provider would."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable

# A script answers one request: it gets the connection's writer, the request's index on
# that connection (0 for the first) and the server; it writes whatever it likes and may
# close the connection. It returns False to stop serving the connection.
Script = Callable[[asyncio.StreamWriter, int, "RawServer"], Awaitable[bool]]

OK_HEAD = b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\n"


def json_reply(body: bytes = b'{"ok":true}', extra: bytes = b"") -> bytes:
    return OK_HEAD + extra + b"content-length: %d\r\n\r\n%s" % (len(body), body)


class RawServer:
    """Reads each request (head and content-length body) and hands it to ``script``."""

    def __init__(self, script: Script) -> None:
        self.script = script
        self.connections = 0
        self.open = 0  # connections neither side has closed yet
        self.requests: list[bytes] = []  # every request's head and body, in order
        self._changed = asyncio.Event()
        self.url = ""
        self._server: asyncio.Server | None = None
        self._writers: set[asyncio.StreamWriter] = set()
        self._tasks: set[asyncio.Task[None]] = set()

    async def __aenter__(self) -> RawServer:
        self._server = await asyncio.start_server(self._serve, "127.0.0.1", 0)
        port = self._server.sockets[0].getsockname()[1]
        self.url = f"http://127.0.0.1:{port}/v1/chat/completions"
        return self

    async def __aexit__(self, *exc: object) -> None:
        assert self._server is not None
        self._server.close()
        for writer in list(self._writers):
            writer.close()
        for task in list(self._tasks):
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        await self._server.wait_closed()

    async def until(self, check: Callable[[RawServer], bool], timeout_s: float = 30.0) -> None:
        """Wait until ``check(self)`` holds: looked at again when a connection opens or ends."""
        async with asyncio.timeout(timeout_s):
            while True:
                self._changed.clear()
                if check(self):
                    return
                await self._changed.wait()

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.connections += 1
        self.open += 1
        self._changed.set()
        self._writers.add(writer)
        task = asyncio.current_task()
        assert task is not None
        self._tasks.add(task)
        index = 0
        try:
            while True:
                try:
                    head = await reader.readuntil(b"\r\n\r\n")
                except (asyncio.IncompleteReadError, ConnectionError):
                    return
                length = 0
                for line in head.split(b"\r\n"):
                    name, _, value = line.partition(b":")
                    if name.strip().lower() == b"content-length":
                        length = int(value)
                body = await reader.readexactly(length)
                self.requests.append(head + body)
                if not await self.script(writer, index, self):
                    return
                index += 1
        except (ConnectionError, asyncio.IncompleteReadError):
            return
        except asyncio.CancelledError:
            return  # the server is closing: a script still sending or sleeping stops here
        finally:
            self._tasks.discard(task)
            self._writers.discard(writer)
            writer.close()
            self.open -= 1
            self._changed.set()
