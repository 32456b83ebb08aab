"""The service's log lines (``app.logs``): what a ``reprompt worker`` process logs per job,
and the cheap formatter writing the same text ``logging.Formatter(FORMAT)`` would."""

from __future__ import annotations

import logging
import re
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from app import logs
from tests.both import Store
from tests.worker.harness import TENANT, WorkerProcess, finished, job, submit

ROOT = Path(__file__).resolve().parents[2]


def _fresh(code: str) -> str:
    """What ``code``, run by a fresh Python in the repository, writes to stderr."""
    proc = subprocess.run(
        [sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=60
    )
    assert proc.returncode == 0, proc.stderr
    return proc.stderr


STAMP = r"\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d{3}"


def _record(
    created: float, msg: str = "job %s started", args: tuple[object, ...] = ("j1",), **extra: object
) -> logging.LogRecord:
    record = logging.LogRecord("app.worker", logging.INFO, __file__, 1, msg, args, None)
    record.created = created
    record.msecs = int((created - int(created)) * 1000) + 0.0
    for key, value in extra.items():
        setattr(record, key, value)
    return record


def _exc_info() -> tuple[type[BaseException], BaseException, object]:
    try:
        raise ValueError("boom")
    except ValueError:
        return sys.exc_info()  # type: ignore[return-value]


def test_the_formatter_writes_what_logging_formatter_writes() -> None:
    mine, stock = logs.Formatter(), logging.Formatter(logs.FORMAT)
    # Across seconds (the cached stamp moves on), back in time, and within one second.
    times = [1_790_000_000.001, 1_790_000_000.999, 1_790_000_001.5, 1_700_000_000.25, 1.0]
    for created in times:
        assert mine.format(_record(created)) == stock.format(_record(created))
    # No arguments: the message as is, a per cent sign included.
    plain = _record(1_790_000_000.5, "job j2 succeeded: 1 calls, $0.5 (100%)", ())
    assert mine.format(plain) == stock.format(_record(1_790_000_000.5, plain.msg, ()))
    # With an exception or a stack, logging's own way: the traceback follows.
    info = _exc_info()
    failed = mine.format(_record(1_790_000_002.0, exc_info=info))
    assert failed == stock.format(_record(1_790_000_002.0, exc_info=info))
    assert "ValueError: boom" in failed
    stacked = _record(1_790_000_002.0, stack_info="Stack (most recent call last): here")
    assert mine.format(stacked) == stock.format(
        _record(1_790_000_002.0, stack_info="Stack (most recent call last): here")
    )
    assert mine.formatTime(plain, "%H") == stock.formatTime(plain, "%H")


def test_configure_leaves_a_configured_logging_alone() -> None:
    # Under pytest the root logger has its capture handlers: nothing changes.
    before = list(logging.getLogger().handlers)
    assert logs.configure(logging.DEBUG) is False
    assert logging.getLogger().handlers == before


def test_configure_in_a_fresh_process_logs_in_the_format_with_tracebacks() -> None:
    code = (
        "import logging\n"
        "from app import logs\n"
        "assert logs.configure(logging.INFO)\n"
        "assert not logs.configure(logging.INFO)\n"  # once
        "log = logging.getLogger('app.x')\n"
        "log.debug('not shown')\n"
        "log.info('job %s started: %d%%', 'j1', 5)\n"
        "try:\n"
        "    1 / 0\n"
        "except ZeroDivisionError:\n"
        "    log.exception('failed')\n"
    )
    stderr = _fresh(code)
    lines = stderr.splitlines()
    assert re.fullmatch(rf"{STAMP} INFO app\.x: job j1 started: 5%", lines[0]), lines
    assert re.fullmatch(rf"{STAMP} ERROR app\.x: failed", lines[1]), lines
    assert lines[2] == "Traceback (most recent call last):"
    assert lines[-1] == "ZeroDivisionError: division by zero"
    assert "not shown" not in stderr


@pytest.mark.slow
async def test_a_worker_process_logs_a_job_as_it_starts_and_as_it_ends(
    store: Store, spawn: Callable[..., WorkerProcess]
) -> None:
    worker = await spawn().ready()
    job_id = await submit(store, job(name="logged"))
    view = await finished(store, job_id)
    assert view.status == "succeeded"
    execution = view.result.execution
    assert execution is not None
    await worker.wait_log(rf"job {job_id} succeeded")  # logged after the commit
    lines = [line for line in worker.log().splitlines() if f"job {job_id} " in line]
    assert len(lines) == 2, lines
    start = rf"{STAMP} INFO app\.worker: job {job_id} started: attempt 1, tenant {TENANT}, "
    assert re.fullmatch(start + r"queued \d+\.\d{3}s", lines[0]), lines
    cost = "?" if execution.cost is None else f"{execution.cost:.6g}"
    end = (
        rf"{STAMP} INFO app\.worker: job {job_id} succeeded: {execution.llm_calls} calls, "
        rf"{execution.tokens_used} tokens, \${re.escape(cost)}, \d+\.\d{{3}}s"
    )
    assert re.fullmatch(end, lines[1]), lines


def test_info_writes_the_line_logging_writes_and_follows_any_other_route() -> None:
    code = (
        "import logging\n"
        "from app import logs\n"
        "assert logs.configure(logging.INFO)\n"
        "log = logging.getLogger('app.worker')\n"
        "logs.info(log, 'job j1 started: 100% (%s)')\n"  # nothing formatted into it
        "log.info('job j1 started: 100% (%s)')\n"  # the same line through logging (no args)
        "logs.info(logging.getLogger('app.quiet'), 'not shown')\n"
        "logging.getLogger('app.quiet').setLevel(logging.WARNING)\n"
        "logs.info(logging.getLogger('app.quiet'), 'not shown')\n"
        "seen = []\n"
        "class Keep(logging.Handler):\n"
        "    def emit(self, record):\n"
        "        seen.append(record.getMessage())\n"
        "logging.getLogger('app').addHandler(Keep())\n"  # another handler on the way
        "logs.info(log, 'to both')\n"
        "logging.getLogger('app').handlers.clear()\n"
        "log.addFilter(lambda record: False)\n"  # a filter: logging's own way, dropped
        "logs.info(log, 'filtered')\n"
        "log.filters.clear()\n"
        "log.propagate = False\n"  # nowhere to go (logging's last resort, WARNING up)
        "logs.info(log, 'not propagated')\n"
        "log.propagate = True\n"
        "logs.info(log, 'last')\n"
        "assert seen == ['to both'], seen\n"
    )
    stderr = _fresh(code)
    lines = stderr.splitlines()
    assert len(lines) == 5, lines
    assert lines[0][23:] == lines[1][23:]  # past the stamp
    assert re.fullmatch(rf"{STAMP} INFO app\.worker: job j1 started: 100% \(%s\)", lines[0])
    assert re.fullmatch(rf"{STAMP} INFO app\.worker: job j1 started: 100% \(%s\)", lines[1])
    assert re.fullmatch(rf"{STAMP} INFO app\.quiet: not shown", lines[2]), lines
    assert re.fullmatch(rf"{STAMP} INFO app\.worker: to both", lines[3]), lines
    assert re.fullmatch(rf"{STAMP} INFO app\.worker: last", lines[4]), lines


def test_info_under_a_configured_logging_goes_through_it(caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.INFO, logger="app.worker"):
        logs.info(logging.getLogger("app.worker"), "job j9 started: 5%")
    assert [r.getMessage() for r in caplog.records] == ["job j9 started: 5%"]


def test_info_stamps_a_line_with_the_time_given(caplog: pytest.LogCaptureFixture) -> None:
    log = logging.getLogger("app.worker")
    with caplog.at_level(logging.INFO, logger="app.worker"):
        logs.info(log, "job j8 started: 5%", 1_790_000_000.25)
        before = time.time()
        logs.info(log, "job j8 ended")
        after = time.time()
    stamped, now = caplog.records
    assert stamped.getMessage() == "job j8 started: 5%"
    assert stamped.created == 1_790_000_000.25
    assert stamped.msecs == 250.0
    assert before <= now.created <= after  # unstamped: the time it was logged
    formatter = logs.Formatter()
    stock = logging.Formatter(logs.FORMAT)
    assert formatter.format(stamped) == stock.format(stamped)


def test_info_written_straight_stamps_a_line_with_the_time_given() -> None:
    code = (
        "import logging, time\n"
        "from app import logs\n"
        "assert logs.configure(logging.INFO)\n"
        "log = logging.getLogger('app.worker')\n"
        "created = time.mktime((2026, 11, 24, 8, 16, 9, 0, 0, -1)) + 0.5\n"
        "logs.info(log, 'job j1 started', created)\n"
    )
    assert _fresh(code) == "2026-11-24 08:16:09,500 INFO app.worker: job j1 started\n"
