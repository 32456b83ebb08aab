"""A streaming answer's checked part: what may be shown before the answer is whole.

    partial = PartialAnswer(contract, max_chars=answer_limit(1024))
    if partial.feed('{"name": "Ada", "age": '):
        partial.data(), partial.complete     # {"name": "Ada"}, ["$.name"]

Each value the incremental reader completes (``app.core.answer.incremental``) is checked
on its own against its subschema (``Schema.schema_at``: type, enum, pattern, range,
length; an object's required fields once it closes) and, with a grounded validator on,
looked for in the input. Only values that pass are shown; the rest are left out and, in
an array, so is every later item (its indices would shift). A value whose subschema
cannot be named alone (under ``anyOf``/``oneOf``) is held back until the nearest value
that can be checked around it closes and passes. Whole-answer checks (validators other
than grounding, judges, webhooks) run at the end as for every answer.

Bounded like every check: the reader by the answer's length and nesting, the checks by a
work budget in proportion to the answer's length (``steps_for``); past either, nothing
more is shown (``stopped``) and the answer is checked whole at the end.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any, Final

from app.core.answer.check import MAX_VALUE_DEPTH
from app.core.answer.contract import Contract
from app.core.answer.grounding import Grounded
from app.core.answer.incremental import Completed, Opened, Path, Reader
from app.core.schema.steps import BASE_STEPS, STEPS_PER_CHAR, TooMuchWork, carried_budget
from app.core.schema.validation import Schema, compiled, json_path

# The subschemas kept per answer (by path, indices past the schema's longest prefixItems
# folded together): an array of many items needs one.
_SCHEMAS_KEPT: Final = 4096
# The checks of one answer's values share steps in proportion to its length: a closed
# container is checked again whole, so each character is paid for a few times over.
_CHECKS_PER_CHAR: Final = 4


@dataclass(slots=True)
class _Shown:
    """A container being read, and the part of it that is shown."""

    path: Path
    shown: dict[str, Any] | list[Any]
    schema: Schema | None  # None: held back (no subschema of its own)
    attached: bool = False  # placed in its parent's shown container
    broken: bool = False  # an array that left an item out: no later item is shown


@dataclass(slots=True)
class PartialAnswer:
    """Feed the answer's text as it streams; ``data()`` is what may be shown of it so far."""

    contract: Contract
    max_chars: int
    stopped: str | None = None
    complete: list[str] = field(default_factory=list)  # JSON paths, in the order they closed
    rejected: int = 0  # complete values that failed their own check
    _reader: Reader = field(init=False)
    _root: Schema = field(init=False)
    _fold_at: int = field(init=False)
    _grounded: tuple[Grounded, ...] = field(init=False)
    _stack: list[_Shown] = field(default_factory=list)
    _data: Any = None
    _schemas: dict[Path, Schema | None] = field(default_factory=dict)
    _budget: carried_budget = field(init=False)

    def __post_init__(self) -> None:
        self._reader = Reader(max_chars=self.max_chars, max_depth=MAX_VALUE_DEPTH)
        self._root = compiled(self.contract.output_schema)
        self._fold_at = _longest_prefix(self.contract.output_schema)
        self._grounded = tuple(v for v in self.contract.validators if isinstance(v, Grounded))
        self._budget = carried_budget(
            BASE_STEPS + STEPS_PER_CHAR * _CHECKS_PER_CHAR * self.max_chars
        )

    def feed(self, text: str) -> bool:
        """Read ``text``; True when more is shown than before."""
        if self.stopped is not None:
            return False
        reader = self._reader
        events = reader.feed(text)
        before = len(self.complete)
        try:
            for event in events:
                if isinstance(event, Opened):
                    self._opened(event)
                else:
                    self._completed(event)
        except TooMuchWork:
            self.stopped = "checking the partial answer needed more work than allowed"
        if reader.stopped is not None and self.stopped is None:
            self.stopped = reader.stopped
        return len(self.complete) > before

    def data(self) -> Any:
        """A copy of what is shown: only complete values that passed their checks."""
        return json.loads(json.dumps(self._data, ensure_ascii=False))

    # -- the reader's events ----------------------------------------------------------------

    def _opened(self, event: Opened) -> None:
        parent = self._stack[-1] if self._stack else None
        shown: dict[str, Any] | list[Any] = {} if event.kind == "object" else []
        if parent is None:
            frame = _Shown(event.path, shown, self._root, attached=True)
            self._data = shown
        else:
            schema = self._schema(event.path) if parent.schema is not None else None
            frame = _Shown(event.path, shown, schema)
        self._stack.append(frame)

    def _completed(self, event: Completed) -> None:
        path, value = event.path, event.value
        closing = isinstance(value, dict | list)
        if closing:
            frame = self._stack.pop()
            schema = frame.schema
        else:
            frame = None
            parent = self._stack[-1]
            schema = self._schema(path) if parent.schema is not None else None
        if schema is None:
            return  # held back: shown with the value around it, if that passes
        if self._passes(path, value, schema):
            if self._show(path, value):
                self.complete.append(json_path(path))
        else:
            self.rejected += 1
            self._hide(path, frame)

    def _passes(self, path: Path, value: Any, schema: Schema) -> bool:
        with self._budget:
            if not schema.is_valid(value):
                return False
            for grounded in self._grounded:
                if grounded.leaf(path, value) is False:
                    return False
        return True

    # -- what is shown ----------------------------------------------------------------------

    def _show(self, path: Path, value: Any) -> bool:
        """``value`` (complete and checked) in its place; a closed container replaces what
        was shown of it (it held only what had passed, and now all of it has). False when
        it cannot be shown where it belongs (an array that left an item out)."""
        if not path:
            self._data = value
            return True
        parent = self._stack[-1]
        if parent.broken or not self._attach():
            return False
        container, key = parent.shown, path[-1]
        if isinstance(container, dict):
            assert isinstance(key, str)
            container[key] = value
        elif isinstance(key, int) and key == len(container):
            container.append(value)
        elif isinstance(key, int) and key == len(container) - 1:
            container[key] = value  # the item shown in part, now whole
        else:
            parent.broken = True
            return False
        return True

    def _hide(self, path: Path, frame: _Shown | None) -> None:
        """A value that failed its check: left out (and, in an array, every later item)."""
        if not path:
            return  # the whole answer fails: what passed on its own stays shown
        parent = self._stack[-1]
        container, key = parent.shown, path[-1]
        if isinstance(container, dict):
            if frame is not None and frame.attached:
                container.pop(str(key), None)
        else:
            if frame is not None and frame.attached and container:
                container.pop()
            parent.broken = True

    def _attach(self) -> bool:
        """Place the innermost open container's shown part in its parent's, and theirs,
        once it holds a value that passed; False when one cannot be placed."""
        stack = self._stack
        first = len(stack) - 1
        while first > 0 and not stack[first].attached:
            first -= 1
        for index in range(first + 1, len(stack)):
            parent, link = stack[index - 1], stack[index]
            key = link.path[-1]
            if isinstance(parent.shown, dict):
                assert isinstance(key, str)
                parent.shown[key] = link.shown
            elif not parent.broken and isinstance(key, int) and key == len(parent.shown):
                parent.shown.append(link.shown)
            else:
                parent.broken = True
                return False
            link.attached = True
        return True

    def _schema(self, path: Path) -> Schema | None:
        """The compiled subschema of the value at ``path``; None when it has none alone."""
        key = tuple(min(step, self._fold_at) if isinstance(step, int) else step for step in path)
        if key in self._schemas:
            return self._schemas[key]
        found = self._root.schema_at(path)
        schema = None if found is None else compiled(found)
        if len(self._schemas) >= _SCHEMAS_KEPT:
            self._schemas.clear()
        self._schemas[key] = schema
        return schema


def _longest_prefix(schema: Any) -> int:
    """The most ``prefixItems`` any subschema of ``schema`` lists: indices past it share one
    subschema (``items``)."""
    longest, stack = 0, [schema]
    while stack:
        node = stack.pop()
        if isinstance(node, dict):
            prefix = node.get("prefixItems")
            if isinstance(prefix, list):
                longest = max(longest, len(prefix))
            stack.extend(node.values())
        elif isinstance(node, list):
            stack.extend(node)
    return longest
