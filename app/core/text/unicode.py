"""Unpaired UTF-16 surrogates: text Python holds but UTF-8 (Redis, RE2, the wire) cannot.

JSON's ``"\\ud800"`` escape decodes to one; so does a provider's. Found, they are refused
(a request) or diagnosed (an answer); recorded text is scrubbed first::

    surrogate_at("ok\\ud800")              # 2
    surrogate_path({"a": ["x", "\\udc00"]})  # ('a', 1)
    scrub("ok\\ud800")                     # 'ok\\ufffd'
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any, Final

Path = tuple[str | int, ...]

_SURROGATE: Final = re.compile("[\ud800-\udfff]")


def surrogate_at(text: str) -> int | None:
    """The index of the first unpaired surrogate in ``text``, or None (C speed)."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError as exc:
        return exc.start
    return None


def surrogate_path(value: Any) -> Path | None:
    """Where the first string (or object key) holding a surrogate sits in a JSON value."""
    if not has_surrogate(value):
        return None
    stack: list[tuple[Any, Path]] = [(value, ())]
    while stack:
        node, path = stack.pop()
        if isinstance(node, str):
            if surrogate_at(node) is not None:
                return path
        elif isinstance(node, Mapping):
            for key, child in reversed(list(node.items())):
                if isinstance(key, str) and surrogate_at(key) is not None:
                    return (*path, key)
                stack.append((child, (*path, key)))
        elif isinstance(node, list | tuple):
            stack.extend((child, (*path, i)) for i, child in reversed(list(enumerate(node))))
    return None


def has_surrogate(value: Any) -> bool:
    """Whether a string (or object key) in a JSON value holds a surrogate.

    ``surrogate_path``'s walk without the paths; an ASCII string (most) is skipped at once.
    """
    stack = [value]
    while stack:
        node = stack.pop()
        if isinstance(node, str):
            if not node.isascii() and surrogate_at(node) is not None:
                return True
        elif isinstance(node, Mapping):
            for key, child in node.items():
                if isinstance(key, str) and not key.isascii() and surrogate_at(key) is not None:
                    return True
                stack.append(child)
        elif isinstance(node, list | tuple):
            stack.extend(node)
    return False


def described(text: str, at: int) -> str:
    """``\\ud800 at character 12``: the surrogate, escaped, and where it is."""
    return f"\\u{ord(text[at]):04x} at character {at}"


def escaped(text: str) -> str:
    """``text`` with every unpaired surrogate written as its ``\\udxxx`` escape."""
    return text.encode("utf-8", "backslashreplace").decode("utf-8")


def scrub(text: str) -> str:
    """``text`` with every unpaired surrogate replaced by U+FFFD, so it can be stored."""
    if surrogate_at(text) is None:
        return text
    return _SURROGATE.sub("\ufffd", text)
