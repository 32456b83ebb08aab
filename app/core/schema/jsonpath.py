"""A small JSONPath subset for validators: ``$``, ``.key``, ``["key"]``, ``[3]``, ``[*]``.

select({"lines": [{"qty": 1}, {"qty": 2}]}, "$.lines[*].qty")  # [1, 2]
locate({"lines": [{"qty": 1}, {"qty": 2}]}, "$.lines[*].qty")  # [(("lines", 0, "qty"), 1), ...]
"""

from __future__ import annotations

import json
import re
from typing import Any

from app.core.wire.errors import InvalidInput

_STEP = re.compile(
    r"""\.(?P<key>[A-Za-z_][A-Za-z0-9_\-]*)   # .key
      | \[(?P<index>-?\d+)\]                  # [3]
      | \[(?P<star>\*)\]                      # [*]
      | \.(?P<dotstar>\*)                     # .*
      | \[(?P<quoted>"(?:[^"\\]|\\.)*")\]     # ["odd key"]
    """,
    re.VERBOSE,
)

Step = str | int | None  # None = every element or value


def parse(path: str, *, field: str = "path") -> tuple[Step, ...]:
    """Compile a path; a malformed one is a client error naming ``field``."""
    if not path.startswith("$"):
        raise InvalidInput(f"{field}: a path starts with '$', got {path!r}", field=field)
    steps: list[Step] = []
    pos = 1
    while pos < len(path):
        match = _STEP.match(path, pos)
        if match is None:
            raise InvalidInput(
                f"{field}: cannot read {path!r} at position {pos} "
                '(expected .key, [index], [*] or ["key"])',
                field=field,
            )
        if match["key"] is not None:
            steps.append(match["key"])
        elif match["index"] is not None:
            steps.append(int(match["index"]))
        elif match["quoted"] is not None:
            steps.append(str(json.loads(match["quoted"])))
        else:
            steps.append(None)
        pos = match.end()
    return tuple(steps)


def select(value: Any, path: str | tuple[Step, ...]) -> list[Any]:
    """Every value the path reaches; missing keys and out-of-range indices reach nothing."""
    steps = parse(path) if isinstance(path, str) else path
    current = [value]
    for step in steps:
        nxt: list[Any] = []
        for item in current:
            if step is None:
                if isinstance(item, list):
                    nxt.extend(item)
                elif isinstance(item, dict):
                    nxt.extend(item.values())
            elif isinstance(step, int):
                if isinstance(item, list) and -len(item) <= step < len(item):
                    nxt.append(item[step])
            elif isinstance(item, dict) and step in item:
                nxt.append(item[step])
        current = nxt
    return current


Located = tuple[tuple[str | int, ...], Any]


def locate(value: Any, path: str | tuple[Step, ...]) -> list[Located]:
    """What ``select`` reaches, each with its concrete path (keys and non-negative indices)."""
    steps = parse(path) if isinstance(path, str) else path
    current: list[Located] = [((), value)]
    for step in steps:
        nxt: list[Located] = []
        for at, item in current:
            if step is None:
                if isinstance(item, list):
                    nxt.extend(((*at, i), v) for i, v in enumerate(item))
                elif isinstance(item, dict):
                    nxt.extend(((*at, k), v) for k, v in item.items())
            elif isinstance(step, int):
                if isinstance(item, list) and -len(item) <= step < len(item):
                    index = step % len(item)
                    nxt.append(((*at, index), item[index]))
            elif isinstance(item, dict) and step in item:
                nxt.append(((*at, step), item[step]))
        current = nxt
    return current
