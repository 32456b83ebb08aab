"""Model-facing text: Mustache templates from ``prompts/``, rendered without HTML escaping.

The only module that imports the Mustache library::

    text = render("retry_feedback", {"first": True, "diagnosis": "...", "excerpt": None})

A client's template (``retryPrompt``) is untrusted and never reaches pystache: it is
parsed here, in one linear pass, as a subset of Mustache: variables (``{{name}}``,
``{{{name}}}``, ``{{&name}}``, ``{{.}}``), sections (``{{#name}}``), inverted sections
(``{{^name}}``) and comments. Partials (``{{> name}}``), delimiter changes
(``{{=<% %>=}}``) and names the caller does not provide are refused when the job is
submitted; nothing in the context is callable, so there are no lambdas::

    check_custom(source, field="retryPrompt", keys=RETRY_PROMPT_KEYS)   # InvalidInput
    render_custom(source, context)
"""

from __future__ import annotations

import functools
import hashlib
import re
import secrets
from collections.abc import Collection, Mapping
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import Any, Final

import pystache

from app.core.wire.errors import InvalidInput

_APP = Path(__file__).resolve().parents[2]  # the app package
_BACKTICKS: Final = re.compile("`+")


def _prompt_dir() -> Path:
    # An installed wheel carries the templates inside the package; a checkout keeps them at the top.
    for candidate in (_APP / "_prompts", _APP.parent / "prompts"):
        if candidate.is_dir():
            return candidate
    raise RuntimeError("reprompt's prompts/ directory is missing from this installation")


@cache
def template(name: str) -> str:
    """The raw text of ``prompts/<name>.mustache``."""
    return (_prompt_dir() / f"{name}.mustache").read_text(encoding="utf-8")


def _identity(text: str) -> str:
    return text


class _Partials:
    def get(self, name: str) -> str:
        return template(name)


_STRICT = pystache.Renderer(escape=_identity, partials=_Partials(), missing_tags="strict")


@cache
def _parsed(name: str) -> Any:
    # Parsed once per process: pystache would parse the text again on every render.
    return pystache.parse(template(name))


def render(name: str, context: Mapping[str, Any]) -> str:
    """Render a shipped template; a key it names but ``context`` lacks is a bug, so it raises."""
    if all(type(value) in _SCALARS for value in context.values()):
        # Counts and flags only (a turn's budget note): few distinct texts, each kept.
        return _render_scalars(name, tuple((k, type(v), v) for k, v in context.items()))
    shape = _shape(context)
    if shape is not None:
        # Text too (a job's task and input): the template is rendered once per shape, with
        # a slot for each text, and the texts are put in the slots.
        parts = _skeleton(name, shape)
        if parts is not None:
            texts = [value for value in context.values() if type(value) is str and value]
            return _tidy("".join(part if isinstance(part, str) else texts[part] for part in parts))
    return _tidy(_STRICT.render(_parsed(name), dict(context)))


_SCALARS: Final = (bool, int, type(None))
# A slot in a skeleton: no template and no text it is used for holds a NUL.
_SLOT: Final = re.compile(r"\x00(\d+)\x00")
_TEXT: Final = object()  # a non-empty text's place in a shape


def _shape(context: Mapping[str, Any]) -> tuple[tuple[str, type, Any], ...] | None:
    """What a rendering depends on besides its texts; None when it cannot be said.

    The counts and flags, which texts are empty (false in a section), which lists are
    (only empty ones). None for any other value, or a text holding a NUL.
    """
    shape = []
    for key, value in context.items():
        kind = type(value)
        if kind in _SCALARS:
            shape.append((key, kind, value))
        elif kind is str and "\x00" not in value:
            shape.append((key, kind, _TEXT if value else ""))
        elif kind is list and not value:
            shape.append((key, kind, ()))
        else:
            return None
    return tuple(shape)


@functools.lru_cache(maxsize=256)
def _skeleton(name: str, shape: tuple[tuple[str, type, Any], ...]) -> tuple[str | int, ...] | None:
    """The template rendered with a slot for each non-empty text (its index among them), as
    literal parts and slot indexes; None when the template itself holds a NUL."""
    if "\x00" in template(name):
        return None
    context: dict[str, Any] = {}
    slots = 0
    for key, kind, value in shape:
        if value is _TEXT:
            context[key] = f"\x00{slots}\x00"
            slots += 1
        else:
            context[key] = [] if kind is list else value
    pieces = _SLOT.split(_STRICT.render(_parsed(name), context))
    # split gives literal, slot, literal, ...: the slots' indexes as ints.
    return tuple(piece if i % 2 == 0 else int(piece) for i, piece in enumerate(pieces))


@functools.lru_cache(maxsize=512)
def _render_scalars(name: str, items: tuple[tuple[str, type, Any], ...]) -> str:
    # The type is in the key: True == 1, but a flag and a count render differently.
    return _tidy(_STRICT.render(_parsed(name), {key: value for key, _, value in items}))


def render_custom(source: str, context: Mapping[str, Any]) -> str:
    """Render a client's template (``retryPrompt``), checked at submit with ``check_custom``;
    a key the context lacks renders empty."""
    out: list[str] = []
    _render_nodes(_parse_custom(source, None), [dict(context)], out)
    return _tidy("".join(out))


def check_custom(source: str, *, field: str, keys: Collection[str]) -> None:
    """Reject a client template that does not parse or names anything but ``keys``."""
    try:
        _parse_custom(source, keys)
    except _TemplateError as exc:
        raise InvalidInput(f"{field}: {exc}", field=field) from None


# -- client templates ----------------------------------------------------------------------

_OPEN: Final = "{{"
_CLOSE: Final = "}}"
_STANDALONE: Final = frozenset("#^/!")  # tags that take their whole line when alone on it


_MAX_SECTION_DEPTH: Final = 16


class _TemplateError(ValueError):
    pass


@dataclass(slots=True)
class _Node:
    kind: str  # "text", "var", "section", "inverted"
    value: str  # the text, or the tag's name
    children: list[_Node]


class _CustomParser:
    """One pass, left to right; every search starts where the last one ended."""

    def __init__(self, source: str, keys: Collection[str] | None) -> None:
        self.source = source
        self.keys = keys
        self.root: list[_Node] = []
        self.open: list[_Node] = []
        self.i = 0
        self.line_blank = True  # only spaces and tabs so far on the current line

    def parse(self) -> list[_Node]:
        source = self.source
        while self.i < len(source):
            start = source.find(_OPEN, self.i)
            if start == -1:
                self._text(source[self.i :])
                break
            self._text(source[self.i : start])
            self._tag(start)
        if self.open:
            raise _TemplateError(f"section {{{{#{self.open[-1].value}}}}} is never closed")
        return self.root

    def _add(self, node: _Node) -> None:
        (self.open[-1].children if self.open else self.root).append(node)

    def _text(self, text: str) -> None:
        if not text:
            return
        self._add(_Node("text", text, []))
        tail = text[text.rfind("\n") + 1 :]
        if "\n" in text:
            self.line_blank = not tail.strip(" \t")
        elif tail.strip(" \t"):
            self.line_blank = False

    def _tag(self, start: int) -> None:
        source = self.source
        triple = source.startswith("{{{", start)
        closer = "}}}" if triple else _CLOSE
        body_at = start + (3 if triple else 2)
        end = source.find(closer, body_at)
        if end == -1:
            raise _TemplateError(f"the tag opened at character {start} is never closed")
        inner = source[body_at:end].strip()
        self.i = end + len(closer)
        sigil = "&" if triple else inner[:1]
        name = inner if triple else inner[1:].strip() if sigil in "#^/!&>=" else inner
        if sigil == ">":
            raise _TemplateError(f"partials ({{{{> {name}}}}}) are not allowed")
        if sigil == "=":
            raise _TemplateError("changing the delimiters ({{=…=}}) is not allowed")
        if sigil in _STANDALONE and inner:
            self._standalone(start)
        if sigil == "!":
            return
        self._check_name(name)
        if sigil in "#^":
            node = _Node("section" if sigil == "#" else "inverted", name, [])
            self._add(node)
            self.open.append(node)
            if len(self.open) > _MAX_SECTION_DEPTH:
                raise _TemplateError(f"sections are nested more than {_MAX_SECTION_DEPTH} deep")
        elif sigil == "/":
            if not self.open or self.open[-1].value != name:
                raise _TemplateError(f"{{{{/{name}}}}} closes a section that is not open")
            self.open.pop()
        else:
            self._add(_Node("var", name, []))
            self.line_blank = False

    def _standalone(self, start: int) -> None:
        """A section, close or comment tag alone on its line takes the line with it."""
        source = self.source
        after = self.i
        while after < len(source) and source[after] in " \t":
            after += 1
        if not self.line_blank or not (after == len(source) or source[after] in "\r\n"):
            self.line_blank = False
            return
        siblings = self.open[-1].children if self.open else self.root
        if siblings and siblings[-1].kind == "text":
            text = siblings[-1].value
            siblings[-1].value = text[: text.rfind("\n") + 1]
        if source.startswith("\r\n", after):
            after += 2
        elif after < len(source):
            after += 1
        self.i = after
        self.line_blank = True

    def _check_name(self, name: str) -> None:
        if not name:
            raise _TemplateError("a tag has no name")
        if self.keys is not None and name != "." and name not in self.keys:
            known = ", ".join(sorted(self.keys))
            raise _TemplateError(f"unknown tag {{{{{name}}}}}; the known keys are {known}")


def _parse_custom(source: str, keys: Collection[str] | None) -> list[_Node]:
    return _CustomParser(source, keys).parse()


def _render_nodes(nodes: list[_Node], stack: list[Any], out: list[str]) -> None:
    for node in nodes:
        if node.kind == "text":
            out.append(node.value)
            continue
        value = _lookup(node.value, stack)
        if node.kind == "var":
            out.append("" if value is None else str(value))
        elif node.kind == "inverted":
            if not value:
                _render_nodes(node.children, stack, out)
        elif isinstance(value, list):
            for item in value:
                _render_nodes(node.children, [*stack, item], out)
        elif value:
            _render_nodes(node.children, [*stack, value], out)


def _lookup(name: str, stack: list[Any]) -> Any:
    if name == ".":
        top = stack[-1]
        return None if isinstance(top, Mapping) else top
    for frame in reversed(stack):
        if isinstance(frame, Mapping) and name in frame:
            return frame[name]
    return None


def fence(content: str) -> str:
    """A Markdown code fence that ``content`` cannot close: longer than any run of
    backticks in it (CommonMark closes a fence only with one at least as long)."""
    longest = max((len(run) for run in _BACKTICKS.findall(content)), default=0)
    return "`" * max(3, longest + 1)


def data_tag(content: str, name: str = "input") -> str:
    """The name of the tag that fences ``content`` as data in a prompt.

    ``name`` itself unless the content holds its closing tag, else ``name-<16 hex>`` from
    the content's hash (the same on every turn and run) that it does not hold.
    """
    if f"</{name}" not in content:
        return name
    tag = f"{name}-{hashlib.sha256(content.encode('utf-8', 'replace')).hexdigest()[:16]}"
    while f"</{tag}" in content:  # only if someone found a fixed point of SHA-256
        tag = f"{name}-{secrets.token_hex(8)}"
    return tag


def _tidy(text: str) -> str:
    # Sections leave blank lines where they are off; keep at most one in a row.
    lines = text.strip("\n").split("\n")
    out: list[str] = []
    for line in lines:
        if not line.strip() and out and not out[-1].strip():
            continue
        out.append(line.rstrip())
    return "\n".join(out).strip("\n")
