"""Structured JSON log lines (Cloud Logging field names: `severity`, `message`).

Several processes (every rank, the launcher) share one stdout. Each line goes out in a single
os.write() of the whole line with its newline, so lines of different processes never merge
(print() writes the text and the newline separately, which interleaves under PYTHONUNBUFFERED=1).
A pipe write up to PIPE_BUF (4096 bytes on Linux) is atomic; longer lines are still written in
one call, which the kernel does not split for regular files opened for append.
"""

from __future__ import annotations

import logging
import os

import structlog

_SEVERITY = {
    "debug": "DEBUG",
    "info": "INFO",
    "warning": "WARNING",
    "warn": "WARNING",
    "error": "ERROR",
    "exception": "ERROR",
    "critical": "CRITICAL",
}


def _add_severity(_logger, method_name: str, event_dict: dict) -> dict:
    event_dict["severity"] = _SEVERITY.get(method_name, "DEFAULT")
    return event_dict


class LineWriter:
    """A structlog logger that writes each rendered line to a file descriptor in one write()."""

    def __init__(self, fd: int = 1):
        self.fd = fd

    def msg(self, message: str) -> None:
        data = (message + "\n").encode("utf-8", "replace")
        while data:  # a write interrupted part-way (signal) returns a short count: finish the line
            try:
                written = os.write(self.fd, data)
            except InterruptedError:
                continue
            except OSError:
                return  # stdout gone: logging must never kill training
            data = data[written:]

    log = debug = info = warn = warning = error = critical = exception = fatal = msg


def _line_writer_factory(*_args) -> LineWriter:
    return LineWriter(1)


def configure(verbose: bool, **context) -> structlog.typing.FilteringBoundLogger:
    """One JSON object per line on stdout. Quiet processes (ranks other than 0) log warnings only.

    `context` is bound into every line (workers: rank, local_rank, node_rank; launcher: node_rank).
    """
    structlog.configure(
        processors=[
            _add_severity,
            structlog.processors.TimeStamper(fmt="iso", utc=True, key="time"),
            structlog.processors.format_exc_info,
            structlog.processors.EventRenamer("message"),
            structlog.processors.JSONRenderer(),
        ],
        wrapper_class=structlog.make_filtering_bound_logger(logging.INFO if verbose else logging.WARNING),
        logger_factory=_line_writer_factory,
        cache_logger_on_first_use=False,
    )
    for key, env in (("job_id", "RELAUNCH_JOB_ID"), ("attempt", "RELAUNCH_ATTEMPT")):
        if os.environ.get(env):
            context.setdefault(key, os.environ[env])
    return structlog.get_logger().bind(**context)
