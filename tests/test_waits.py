"""Tests wait on events, never on time (STYLE.md 15): read from the test suite's own source.

Two things are refused anywhere under tests/:

* a fixed sleep (``time.sleep(x)`` / ``asyncio.sleep(x)`` with ``x`` not 0) outside
  tests/waiting.py, whose loops look at a condition between short sleeps. A fake server's
  scripted slowness (a reply that comes late, a header dribbled byte by byte) is the
  behaviour under test, not a wait: those are listed in ``SCRIPTED``, each with its reason;
* an assert on a duration read from a clock (``time.monotonic() - began < BOUND``,
  ``took < 1.0`` after ``perf_counter``/``thread_time``/``process_time``): speed goals are
  bench/'s (bench/hostile_inputs.py), and a hang is pytest-timeout's to catch.
"""

from __future__ import annotations

import ast
from pathlib import Path
from typing import TypeGuard

TESTS = Path(__file__).parent
CLOCKS = {"monotonic", "perf_counter", "thread_time", "process_time", "time"}
# (file, function) → why its sleep is a fake's scripted behaviour, not a wait.
SCRIPTED = {
    ("abuse/test_hostile_replies.py", "header_dribble"): "a server dribbling its headers",
    ("outbound/receiver.py", "do_POST"): "a receiver's scripted late answer (Reply.delay_s)",
    ("providers/upstream.py", "do_POST"): "a provider's scripted late answer (Reply.delay_s)",
    ("providers/fake_llama.py", "_die"): "a crashing server saying nothing until it is dead",
    ("providers/fake_llama.py", "_die_soon"): "a server that crashes after its first answer",
    ("providers/test_http.py", "until_close"): "a reply sent in two pieces, apart",
    ("store/test_clock.py", "slow"): "a TIME round trip made slow on purpose",
    ("worker/test_callbacks.py", "slow"): "a slow receiver, so deliveries overlap",
    ("e2e/test_clients.py", "_answers"): "a proxy that cuts a stream a moment after an event",
    # Not yet an event: the API's open-wait count and its 1 s no-hand-off window are
    # in-process state that no public surface shows (see the tests' comments).
    (
        "api/test_generate_wait.py",
        "test_generate_at_the_cap_of_open_waits_gets_a_429_and_makes_no_job",
    ): ("the long-poll holding the tenant's one wait"),
    (
        "api/test_handoff_lease.py",
        "test_a_lone_job_is_handed_over_and_leased_on_redis_clock_without_a_time",
    ): ("the API's 1 s without hand-offs after a submit found nobody"),
}


def _is_clock(node: ast.AST) -> bool:
    return (
        isinstance(node, ast.Call)
        and isinstance(node.func, ast.Attribute)
        and node.func.attr in CLOCKS
        and isinstance(node.func.value, ast.Name)
        and node.func.value.id == "time"
    )


def _is_sleep(node: ast.AST) -> TypeGuard[ast.Call]:
    if not (
        isinstance(node, ast.Call)
        and isinstance(node.func, ast.Attribute)
        and node.func.attr == "sleep"
        and isinstance(node.func.value, ast.Name)
        and node.func.value.id in ("time", "asyncio")
    ):
        return False
    first = node.args[0] if node.args else None
    return not (isinstance(first, ast.Constant) and first.value == 0)


def _functions(tree: ast.AST) -> list[ast.FunctionDef | ast.AsyncFunctionDef]:
    return [n for n in ast.walk(tree) if isinstance(n, ast.FunctionDef | ast.AsyncFunctionDef)]


def _innermost(tree: ast.AST, line: int) -> str:
    around = [f for f in _functions(tree) if f.lineno <= line <= (f.end_lineno or f.lineno)]
    return max(around, key=lambda f: f.lineno).name if around else "<module>"


def _sources() -> list[tuple[str, ast.Module]]:
    return [
        (path.relative_to(TESTS).as_posix(), ast.parse(path.read_text(encoding="utf-8")))
        for path in sorted(TESTS.rglob("*.py"))
    ]


def fixed_sleeps(name: str, tree: ast.AST) -> list[str]:
    """``file:line (function)`` of each sleep in ``tree`` neither a poll's nor scripted."""
    found = []
    for node in ast.walk(tree):
        if _is_sleep(node):
            function = _innermost(tree, node.lineno)
            if (name, function) not in SCRIPTED:
                found.append(f"{name}:{node.lineno} ({function})")
    return found


def duration_bounds(name: str, tree: ast.AST) -> list[str]:
    """``file:line`` of each assert in ``tree`` that compares a duration read from a clock."""
    found = []
    for function in _functions(tree):
        # Names bound to a clock's difference: ``took = time.monotonic() - began``.
        timed = {
            target.id
            for node in ast.walk(function)
            if isinstance(node, ast.Assign)
            and isinstance(node.value, ast.BinOp)
            and isinstance(node.value.op, ast.Sub)
            and any(_is_clock(n) for n in ast.walk(node.value))
            for target in node.targets
            if isinstance(target, ast.Name)
        }
        for node in ast.walk(function):
            if not isinstance(node, ast.Assert) or not isinstance(node.test, ast.Compare):
                continue
            if not any(isinstance(op, ast.Lt | ast.LtE | ast.Gt | ast.GtE) for op in node.test.ops):
                continue
            parts = list(ast.walk(node.test))
            difference = any(
                isinstance(n, ast.BinOp)
                and isinstance(n.op, ast.Sub)
                and any(_is_clock(m) for m in ast.walk(n))
                for n in parts
            )
            named = any(
                isinstance(n, ast.Name) and (n.id in timed or n.id.endswith("BOUND_S"))
                for n in parts
            )
            if difference or named:
                found.append(f"{name}:{node.lineno}")
    return sorted(set(found))


def test_no_test_sleeps_a_fixed_time_to_let_something_happen() -> None:
    found = [
        f for name, tree in _sources() if name != "waiting.py" for f in fixed_sleeps(name, tree)
    ]
    assert found == []


def test_no_test_asserts_how_long_something_took() -> None:
    assert [f for name, tree in _sources() for f in duration_bounds(name, tree)] == []


def test_every_scripted_sleep_listed_is_still_there() -> None:
    # A stale entry would let a new fixed sleep in under an old name.
    sleeping = {
        (name, _innermost(tree, node.lineno))
        for name, tree in _sources()
        for node in ast.walk(tree)
        if _is_sleep(node)
    }
    assert set(SCRIPTED) <= sleeping


def test_the_checks_find_what_they_look_for() -> None:
    tree = ast.parse(
        "import time\n"
        "def test_x():\n"
        "    time.sleep(0.5)\n"
        "    began = time.monotonic()\n"
        "    took = time.monotonic() - began\n"
        "    assert took < 1.0\n"
        "    assert time.perf_counter() - began < 2\n"
        "    assert began <= time.time()\n"  # a clock read, no duration: fine
        "    time.sleep(0)\n"
    )
    assert fixed_sleeps("x.py", tree) == ["x.py:3 (test_x)"]
    assert duration_bounds("x.py", tree) == ["x.py:6", "x.py:7"]
