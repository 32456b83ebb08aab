"""``MONITOR`` on a real redis-server for the length of a block: every command it runs,
as ``redis-cli monitor`` prints it, those inside Lua scripts included (shown as ``lua``).

    with monitor(redis_url) as lines:
        ...                                   # drive the service
    assert reads(lines, job_id) == 0

Read on a connection of its own, in a thread, up to a marker command sent at the end, so
no line is lost in a buffer.
"""

from __future__ import annotations

import itertools
import threading
from collections.abc import Iterator
from contextlib import contextmanager

import redis

_MARK = "tests-monitor-end"


@contextmanager
def monitor(url: str) -> Iterator[list[str]]:
    """The lines of every command the server runs inside the block (filled when it ends)."""
    lines: list[str] = []
    marker = redis.Redis.from_url(url)
    watcher = redis.Redis.from_url(url)
    # A connection of its own, outside the pool: get_connection() needs a command name on
    # redis 5.0 and warns when given one on later redis-py.
    conn = watcher.connection_pool.make_connection()
    conn.send_command("MONITOR")  # type: ignore[no-untyped-call]
    conn.read_response()

    def read() -> None:
        while True:
            raw = conn.read_response()
            line = raw.decode(errors="replace") if isinstance(raw, bytes) else str(raw)
            if _MARK in line:
                return
            lines.append(line)

    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    try:
        yield lines
    finally:
        marker.echo(_MARK)  # everything before it has been read then
        reader.join(30)
        conn.disconnect()  # type: ignore[no-untyped-call]
        watcher.close()
        marker.close()


def reads(lines: list[str], job_id: str) -> int:
    """The client reads (not a script's) of the job's hash."""
    return sum(1 for line in lines if '"HMGET"' in line and job_id in line and " lua]" not in line)


def script_runs(lines: list[str], sha: str, job_id: str) -> int:
    """How many times the script ``sha`` ran on this job: an ``EVALSHA`` followed by its
    script's commands (one refused with NOSCRIPT, then loaded, is not a run)."""
    return sum(
        1
        for line, after in itertools.pairwise(lines)
        if f'"{sha}"' in line and job_id in line and "[0 lua]" in after
    )
