"""The service's log lines: one format for every process, each line cheap to make.

    logs.configure(logging.INFO)   # reprompt serve / api / worker, before anything logs

A worker logs a line per job, so what a line costs is per-job CPU: the format reads
neither where the line was logged from, nor the thread or process, so none of that is
looked up per line (the logging HOWTO's "Optimization" switches), and the time stamp's
text is made once a second rather than once a line. The lines read exactly as
``logging.basicConfig(format=FORMAT)``'s would.
"""

from __future__ import annotations

import logging
import time
from typing import Final, TextIO

FORMAT: Final = "%(asctime)s %(levelname)s %(name)s: %(message)s"


class Formatter(logging.Formatter):
    """``logging.Formatter(FORMAT)``, the same text made with less work.

    The time stamp (``2026-11-24 08:16:09,123``) is made once per second of the clock, not
    with a ``localtime`` and a ``strftime`` per line; a line without an exception or a
    stack is put together in one step.
    """

    def __init__(self) -> None:
        super().__init__(FORMAT)
        self._second: tuple[int, str] = (-1, "")  # the second stamped last, and its text

    def format(self, record: logging.LogRecord) -> str:
        if record.exc_info or record.exc_text or record.stack_info:
            return super().format(record)
        record.message = message = record.getMessage()
        record.asctime = stamp = self.formatTime(record)
        return f"{stamp} {record.levelname} {record.name}: {message}"  # FORMAT's text

    def formatTime(self, record: logging.LogRecord, datefmt: str | None = None) -> str:  # noqa: N802 (logging's name)
        if datefmt is not None:
            return super().formatTime(record, datefmt)
        return self.stamp(record.created, record.msecs)

    def stamp(self, created: float, msecs: float) -> str:
        """The time stamp of a record made at ``created`` (``msecs``: its milliseconds)."""
        second = int(created)
        cached, text = self._second
        if cached != second:
            text = time.strftime(self.default_time_format, self.converter(second))
            self._second = (second, text)  # one assignment: safe for another thread's read
        msec = self.default_msec_format
        return text if msec is None else msec % (text, msecs)


def info(logger: logging.Logger, message: str, created: float | None = None) -> None:
    """``logger.info(message)``, stamped ``created`` (a ``time.time()``) when given.

    For a line written later than what it tells of happened (the worker's 'started' line).
    """
    if not logger.isEnabledFor(logging.INFO):
        return
    if created is None:
        logger.info(message)
        return
    fn, lno, func, _ = logger.findCaller()
    record = logger.makeRecord(logger.name, logging.INFO, fn, lno, message, (), None, func)
    record.relativeCreated += (created - record.created) * 1000
    record.created = created
    record.msecs = int((created - int(created)) * 1000) + 0.0  # as LogRecord works it out
    logger.handle(record)


def configure(level: int, stream: TextIO | None = None) -> bool:
    """Log to ``stream`` (stderr) at ``level`` in ``FORMAT``; True if it configured.

    Logging configured already (an embedding app's, a test's capture) is left as it is.
    """
    root = logging.getLogger()
    if root.handlers:
        return False
    handler = logging.StreamHandler(stream)
    handler.setFormatter(Formatter())
    root.addHandler(handler)
    root.setLevel(level)
    # Nothing FORMAT shows needs them: no thread, process or multiprocessing look-up per
    # record (logging's documented switches; its caller look-up has none).
    logging.logThreads = False
    logging.logProcesses = False
    logging.logMultiprocessing = False
    return True
