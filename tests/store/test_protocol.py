"""Each Lua script reads exactly what app/store/protocol.py sends it, by the same names.

A script opens by naming its KEYS and ARGV (``local job, leases = unpack(KEYS)``); those
names, in order, are the fields of its structures, each is used, and nothing else of KEYS
or ARGV is read (but a declared tail, in a loop).
"""

from __future__ import annotations

import dataclasses
import inspect
import re
from pathlib import Path
from typing import Any

import pytest

from app.store import protocol
from app.store.protocol import SCRIPTS, Script, Sent

LUA = Path(protocol.__file__).with_name("lua")
SHARED = ("outbox.lua", "common.lua")  # prepended to every script (app/store/scripts.py)
# Lua's own names a script must not hide behind one of its arguments.
LUA_GLOBALS = {
    "cjson",
    "error",
    "ipairs",
    "math",
    "next",
    "pairs",
    "pcall",
    "redis",
    "select",
    "string",
    "table",
    "tonumber",
    "tostring",
    "type",
    "unpack",
}


def _code(name: str) -> str:
    """The script without its comments."""
    text = (LUA / name).read_text(encoding="utf-8")
    return "\n".join(line.split("--", 1)[0] for line in text.splitlines())


def _bound(code: str, table: str) -> tuple[list[str], str]:
    """The names ``local a, b, … = unpack(TABLE[, 1, n])`` binds, and the code after it."""
    found = re.search(
        rf"local\s+([\w\s,]+?)\s*=\s*unpack\({table}(?:,\s*1,\s*(\d+))?\)", code, flags=re.S
    )
    assert found is not None, f"no `local ... = unpack({table})`"
    names = [name.strip() for name in found.group(1).split(",")]
    if found.group(2) is not None:
        assert int(found.group(2)) == len(names), found.group(0)
    return names, code[found.end() :]


def _fields(cls: type[Sent]) -> list[str]:
    return [field.name for field in dataclasses.fields(cls)]  # type: ignore[arg-type]


def _shared_functions() -> set[str]:
    code = "\n".join(_code(name) for name in SHARED)
    return set(re.findall(r"local function (\w+)", code))


@pytest.mark.parametrize("script", SCRIPTS, ids=lambda s: s.name)
def test_the_script_reads_exactly_the_fields_it_is_sent(script: Script[Sent, Sent]) -> None:
    code = _code(f"{script.name}.lua")
    keys, _ = _bound(code, "KEYS")
    args, _ = _bound(code, "ARGV")
    assert keys == _fields(script.keys)
    assert args == _fields(script.args)

    # Each name is used, and no other value of KEYS or ARGV is read.
    after = code[max(code.index("unpack(KEYS)"), code.index("unpack(ARGV")) :]
    after = after.split("\n", 1)[1]
    for name in keys + args:
        assert re.search(rf"\b{name}\b", after), f"{script.name}.lua never uses {name}"
    others = re.findall(r"(KEYS|ARGV)\[([^\]]*)\]|#(KEYS|ARGV)", after)
    if script.tail:
        # The tail, read in a loop from the first value past the fields.
        assert re.search(rf"for i = {len(args) + 1}, #ARGV, ", after), script.tail
        assert all(table != "KEYS" and tail != "KEYS" for table, _, tail in others), others
    else:
        assert others == []


@pytest.mark.parametrize("script", SCRIPTS, ids=lambda s: s.name)
def test_no_argument_hides_a_function_the_script_can_call(script: Script[Sent, Sent]) -> None:
    hidden = (_shared_functions() | LUA_GLOBALS) & {
        *_fields(script.keys),
        *_fields(script.args),
    }
    assert hidden == set()


def test_every_lua_script_has_its_structures_and_the_shared_parts_read_no_arguments() -> None:
    scripts = {path.name for path in LUA.glob("*.lua")} - set(SHARED)
    assert scripts == {f"{script.name}.lua" for script in SCRIPTS}
    for name in SHARED:
        assert not re.search(r"\b(KEYS|ARGV)\b", _code(name)), name


def test_the_structures_are_built_by_keyword_only() -> None:
    classes = inspect.getmembers(protocol, inspect.isclass)
    sent: list[type[Any]] = [c for _, c in classes if issubclass(c, Sent) and c is not Sent]
    assert len(sent) > 20
    for cls in sent:
        parameters = inspect.signature(cls).parameters.values()
        assert all(p.kind is inspect.Parameter.KEYWORD_ONLY for p in parameters), cls
        with pytest.raises(TypeError):
            cls("positional")


def test_a_structure_is_sent_in_its_fields_order_without_trailing_nones() -> None:
    keys = protocol.CompleteKeys(job="j", leases="l", running="r")
    assert keys.values() == ("j", "l", "r")
    keys = protocol.CompleteKeys(job="j", leases="l", running="r", idle="i")
    assert keys.values() == ("j", "l", "r", "i")
    assert protocol.WriteKeys(job="j").values() == ("j",)
    args = protocol.HeartbeatArgs(id="x", token=3, lease_ms=30_000)
    assert args.values() == ("x", 3, 30_000)
