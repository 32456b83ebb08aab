"""An HTTP reply read with bounds, for model providers and tenant endpoints alike.

body = await read_capped(response.aiter_raw(), response.headers, limit, too_large=error)
wait = retry_after(response.headers.get("retry-after"), now)
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable, Mapping
from datetime import UTC, datetime
from email.utils import parsedate_to_datetime


async def read_capped(
    chunks: AsyncIterator[bytes],
    headers: Mapping[str, str],
    limit: int,
    *,
    too_large: Callable[[str], Exception],
    cut: bool = False,
) -> bytes:
    """At most ``limit`` bytes of ``chunks``; nothing more is read.

    Past ``limit``: ``too_large(what was seen)`` is raised, or with ``cut`` the first
    ``limit`` bytes are the answer. A larger ``Content-Length`` fails before any is read.
    """
    declared = headers.get("content-length", "").strip()
    if not cut and declared.isdigit() and int(declared) > limit:
        raise too_large(f"declared {int(declared)} bytes")
    content = bytearray()
    async for chunk in chunks:
        content += chunk
        if len(content) > limit:
            if cut:
                return bytes(content[:limit])
            raise too_large("still sending")
    return bytes(content)


def retry_after(value: str | None, now: datetime) -> float | None:
    """A ``Retry-After`` value in seconds from ``now`` (a number or an HTTP date), or ``None``."""
    if value is None:
        return None
    try:
        return max(float(value), 0.0)
    except ValueError:
        pass
    try:
        when = parsedate_to_datetime(value)
    except (TypeError, ValueError, IndexError):
        return None
    if when.tzinfo is None:
        when = when.replace(tzinfo=UTC)
    return max((when - now).total_seconds(), 0.0)
